"""`cacheaudit report weekly|conversation`: static, offline HTML cache reports."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pipeline.commands.options import (
    DEFAULT_WAREHOUSE,
    PricesOpt,
    RulesOpt,
    WarehouseOpt,
    day_option,
    err,
    existing_warehouse,
    sql_options,
)

OutOpt = Annotated[
    Path | None,
    typer.Option(
        "--out",
        "-o",
        help="Output directory (default: $CACHEAUDIT_REPORTS_DIR, else reports/out).",
    ),
]


def out_dir(out: Path | None) -> Path:
    """Where the pages go; a file there (a capture, a page) is a mistake said before any work,
    not an OSError about a file that exists."""
    from pipeline.errors import UsageError
    from pipeline.reports.weekly import default_out_dir

    path = out or default_out_dir()
    if path.exists() and not path.is_dir():
        named = "--out" if out is not None else "the output directory (CACHEAUDIT_REPORTS_DIR)"
        raise UsageError(
            f"{named} {path} is a file, not a directory",
            hint="name a directory for the pages; it is created if it does not exist",
        )
    return path


def weekly(
    week: Annotated[str | None, typer.Option(help="ISO week, e.g. 2026-W48.")] = None,
    since: Annotated[str | None, typer.Option(help="First day (YYYY-MM-DD, UTC).")] = None,
    until: Annotated[
        str | None, typer.Option(help="Last day, inclusive (YYYY-MM-DD, UTC).")
    ] = None,
    all_weeks: Annotated[
        bool, typer.Option("--all", help="Every week with data; skips unchanged weeks.")
    ] = False,
    out: OutOpt = None,
    warehouse: WarehouseOpt = DEFAULT_WAREHOUSE,
    prices: PricesOpt = None,
    rules: RulesOpt = None,
) -> None:
    """One self-contained HTML page per ISO week, plus index.html (default: the latest week).

    The pages open offline in any browser: the chart library is inlined. Each week's top
    conversations by tokens lost link to their own pages, written beside it. Prints the path
    of each weekly page written.

    Each page reads only its week's days and a margin of days before it, so it takes as long
    with months of history as with one week. Run `cacheaudit build` after an ingest: the pages
    then take conversations and breaks from the whole history (docs/reports.md).
    """
    from pipeline.reports.numbers import count
    from pipeline.reports.weekly import WeekSelection, generate_weekly

    selection = WeekSelection(
        week=week,
        since=day_option(since, "--since"),
        until=day_option(until, "--until"),
        all_weeks=all_weeks,
    )
    from pipeline import materialise

    selection.check()
    target = out_dir(out)
    wh, options = existing_warehouse(warehouse), sql_options(prices, rules)
    if wh.exists() and not materialise.stored_views_current(wh, options):
        err(
            "note: views not built since the last ingest: each page computes them from its own"
            " days (docs/reports.md); `cacheaudit build` first gives figures from the whole"
            " history, and faster pages"
        )
    result = generate_weekly(wh, target, selection, options=options, progress=err)
    for path in result.unchanged:
        err(f"{path}: unchanged inputs, skipped")
    for path in result.written:
        typer.echo(str(path))
    linked = (
        f" and {count(len(result.conversations), 'conversation page')} they link to"
        if result.conversations
        else ""
    )
    err(
        f"{len(result.written)} written{linked}, {len(result.unchanged)} unchanged;"
        f" index: {result.index}"
    )


def conversation(
    conversation_id: Annotated[
        str, typer.Argument(help="A conversation id, as `diagnose` and the weekly page name it.")
    ],
    out: OutOpt = None,
    warehouse: WarehouseOpt = DEFAULT_WAREHOUSE,
    prices: PricesOpt = None,
    rules: RulesOpt = None,
) -> None:
    """One page for one conversation, turn by turn: input read from cache vs uncached, the
    expected read, cache-break causes and diff excerpts. Prints the page's path."""
    from pipeline import build_first
    from pipeline.reports.conversation import generate_conversation
    from pipeline.reports.sections import conversation_turns

    target = out_dir(out)
    wh, options = existing_warehouse(warehouse), sql_options(prices, rules)
    # the page reads its conversation over the whole history
    build_first.store_stale_views(wh, [conversation_turns.VIEW], options, say=err)
    path = generate_conversation(wh, target, conversation_id, options=options)
    typer.echo(str(path))


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Static HTML cache reports that open offline.", no_args_is_help=True)
    group.command("weekly")(weekly)
    group.command("conversation")(conversation)
    app.add_typer(group, name="report")
