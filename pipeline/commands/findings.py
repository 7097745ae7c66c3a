"""`cacheaudit findings` (the cache breaks grouped by what to fix) and `cacheaudit check` (a CI
gate over them)."""

from __future__ import annotations

import json
import sys
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any

import typer

from pipeline.commands.options import (
    DEFAULT_WAREHOUSE,
    PricesOpt,
    RulesOpt,
    WarehouseOpt,
    err,
    existing_warehouse,
    sql_options,
)
from pipeline.errors import LimitExceeded, NotFoundError, UsageError

if TYPE_CHECKING:
    from pipeline.findings import Verdict


def period_bound(value: str | None, flag: str) -> datetime | None:
    """A --since or --until value as the instant the period starts or ends (exclusive): a day
    (YYYY-MM-DD) is whole, so `--until 2026-11-29` ends at 2026-11-30T00:00 as `summary` and
    `report` read it; an instant (YYYY-MM-DDTHH:MM[:SS], UTC unless it says) is taken as is."""
    if value is None:
        return None
    try:
        if "T" not in value.upper() and " " not in value:  # a day: 2026-12-31, 20261231
            day = date.fromisoformat(value)
            start = datetime(day.year, day.month, day.day, tzinfo=UTC)
            if flag != "--until":
                return start
            # `--until 9999-12-31` is "everything": no instant follows that day
            return None if day == date.max else start + timedelta(days=1)
        instant = datetime.fromisoformat(value)
    except ValueError:
        raise UsageError(
            f"{flag} {value!r} is not a date or an instant",
            hint="write YYYY-MM-DD (a whole day, UTC) or YYYY-MM-DDTHH:MM:SS",
        ) from None
    if instant.tzinfo is None:
        return instant.replace(tzinfo=UTC)
    try:
        return instant.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00+05:00 is before the first day a date can hold
        raise UsageError(f"{flag} {value!r} is out of range", hint="write it in UTC") from None


