"""`cacheaudit diagnose` (why did the cache miss, turn by turn) and `cacheaudit build` (store
the heavy prefix views as Parquet under <warehouse>/derived/)."""

from __future__ import annotations

from typing import Annotated

import typer

from pipeline.commands.options import (
    DEFAULT_WAREHOUSE,
    PricesOpt,
    RulesOpt,
    WarehouseOpt,
    err,
    ingested_warehouse,
    say_built,
    sql_options,
)
from pipeline.engines.options import EngineOpt, SparkMasterOpt
from pipeline.errors import UsageError


def diagnose(
    warehouse: WarehouseOpt = DEFAULT_WAREHOUSE,
    conversation: Annotated[
        list[str] | None,
        typer.Option("--conversation", "-c", help="Show this conversation (repeatable)."),
    ] = None,
    request: Annotated[
        list[str] | None,
        typer.Option("--request", "-r", help="Show the conversation of this request (repeatable)."),
    ] = None,
    worst: Annotated[
        int,
        typer.Option(help="Without -c/-r: the N conversations that lost most tokens.", min=1),
    ] = 3,
    all_turns: Annotated[
        bool,
        typer.Option(
            "--all",
            help="Every turn on its own line (input, read, expected read, loss) instead of"
            " one line per run of identical breaks.",
        ),
    ] = False,
    breaks_only: Annotated[
        bool, typer.Option("--breaks-only", help="With --all: only the turns with a break.")
    ] = False,
    prices: PricesOpt = None,
    rules: RulesOpt = None,
) -> None:
    """Why did the cache miss? Per conversation, each run of identical cache breaks on one
    line: the turns it hit, the cause and where the prompt changed, the tokens and money it
    lost, both sides of the change and the fix. --all lists every turn instead.

    -r takes a request id or a unique start of one.

    Examples:

    $ cacheaudit diagnose --worst 5
    $ cacheaudit diagnose -r demo-001-007
    $ cacheaudit diagnose -c research-agent-001 --all --breaks-only
    """
    from pipeline.diagnose import render, render_grouped, timeline

    if (wh := ingested_warehouse(warehouse)) is None:
        return
    turns = timeline(
        wh,
        conversations=conversation or (),
        requests=request or (),
        worst=worst,
        # the money lost is priced as `findings` and `summary` price it: with the user's rows
        options=sql_options(prices, rules),
    )
    if not turns:
        err("no cache breaks found")
        return
    if breaks_only and not all_turns:
        err("--breaks-only applies to --all (the grouped view shows only breaks)")
    typer.echo(render(turns, only_breaks=breaks_only) if all_turns else render_grouped(turns))
    err("tokens are estimates where a prefix is measured (bytes-proportional); see cache_breaks")


def build(
    warehouse: WarehouseOpt = DEFAULT_WAREHOUSE,
    force: Annotated[bool, typer.Option("--force", help="Rebuild even when up to date.")] = False,
    rules: RulesOpt = None,
    engine: EngineOpt = None,
    spark_master: SparkMasterOpt = None,
    split_segments: Annotated[
        int | None,
        typer.Option(
            "--split-segments",
            metavar="N",
            help="Past N segments, compute request_prefix one group of cache scopes at a time, "
            "about N segments each (default 15,000,000, ~500,000 requests). Lower it where "
            "memory is short. DuckDB engine.",
        ),
    ] = None,
) -> None:
    """Compute the heavy prefix views once and store them as Parquet under
    <warehouse>/derived/; later commands reuse them until the inputs change.

    Run it after an ingest. A command that reads the whole history (summary, findings, check,
    diagnose, report conversation, sql) builds what it needs itself when the stored views are
    stale, and says so.

    The views are stored by UTC day. After an ingest, request_prefix computes only the days
    whose requests changed and the days within the horizon after them (3 days with the
    shipped rules); conversation_links and cache_breaks compute the days from the first of
    those on, linked to the stored days before (a conversation has no horizon). The rest is
    kept. A change of the SQL or the rules, or --force, computes everything.

    With --engine spark the same queries/*.sql run as Spark SQL (translated by sqlglot) and
    write the same derived/*.parquet, which `sql`, `diagnose` and `report` read with DuckDB."""
    from pipeline import materialise
    from pipeline.engines import engine_from, master_from

    options = sql_options(None, rules)
    if split_segments is not None and split_segments < 1:
        raise UsageError("--split-segments must be at least 1")
    if (wh := ingested_warehouse(warehouse)) is None:
        return
    if engine_from(engine) == "spark":
        from pipeline.engines.spark_sql import build_on

        results = build_on(master_from(spark_master), wh, options=options, force=force)
    else:
        results = materialise.build(
            wh,
            options=options,
            force=force,
            group_segments=split_segments,
            progress=err,
        )
    say_built(results)
    from pipeline import warehouse_db

    err(warehouse_db.refresh(wh, options))


def register(app: typer.Typer) -> None:
    app.command()(diagnose)
    app.command()(build)
