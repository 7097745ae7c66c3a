"""`cacheaudit findings` (the cache breaks grouped by what to fix) and `cacheaudit check` (a CI
gate over them)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated

import typer

from pipeline.commands.options import (
    DEFAULT_WAREHOUSE,
    PricesOpt,
    RulesOpt,
    WarehouseOpt,
    existing_warehouse,
    sql_options,
)
from pipeline.errors import LimitExceeded, UsageError


def findings(
    since: Annotated[
        datetime | None, typer.Option("--since", help="Only the breaks on or after (UTC).")
    ] = None,
    until: Annotated[
        datetime | None, typer.Option("--until", help="Only the breaks before (UTC).")
    ] = None,
    agent: Annotated[str | None, typer.Option("--agent", help="Only this agent's.")] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table, csv or json.")] = "table",
    warehouse: WarehouseOpt = DEFAULT_WAREHOUSE,
    prices: PricesOpt = None,
    rules: RulesOpt = None,
) -> None:
    """Cache breaks grouped by cause, where and what changed, costliest first, with the fix.

    One row per (agent, else conversation; cause; changed segment; change class; currency):
    turns affected, tokens and money lost, the saving per week if fixed (money lost over the
    observed days x 7), an example with both sides of the change. With --since/--until the
    breaks of that period are grouped again: every figure is the period's.

    cacheaudit findings --since 2026-11-01 --agent research-agent --format csv
    """
    from pipeline import findings as lib
    from pipeline import output
    from pipeline import sql as sqlmod

    if fmt not in ("table", "csv", "json"):
        raise UsageError(f"unknown format {fmt!r}", hint="one of table, csv, json")
    con = sqlmod.connect(
        existing_warehouse(warehouse), options=sql_options(prices, rules), only=["findings"]
    )
    output.emit(lib.select(con, since=since, until=until, agent=agent), fmt, None)


def check(
    max_lost_share: Annotated[
        float | None,
        typer.Option("--max-lost-share", help="Fail above this share of input tokens lost."),
    ] = 0.05,
    max_lost_money: Annotated[
        float | None,
        typer.Option("--max-lost-money", help="Fail above this money lost, in any currency."),
    ] = None,
    fail_on: Annotated[
        list[str] | None,
        typer.Option("--fail-on", help="Fail when any break has this cause (repeatable)."),
    ] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="text or json.")] = "text",
    github: Annotated[
        bool, typer.Option("--github", help="Also print GitHub Actions ::error annotations.")
    ] = False,
    warehouse: WarehouseOpt = DEFAULT_WAREHOUSE,
    prices: PricesOpt = None,
    rules: RulesOpt = None,
) -> None:
    """A CI gate: exit 0 when the cache breaks stay within the limits, exit 7 otherwise.

    Lost share = tokens lost to cache breaks / input tokens (requests with known input).
    On failure the findings behind each broken limit are listed (stdout).

    cacheaudit check -w warehouse --max-lost-share 0.05 --fail-on system_changed
    """
    from pipeline import findings as lib
    from pipeline import sql as sqlmod

    if fmt not in ("text", "json"):
        raise UsageError(f"unknown format {fmt!r}", hint="one of text, json")
    con = sqlmod.connect(
        existing_warehouse(warehouse),
        options=sql_options(prices, rules),
        only=["findings", "requests"],
    )
    verdict = lib.check(
        con, max_lost_share=max_lost_share, max_lost_money=max_lost_money, fail_on=fail_on or []
    )
    keys = ("scope", "cause", "change_class", "turns", "tokens_lost", "currency", "lost_cost")
    if fmt == "json":
        doc = {
            "ok": not verdict.broken,
            "broken": verdict.broken,
            "lost_share": verdict.lost_share,
            "lost_money": verdict.lost_money,
            "findings": [{k: f[k] for k in (*keys, "fix")} for f in verdict.findings],
        }
        typer.echo(json.dumps(doc, default=str))
    else:
        share = "n/a" if verdict.lost_share is None else f"{verdict.lost_share:.4f}"
        typer.echo(("FAIL: " + "; ".join(verdict.broken)) if verdict.broken else "ok")
        typer.echo(f"lost share: {share}")
        for f in verdict.findings:
            money = (
                "unpriced" if f["lost_cost"] is None else f"{f['lost_cost']:.4f} {f['currency']}"
            )
            typer.echo(
                f"  {f['scope']}: {f['cause']} {f['change_class'] or ''} {f['turns']} turns,"
                f" {f['tokens_lost']} tokens, {money} - {f['fix']}"
            )
    if github:
        for f in verdict.findings:
            typer.echo(f"::error title=cache break {f['cause']}::{f['scope']}: {f['fix']}")
    if verdict.broken:
        raise LimitExceeded("cache breaks over the limit: " + "; ".join(verdict.broken))


def register(app: typer.Typer) -> None:
    app.command()(findings)
    app.command()(check)