def findings(
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="DATE",
            help="Only the breaks from this day, or this instant, on (UTC,"
            " YYYY-MM-DD[THH:MM:SS]); every figure is then that period's.",
        ),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option(
            "--until",
            metavar="DATE",
            help="Only the breaks through this day, inclusive, as in `summary` and `report`;"
            " or before this instant (YYYY-MM-DDTHH:MM:SS).",
        ),
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
    observed days x 7), an example request and the fix. With --since/--until the breaks of
    that period are grouped again: every figure is the period's. --format csv or json adds every
    column (where in the prompt, share of turns, first and last seen, both sides of the change).

    $ cacheaudit findings --since 2026-11-01 --agent research-agent --format csv
    """
    from pipeline import build_first, output
    from pipeline import findings as lib
    from pipeline import sql as sqlmod

    if fmt not in ("table", "csv", "json"):
        raise UsageError(f"unknown format {fmt!r}", hint="one of table, csv, json")
    start, end = period_bound(since, "--since"), period_bound(until, "--until")
    if start is not None and end is not None and end <= start:
        raise UsageError(f"--until {until} is before --since {since}: the period is empty")
    wh, options = existing_warehouse(warehouse), sql_options(prices, rules)
    period = lib.period_of(wh, start, end)
    if period is None:  # the whole history (a period read builds nothing)
        build_first.store_stale_views(wh, ["findings"], options, say=err)
    con = sqlmod.connect(wh, options=options, only=["findings"], period=period)
    if agent is not None and not lib.has_agent(con, agent):
        # a period read sees only the period's requests: there the agent may just be quiet
        if period is not None:
            typer.echo(f"no findings: no requests of agent {agent!r} in the period asked", err=True)
            return
        raise NotFoundError(
            f"no requests of agent {agent!r}",
            hint='`cacheaudit sql "SELECT DISTINCT agent FROM requests"` lists the agents',
        )
    rel = lib.select(con, since=start, until=end, agent=agent)
    if fmt == "table":
        written = _table(rel.select(*lib.TOP_COLUMNS))
    else:
        written = output.emit(rel, fmt, None)
    if not written:
        asked = " in the period or of the agent asked" if since or until or agent else ""
        typer.echo(
            f"no findings{asked}: no cache break after a conversation's first turn", err=True
        )


def _table(rel: Any) -> int:
    """The findings for reading: tokens with separators, money to 4 places (two significant
    digits below that, so a loss never reads 0.0000), numbers to the right, the fix whole (it
    is the point of the row)."""
    from pipeline import output
    from pipeline.reports.numbers import money

    columns = list(rel.columns)
    numbers = {"turns", "tokens_lost", "lost_cost", "saving_per_week"}
    rows = [
        tuple(
            v if v is None or c not in numbers else (f"{v:,}" if isinstance(v, int) else money(v))
            for c, v in zip(columns, row, strict=True)
        )
        for row in rel.fetchall()
    ]
    right = frozenset(i for i, c in enumerate(columns) if c in numbers)
    output.write_table(columns, rows, sys.stdout, max_width=120, right=right)
    return len(rows)


def check(
    max_lost_share: Annotated[
        float | None,
        typer.Option(
            "--max-lost-share",
            help="Fail above this share of input tokens lost, from 0 to 1 (0.05 is 5%).",
        ),
    ] = 0.05,
    max_lost_money: Annotated[
        float | None,
        typer.Option("--max-lost-money", help="Fail above this money lost, in any currency."),
    ] = None,
    fail_on: Annotated[
        list[str] | None,
        typer.Option(
            "--fail-on",
            help="Fail when any break has this cause (repeatable): expired, model_changed,"
            " tools_changed, system_changed, history_rewritten, below_minimum, provider_miss.",
        ),
    ] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="text or json.")] = "text",
    github: Annotated[
        bool,
        typer.Option(
            "--github", help="Also print a GitHub Actions ::error annotation per finding (stderr)."
        ),
    ] = False,
    warehouse: WarehouseOpt = DEFAULT_WAREHOUSE,
    prices: PricesOpt = None,
    rules: RulesOpt = None,
) -> None:
    """A CI gate: exit 0 when the cache breaks stay within the limits, exit 7 otherwise.

    Lost share = tokens lost to cache breaks / input tokens (requests with known input);
    a provider miss counts in neither limit (its money is the provider's).
    On failure the findings behind each broken limit are listed (stdout).

    $ cacheaudit check -w warehouse --max-lost-share 0.05 --fail-on system_changed
    """
    from pipeline import build_first
    from pipeline import findings as lib
    from pipeline import sql as sqlmod

    if fmt not in ("text", "json"):
        raise UsageError(f"unknown format {fmt!r}", hint="one of text, json")
    # A limit no figure can cross passes every build: 5 written for 5% would never fail.
    if max_lost_share is not None and not 0 <= max_lost_share <= 1:
        raise UsageError(
            f"--max-lost-share {max_lost_share:g} is not a share between 0 and 1",
            hint="a share is a fraction of the input tokens: 5% is 0.05",
        )
    if max_lost_money is not None and not max_lost_money >= 0:
        raise UsageError(f"--max-lost-money {max_lost_money:g} is not an amount of 0 or more")
    unknown = [c for c in fail_on or [] if c not in lib.CAUSES]
    if unknown:
        raise UsageError(
            f"--fail-on {unknown[0]!r} is not a cause", hint="one of " + ", ".join(lib.CAUSES)
        )
    wh, options = existing_warehouse(warehouse), sql_options(prices, rules)
    build_first.store_stale_views(wh, ["findings", "requests"], options, say=err)
    con = sqlmod.connect(wh, options=options, only=["findings", "requests"])
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
            "breaks_loss_unknown": verdict.breaks_loss_unknown,
            "breaks_unpriced": verdict.breaks_unpriced,
            "requests_input_unknown": verdict.requests_input_unknown,
            "findings": [{k: f[k] for k in (*keys, "fix")} for f in verdict.findings],
        }
        typer.echo(json.dumps(doc, default=str))
    else:
        share = "unknown" if verdict.lost_share is None else f"{verdict.lost_share:.4f}"
        typer.echo(("FAIL: " + "; ".join(verdict.broken)) if verdict.broken else "ok")
        typer.echo(f"lost share: {share}{_left_out(verdict)}")
        for f in verdict.findings:
            typer.echo(_finding_line(f))
    if github:
        # On stderr, which the Actions runner reads for workflow commands as it reads stdout,
        # so stdout stays the text or the one JSON document a program parses.
        for f in verdict.findings:
            message = _finding_line(f).strip()
            typer.echo(f"::error title=cache break {f['cause']}::{_escape(message)}", err=True)
    if verdict.broken:
        raise LimitExceeded("the cache-break gate failed: " + "; ".join(verdict.broken))


def _left_out(verdict: Verdict) -> str:
    """What the limits could not count, as the summary says it: never silently 0. A break whose
    loss is unknown is unpriced too, so only the unpriced ones beyond those are added: "5 with
    unknown loss, 5 unpriced" read as 10 breaks left out where there were 5."""
    from pipeline.reports.numbers import count

    more_unpriced = max(verdict.breaks_unpriced - verdict.breaks_loss_unknown, 0)
    parts = [
        f"{count(n, noun)} {label}"
        for n, noun, label in (
            (verdict.breaks_loss_unknown, "break", "with unknown loss"),
            (more_unpriced, "more break", "unpriced (loss known, no price)"),
            (verdict.requests_input_unknown, "request", "with unknown input"),
        )
        if n
    ]
    return f" (left out: {', '.join(parts)})" if parts else ""


def _finding_line(f: dict[str, Any]) -> str:
    """One finding as `check` lists it, worded as `summary` words its top findings (a loss
    that rounds to 0.0000 keeps two significant digits: it is not 0)."""
    from pipeline.reports.numbers import count, money

    what = f["cause"] + (f", {f['change_class']}" if f["change_class"] else "")
    tokens = "unknown" if f["tokens_lost"] is None else f"{f['tokens_lost']:,}"
    cost = "unpriced" if f["lost_cost"] is None else f"{money(f['lost_cost'])} {f['currency']}"
    turns = count(f["turns"], "turn")
    return f"  {f['scope']}: {what}, {turns}, {tokens} tokens lost, {cost} - {f['fix']}"


def _escape(message: str) -> str:
    """A workflow command's message with the characters that would end or corrupt it encoded,
    as GitHub's toolkit encodes them (%, CR, LF)."""
    return message.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def register(app: typer.Typer) -> None:
    app.command()(findings)
    app.command()(check)
