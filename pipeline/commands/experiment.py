"""`cacheaudit experiment run|report`: the controlled P/Q/R/S prefix-cache experiment."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    group = typer.Typer(
        help="A controlled prefix-cache experiment (P+Q, P+Q, P+R, P+S, P'+S) and its report.",
        no_args_is_help=True,
    )
    group.command("run")(run)
    group.command("report")(report)
    app.add_typer(group, name="experiment")


def run(
    base_url: Annotated[
        str,
        typer.Option(help="API base URL: the provider's, or the simulator's (see the examples)."),
    ],
    model: Annotated[str, typer.Option(help="Model id, sent unchanged on every request.")],
    document: Annotated[
        Path, typer.Option(help="The fixed document P (UTF-8 text; a few thousand tokens).")
    ],
    repeats: Annotated[int, typer.Option(help="How many times to run the whole plan.")] = 3,
    wait: Annotated[
        float, typer.Option(help="Seconds to wait after each request (cache build time).")
    ] = 10.0,
    with_tool_round: Annotated[
        bool,
        # a plain flag, off by default: its --no- twin said nothing and, being the longest
        # option name, cut itself short at 80 columns ("--no-with-tool-rou…")
        typer.Option(
            "--with-tool-round",
            help="Make every request a forced tool call + tool result round trip.",
        ),
    ] = False,
    out: Annotated[Path, typer.Option(help="Experiment directory to write.")] = Path("experiment"),
    api: Annotated[
        str | None,
        typer.Option(help="chat_completions or messages (default: messages for Anthropic hosts)."),
    ] = None,
    max_tokens: Annotated[int, typer.Option(help="Answer length cap per request.")] = 64,
    fresh_document: Annotated[
        bool,
        typer.Option(help="Start each repeat's P with a run marker line, so repeats start cold."),
    ] = True,
    key_env: Annotated[
        str | None,
        typer.Option(
            help="Name of the environment variable holding the API key (default: the first set"
            " of CACHEAUDIT_API_KEY, DEEPSEEK_API_KEY, OPENAI_API_KEY, ANTHROPIC_API_KEY)."
        ),
    ] = None,
    timeout: Annotated[float, typer.Option(help="Per-request timeout, seconds.")] = 120.0,
) -> None:
    """Send the P/Q/R/S plan through the recording layer and keep every result.

    Writes OUT/experiment.json, OUT/results.jsonl and the capture in OUT/capture/. The API key
    is read from the environment only and is never written.

    Exit status: 0 when at least one request got an ok answer (how many did not is counted on
    stderr; the report shows each request as it ended); 6 when none did (a wrong key, model,
    --api or URL), with the first failure on stderr. While nothing has worked yet the run stops
    early rather than wait out its plan: at once on HTTP 401/403/404, else after 3 failures in a
    row (experiment.json says why in `stopped_early`).

    Example (a provider):

    $ cacheaudit experiment run --base-url https://api.deepseek.com \\
        --model deepseek-v4-flash --document doc.txt

    Example (the local simulator, `cacheaudit simulate serve`):

    $ cacheaudit experiment run --base-url http://127.0.0.1:8788 \\
        --model deepseek-v4-flash --document doc.txt --wait 3

    (--wait must be longer than the simulator's --build-delay, 2 s by default: a cache entry
    can be hit only that long after the request that made it, so a shorter wait reads 0 on
    every step.)
    """
    from pipeline.experiment import (
        KEY_ENVS,
        ExperimentConfig,
        RequestResult,
        key_from_env,
        run_experiment,
    )

    def show(r: RequestResult) -> None:
        read = "?" if r.cache_read_tokens is None else f"{r.cache_read_tokens:,}"
        total = "?" if r.input_tokens is None else f"{r.input_tokens:,}"
        ttft = "-" if r.ttft_ms is None else f"{r.ttft_ms:,.0f} ms"
        phase = "" if r.phase == "question" else f" ({r.phase})"
        typer.echo(
            f"repeat {r.repeat} {r.request:>2} {r.label:<5}{phase}: {r.end_state},"
            f" read {read} of {total} input tokens, first text {ttft}",
            err=True,
        )

    cfg = ExperimentConfig(
        base_url=base_url,
        model=model,
        document=document,
        out_dir=out,
        repeats=repeats,
        wait_s=wait,
        with_tool_round=with_tool_round,
        api=api,
        max_tokens=max_tokens,
        fresh_document=fresh_document,
        timeout_s=timeout,
        api_key_env=key_env,
    )
    env = dict(os.environ)
    key, _ = key_from_env(env, key_env, base_url)  # raises without a key, unless loopback
    if key is None:
        typer.echo(
            f"warning: {' / '.join((key_env,) if key_env else KEY_ENVS)} not set: sending"
            " requests without an API key (fine for the local simulator, which needs none)",
            err=True,
        )
    summary = run_experiment(cfg, env, progress=show)
    typer.echo(
        f"run {summary.run_id}: {summary.requests} requests, {summary.failed} not ok -> {out}",
        err=True,
    )
    if summary.requests and summary.failed == summary.requests:
        from pipeline.errors import NetworkError
        from pipeline.redact import redact_text

        first = next(r for r in summary.results if r.end_state != "ok")
        said = " ".join(redact_text(first.error or "no message").split())[:200]
        status = f" {first.status}" if first.status is not None else ""
        stopped = f"; stopped early: {summary.stopped}" if summary.stopped else ""
        raise NetworkError(
            f"every request failed ({summary.failed} of {summary.requests} not ok); the first:"
            f" {first.end_state}{status}: {said}{stopped}",
            hint=f"each one is in {out / 'results.jsonl'}; check --base-url, --api, --model"
            " and the API key",
        )
    if summary.failed:
        typer.echo(
            f"warning: {summary.failed} of {summary.requests} requests were not ok; the report"
            " shows each as it ended",
            err=True,
        )
    typer.echo(
        f"next: cacheaudit ingest {out / 'capture'} -w {out / 'warehouse'} &&"
        f" cacheaudit experiment report {out} -w {out / 'warehouse'}",
        err=True,
    )
    typer.echo(summary.run_id)


def report(
    experiment_dir: Annotated[Path, typer.Argument(help="The directory `experiment run` wrote.")],
    warehouse: Annotated[
        Path | None,
        typer.Option(
            "--warehouse",
            "-w",
            help="Warehouse holding the ingested capture (default DIR/warehouse).",
        ),
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="HTML file to write (default DIR/report.html).")
    ] = None,
) -> None:
    """Render one self-contained HTML page for an experiment run: hit/miss tokens of every
    repeat per step, the latency distribution, and how to read them."""
    from pipeline.experiment_report import generate
    from pipeline.warehouse import Warehouse

    wh = Warehouse(warehouse or experiment_dir / "warehouse")
    path = generate(experiment_dir, wh, out or experiment_dir / "report.html")
    typer.echo(str(path))
