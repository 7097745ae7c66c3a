"""`cacheaudit capture ...`: record live traffic in the capture format.

    cacheaudit capture proxy --upstream https://api.openai.com
    OPENAI_BASE_URL=http://127.0.0.1:8787/v1 my-agent ...
    cacheaudit ingest capture/

The recording itself lives in `pipeline.capture`; this module only parses options.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pipeline.commands.options import DEFAULT_WAREHOUSE, WarehouseOpt, err
from pipeline.errors import UsageError

capture_app = typer.Typer(
    name="capture",
    help="Record LLM API traffic to capture JSONL (a reverse proxy; see docs/capture.md for the"
    " SDK hooks and the mitmproxy addon).",
    no_args_is_help=True,
)


@capture_app.command("proxy")
def proxy(
    upstream: Annotated[
        str | None,
        typer.Option(help="Upstream base URL for every path, e.g. https://api.openai.com."),
    ] = None,
    listen: Annotated[
        str | None,
        typer.Option(
            # The default is shown, not set (a --config file's `listen` applies when omitted);
            # `\\[` keeps rich from reading `[default: ...]` as markup and dropping it.
            help="HOST:PORT to listen on; a bare PORT means 127.0.0.1:PORT."
            " \\[default: 127.0.0.1:8787]",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Capture directory. \\[default: capture]"),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", help="TOML file routing path prefixes / Host headers to upstreams."
        ),
    ] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="One line per exchange on stderr.")
    ] = False,
    summary_every: Annotated[
        float, typer.Option(help="Seconds between summary lines when not --verbose (0: none).")
    ] = 60.0,
    read_timeout: Annotated[
        float, typer.Option(help="Seconds without a byte from the upstream before giving up.")
    ] = 600.0,
    connect_timeout: Annotated[
        float, typer.Option(help="Seconds to connect to the upstream.")
    ] = 10.0,
    header_timeout: Annotated[
        float,
        typer.Option(help="Seconds a client has to send a request's first line and headers."),
    ] = 60.0,
    fsync: Annotated[
        str, typer.Option(help="always, interval (at most 1 s behind) or never.")
    ] = "interval",
    rotate_mb: Annotated[
        int, typer.Option(help="Start a new file past this size (files also rotate hourly).")
    ] = 256,
    shutdown_grace: Annotated[
        float,
        typer.Option(help="On Ctrl-C/SIGTERM, seconds to let exchanges in flight finish."),
    ] = 10.0,
) -> None:
    """Run a recording reverse proxy: point an SDK's base URL at it.

    Forwards every request unchanged, streams responses back as they arrive, and appends one
    record per exchange to OUT/capture-<hour>Z-p<pid>.jsonl (keys redacted). Ctrl-C or SIGTERM
    stops it once exchanges in flight finish (--shutdown-grace).

    Example: record an OpenAI client, then read what it cost:

    $ cacheaudit capture proxy --upstream https://api.openai.com
    $ OPENAI_BASE_URL=http://127.0.0.1:8787/v1 my-agent     # in another shell
    $ cacheaudit ingest capture/ && cacheaudit summary

    Anthropic: ANTHROPIC_BASE_URL=http://127.0.0.1:8787 with --upstream
    https://api.anthropic.com. In front of the simulator (`cacheaudit simulate serve`, port
    8788): --upstream http://127.0.0.1:8788.
    """
    from pipeline.capture.config import DEFAULT_LISTEN, ProxyConfig, load_config, upstream_route
    from pipeline.capture.proxy import ProxyOptions, serve
    from pipeline.capture.writer import FSYNC_POLICIES

    if upstream is None and config is None:
        raise UsageError(
            "no upstream", hint="pass --upstream https://api.openai.com or --config FILE"
        )
    if fsync not in FSYNC_POLICIES:
        raise UsageError(f"--fsync {fsync!r} is not one of {', '.join(FSYNC_POLICIES)}")
    if rotate_mb < 1:
        raise UsageError("--rotate-mb must be at least 1")
    for name, seconds in (
        ("--header-timeout", header_timeout),
        ("--read-timeout", read_timeout),
        ("--connect-timeout", connect_timeout),
    ):
        if not seconds > 0:  # NaN too
            raise UsageError(f"{name} must be more than 0 seconds")
    if not summary_every >= 0:
        raise UsageError("--summary-every must be 0 (no summary lines) or more seconds")
    cfg = load_config(config) if config is not None else ProxyConfig()
    if upstream is not None:
        cfg.routes.append(upstream_route(upstream))
    options = ProxyOptions(
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        header_timeout=header_timeout,
        verbose=verbose,
        summary_every=summary_every,
    )
    serve(
        cfg,
        out or Path(cfg.out or "capture"),
        listen or cfg.listen or DEFAULT_LISTEN,
        options,
        fsync=fsync,  # type: ignore[arg-type]  # checked against FSYNC_POLICIES above
        rotate_bytes=rotate_mb * 1024 * 1024,
        grace_seconds=shutdown_grace,
    )


@capture_app.command("run", context_settings={"ignore_unknown_options": True})
def run(
    command: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="-- COMMAND [ARGS]...",
            help="The command to run (after --), e.g. -- python my_agent.py.",
            show_default=False,
        ),
    ] = None,
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Capture directory.", show_default=True)
    ] = Path("capture"),
    warehouse: WarehouseOpt = DEFAULT_WAREHOUSE,
    config: Annotated[
        Path | None,
        typer.Option("--config", help="TOML file with more upstreams (as for `capture proxy`)."),
    ] = None,
    no_ingest: Annotated[
        bool, typer.Option("--no-ingest", help="Only record; do not ingest or summarise.")
    ] = False,
) -> None:
    """Run COMMAND with its LLM API traffic recorded, then ingest and summarise.

    Starts the recording proxy on a free 127.0.0.1 port, one route per
    provider (/openai /anthropic /gemini /deepseek /openrouter), and sets
    for COMMAND only: OPENAI_BASE_URL, ANTHROPIC_BASE_URL,
    GOOGLE_GEMINI_BASE_URL, DEEPSEEK_API_BASE, OPENROUTER_API_BASE.
    A base URL you had set already stays that route's upstream. The rest
    of the environment (your API keys) passes unchanged; keys are
    forwarded, never written. Ctrl-C and SIGTERM go to COMMAND; the exit
    code is COMMAND's (128+N when signal N ended it), or as a shell's: 127
    when COMMAND is not found, 126 when it cannot be run.

    Example: cacheaudit capture run -- python my_agent.py --task fix-tests
    """
    from pipeline.capture.config import load_config
    from pipeline.capture.run import ingest_capture, print_reports
    from pipeline.capture.run import run as run_command

    command = [c for i, c in enumerate(command or []) if i or c != "--"]
    if not command:
        raise UsageError("no command to run", hint="cacheaudit capture run -- python my_agent.py")
    extra = load_config(config).routes if config is not None else []
    result = run_command(command, out, extra_routes=extra)
    if no_ingest:
        if result.exchanges:  # say where the recording is, and the next step
            files = " ".join(str(f) for f in result.capture_files)
            err(f"capture: recorded to {files}; ingest with `cacheaudit ingest {out}`")
        raise typer.Exit(result.exit_code)
    if not result.exchanges:
        err(
            f"capture: {command[0]} made no request through the proxy; nothing to ingest"
            " (see docs/capture.md for the variables each tool reads)"
        )
    else:
        ingest_capture(result.capture_files, warehouse)
        print_reports(warehouse)
    raise typer.Exit(result.exit_code)


@capture_app.command("otlp")
def otlp(
    listen: Annotated[
        str, typer.Option(help="HOST:PORT to listen on; a bare PORT means 127.0.0.1:PORT.")
    ] = "127.0.0.1:4318",
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Directory for the OTLP/JSON lines.")
    ] = Path("capture"),
) -> None:
    """Receive OpenTelemetry traces over OTLP/HTTP and write them for `ingest`.

    Accepts POST /v1/traces in protobuf or JSON, gzip or not, as OpenTelemetry
    SDKs and Collectors export them, and appends each export as one OTLP/JSON
    line to OUT/otlp-<hour>Z-p<pid>.jsonl (credential attributes redacted).
    GenAI spans (gen_ai.* attributes) become requests at `cacheaudit ingest`.
    Ctrl-C or SIGTERM stops it.

    Example: cacheaudit capture otlp, then run the app with
    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318
    """
    from pipeline.capture.otlp_receiver import serve

    serve(out, listen)


@capture_app.command("mitm-addon")
def mitm_addon() -> None:
    """Print the mitmproxy addon's path: `mitmdump -s "$(cacheaudit capture mitm-addon)"`."""
    from pipeline.capture import mitm_flow

    typer.echo(str(Path(mitm_flow.__file__).with_name("mitm_addon.py")))


def register(app: typer.Typer) -> None:
    app.add_typer(capture_app)
