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
    cfg = load_config(config) if config is not None else ProxyConfig()
    if upstream is not None:
        cfg.routes.append(upstream_route(upstream))
    options = ProxyOptions(
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
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


@capture_app.command("mitm-addon")
def mitm_addon() -> None:
    """Print the mitmproxy addon's path: `mitmdump -s "$(cacheaudit capture mitm-addon)"`."""
    from pipeline.capture import mitm_flow

    typer.echo(str(Path(mitm_flow.__file__).with_name("mitm_addon.py")))


def register(app: typer.Typer) -> None:
    app.add_typer(capture_app)
