"""`cacheaudit simulate serve`: the loopback provider simulator (pipeline.simulate)."""

from __future__ import annotations

from typing import Annotated

import typer

from pipeline.errors import UsageError

LOOPBACK = ("127.0.0.1", "localhost", "::1")
# One above the capture proxy's default (127.0.0.1:8787): "simulate serve", then "capture proxy
# --upstream http://127.0.0.1:8788" in front of it, works with both defaults.
DEFAULT_PORT = 8788


def register(app: typer.Typer) -> None:
    group = typer.Typer(
        help="A local provider simulator: no inference, each provider's caching rules.",
        no_args_is_help=True,
    )
    group.command("serve")(serve)
    app.add_typer(group, name="simulate")


def serve(
    rules: Annotated[
        str, typer.Option(help="Caching rules: deepseek, openai or anthropic.")
    ] = "deepseek",
    host: Annotated[str, typer.Option(help="Address to bind (loopback by default).")] = "127.0.0.1",
    port: Annotated[
        int,
        typer.Option(
            help="Port to listen on (not the capture proxy's 8787, so the proxy can sit in front).",
            min=0,
            max=65535,
        ),
    ] = DEFAULT_PORT,
    build_delay: Annotated[
        float, typer.Option(help="DeepSeek: seconds before a persisted unit can be hit.")
    ] = 2.0,
    min_unit: Annotated[
        int, typer.Option(help="DeepSeek: shortest unit persisted, in tokens (assumed 64).")
    ] = 64,
    interval_units: Annotated[
        int,
        typer.Option(help="DeepSeek: also persist a unit every N tokens (0 = off; unpublished)."),
    ] = 0,
    anthropic_min_tokens: Annotated[
        int | None,
        typer.Option(help="Anthropic: minimum cacheable prefix (default: by model name)."),
    ] = None,
    base_latency_ms: Annotated[
        float, typer.Option(help="Fixed wait before the first chunk.")
    ] = 20.0,
    prefill_ms_per_1k: Annotated[
        float, typer.Option(help="Extra wait per 1000 uncached prompt tokens.")
    ] = 40.0,
    chunk_ms: Annotated[float, typer.Option(help="Wait between streamed chunks.")] = 2.0,
) -> None:
    """Serve an OpenAI- and Anthropic-compatible API that does no inference but applies one
    provider's prompt-caching rules and reports usage exactly as that provider does.

    Chat Completions at /v1/chat/completions and /chat/completions (deepseek, openai rules);
    Messages at /v1/messages (anthropic rules). Every response names the simulator. Any API key
    is accepted; caches are kept per key and model, in memory only.
    """
    from pipeline.simulate import RULES, SimulatorSettings
    from pipeline.simulate import serve as run_server
    from pipeline.simulate.cache import DeepSeekSettings

    if rules not in RULES:
        raise UsageError(f"unknown rules {rules!r}", hint=", ".join(RULES))
    if host not in LOOPBACK:
        typer.echo(
            f"warning: binding {host}, not loopback: others can reach the simulator", err=True
        )
    settings = SimulatorSettings(
        rules=rules,
        deepseek=DeepSeekSettings(
            build_delay_s=build_delay, min_unit_tokens=min_unit, interval_tokens=interval_units
        ),
        anthropic_min_tokens=anthropic_min_tokens,
        base_latency_ms=base_latency_ms,
        prefill_ms_per_1k=prefill_ms_per_1k,
        chunk_ms=chunk_ms,
    )

    def listening(url: str) -> None:
        typer.echo(f"cacheaudit simulator ({rules} rules, no inference) on {url}", err=True)

    run_server(settings, host, port, on_listening=listening)
