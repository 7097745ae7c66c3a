"""`cacheaudit summary`: the headline numbers, or one row per day, model, agent or session."""

from __future__ import annotations

import sys
from datetime import date
from typing import Annotated, Any

import typer

from pipeline.commands.options import (
    DEFAULT_WAREHOUSE,
    PricesOpt,
    RulesOpt,
    WarehouseOpt,
    day_option,
    err,
    existing_warehouse,
    no_requests_yet,
    sql_options,
)
from pipeline.errors import UsageError
from pipeline.reports.numbers import count

SIMULATED_NOTE = (
    "answered by the cacheaudit simulator (`simulate serve`): their cost is what the provider"
    " would charge, not a bill"
)


def register(app: typer.Typer) -> None:
    app.command("summary")(summary)


def summary(
    by: Annotated[
        str | None,
        typer.Option(help="One row per day, model, agent or session instead of the totals."),
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="With --by: first day (YYYY-MM-DD, UTC).")
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="With --by: last day, inclusive (YYYY-MM-DD, UTC).")
    ] = None,
    fmt: Annotated[
        str, typer.Option("--format", "-f", help="table (for reading), csv or json.")
    ] = "table",
    warehouse: WarehouseOpt = DEFAULT_WAREHOUSE,
    prices: PricesOpt = None,
    rules: RulesOpt = None,
) -> None:
    """Headline numbers: requests, tokens, hit ratio, cost, savings, money lost.

    Input and output tokens and the token-weighted hit ratio, each with the requests it leaves
    out as unknown; cost, savings and what the provider served below its own caching rules
    per currency, with the unpriced requests (and why, in words) and the priced ones whose
    savings or shortfall are
    unknown counted.

    With --by day, model, agent or session: one row per group, for the days from --since to
    --until: requests, input and cache read tokens, hit ratio, cost, saved, the tokens lost to
    cache breaks, and the requests each figure leaves out as unknown. --format csv or json
    prints every column for programs: the summary_by table, or without --by the headline row
    (docs/tables.md); its json adds the money: costs per currency, lost to prompt changes and
    the costliest findings.

    With --since or --until only those days (and a margin before them) are read.

    $ cacheaudit summary --by day --since 2026-11-23 --until 2026-11-29
    """
    if fmt not in ("table", "csv", "json"):
        raise UsageError(f"unknown format {fmt!r}", hint="one of table, csv, json")
    if by is None and (since is not None or until is not None):
        raise UsageError(
            "--since and --until choose the days of --by", hint="e.g. --by day --since 2026-11-23"
        )
    wh = existing_warehouse(warehouse)
    options = sql_options(prices, rules)
    if by is not None:
        _grouped(wh, by, day_option(since, "--since"), day_option(until, "--until"), fmt, options)
    else:
        _headline(wh, fmt, options, str(warehouse))


def _grouped(
    wh: Any, by: str, since: date | None, until: date | None, fmt: str, options: Any
) -> None:
    from pipeline import build_first, output
    from pipeline.summary import grouped

    if since is None and until is None:  # the whole history (a period read builds nothing)
        build_first.store_stale_views(wh, ["summary_requests"], options, say=err)
    _con, rel = grouped(wh, by, since, until, options)
    if fmt != "table":
        output.emit(rel, fmt, None)
        return
    columns = list(rel.columns)
    rows = [dict(zip(columns, values, strict=True)) for values in rel.fetchall()]
    if not rows:
        err(f"no requests in {wh.root} for those days")
    currencies = {r["currency"] for r in rows if r["currency"]}
    money = f" {next(iter(currencies))}" if len(currencies) == 1 else ""
    header = [by, "requests", "input", "cache read", "hit ratio", f"cost{money}",
              f"saved{money}", "tokens lost to breaks", "unknown"]  # fmt: skip
    cells = [
        (
            "NULL" if r["group"] is None else str(r["group"]),
            f"{r['requests']:,}",
            _count(r["input_tokens"]),
            _count(r["cache_read_tokens"]),
            _share(r["hit_ratio"]),
            _money(r["cost"], r["currency"], money),
            _money(r["saved"], r["currency"], money),
            _count(r["tokens_lost_to_breaks"]),
            _unknowns(r),
        )
        for r in rows
    ]
    output.write_table(header, cells, sys.stdout, right=frozenset(range(1, 8)))
    if any(c[-1] for c in cells):
        err(
            "unknown: requests left out of a column because the value is not known (input;"
            " ratio: input or cache read; unpriced; saved; breaks: no prompt segments to"
            " analyse), and breaks whose loss is unknown"
        )
    simulated = sum(r["requests_simulated"] for r in rows)
    if simulated:
        err(f"simulated: {count(simulated, 'request')} {SIMULATED_NOTE}")


def _count(value: int | None) -> str:
    return "unknown" if value is None else f"{value:,}"


def _share(value: float | None) -> str:
    from pipeline.reports.numbers import ratio

    return "n/a" if value is None else ratio(value)


def _money(value: float | None, currency: str | None, shared: str) -> str:
    """An amount; with its currency when the columns do not name one; `-` when nothing of the
    group is priced, `mixed` when its priced requests are in several currencies."""
    from pipeline.reports.numbers import money

    if currency is None:
        return "-"
    if value is None:
        return f"mixed ({currency})" if "+" in currency else "unknown"
    return money(value) + ("" if shared else f" {currency}")


def _unknowns(row: dict[str, Any]) -> str:
    parts = [
        f"{row[column]:,} {label}"
        for column, label in (
            ("requests_input_unknown", "input"),
            ("requests_excluded_from_ratio", "ratio"),
            ("requests_unpriced", "unpriced"),
            ("requests_savings_unknown", "saved"),
            ("breaks_loss_unknown", "break loss"),
            ("requests_breaks_unknown", "breaks"),
        )
        if row[column]
    ]
    return ", ".join(parts)


def _headline_json(con: Any, rel: Any) -> None:
    """The headline row with its money: `costs`, cost_summary's rows (one per currency, and
    the unpriced requests with their reasons), `records_rejected`, `lost_to_prompt_changes`
    per currency (a provider miss aside: its money is in left_on_table) and the costliest
    `findings`."""
    import orjson

    from pipeline import sql as sqlmod
    from pipeline.findings import OURS
    from pipeline.output import _json_default

    def records(relation: Any) -> list[dict[str, Any]]:
        return [dict(zip(relation.columns, r, strict=True)) for r in relation.fetchall()]

    [row] = records(rel)
    # records that became no request, in no figure: counted, as the table says them
    row["records_rejected"] = sqlmod.run(con, "SELECT count(*) FROM rejects").fetchall()[0][0]
    row["costs"] = records(
        sqlmod.run(con, "SELECT * FROM cost_summary ORDER BY currency NULLS LAST")
    )
    row["lost_to_prompt_changes"] = records(
        sqlmod.run(
            con,
            "SELECT currency, sum(lost_cost) AS lost_cost, sum(turns)::BIGINT AS breaks,"
            " sum(lost_cost_unknown)::BIGINT AS breaks_unpriced"
            f" FROM findings WHERE {OURS} GROUP BY currency ORDER BY currency NULLS LAST",
        )
    )
    row["findings"] = records(
        sqlmod.run(
            con,
            "SELECT * FROM findings ORDER BY lost_cost DESC NULLS LAST, tokens_lost DESC LIMIT 10",
        )
    )
    sys.stdout.write(orjson.dumps([row], default=_json_default).decode() + "\n")


def _headline(wh: Any, fmt: str, options: Any, name: str) -> None:
    from pipeline import build_first, output
    from pipeline import sql as sqlmod
    from pipeline.reports.numbers import ratio as share
    from pipeline.summary import reasons_in_words

    views = ["headline", "cost_summary", "findings"]
    build_first.store_stale_views(wh, views, options, say=err)
    con = sqlmod.connect(wh, options=options, only=[*views, "rejects"])
    rel = sqlmod.run(con, "SELECT * FROM headline")
    if fmt == "json":
        _headline_json(con, rel)
        return
    if fmt != "table":
        output.emit(rel, fmt, None)
        return
    data = dict(zip(rel.columns, rel.fetchall()[0], strict=True))
    ratio = data["hit_ratio"]
    if not data["requests"]:
        err(no_requests_yet(name))
    typer.echo(f"requests:            {data['requests']:,}")
    typer.echo(f"  usage unknown:     {data['requests_usage_unknown']:,}")
    ((rejected,),) = sqlmod.run(con, "SELECT count(*) FROM rejects").fetchall()
    if rejected:
        # records that became no request are in no figure below: said, not silently dropped
        typer.echo(
            f"  rejected records:  {rejected:,} (unreadable, in no figure below; why:"
            ' cacheaudit sql "SELECT reason, count(*) FROM rejects GROUP BY 1")'
        )
    # A NULL sum means no row had the value: unknown on every request, never 0. Input can be
    # unknown with usage reported (an OTel span with only output), so it has its own count.
    input_unknown = data["requests_input_unknown"]
    input_line = _known_sum(data["input_tokens"], input_unknown, "input")
    if data["input_tokens"] is not None and input_unknown:
        input_line += f" ({count(input_unknown, 'request')} with unknown input excluded)"
    typer.echo(f"input tokens:        {input_line}")
    read = _known_sum(
        data["cache_read_tokens"], data["requests_excluded_from_ratio"], "input or cache read"
    )
    typer.echo(f"cache read tokens:   {read}")
    typer.echo(
        "hit ratio:           "
        + (share(ratio) if ratio is not None else "n/a")
        + f" (token-weighted; {count(data['requests_excluded_from_ratio'], 'request')} with unknown"
        " input or read excluded)"
    )
    output_unknown = data["requests_output_unknown"]
    output_line = _known_sum(data["output_tokens"], output_unknown, "output")
    if data["output_tokens"] is not None and output_unknown:
        output_line += f" ({count(output_unknown, 'request')} with unknown output excluded)"
    typer.echo(f"output tokens:       {output_line}")
    costs = sqlmod.run(con, "SELECT * FROM cost_summary ORDER BY currency NULLS LAST")
    unpriced = None
    for values in costs.fetchall():
        row = dict(zip(costs.columns, values, strict=True))
        unpriced = row
        if row["currency"] is None:
            continue
        typer.echo(
            f"cost ({row['currency']}):          {_amount(row['cost_total'])}"
            f"  saved by caching {_amount(row['savings'])}"
            f"  provider below its own rules {_amount(row['left_on_table'])}"
            f"  ({_priced_note(row)})"
        )
    if unpriced is not None and unpriced["requests_unpriced"]:
        typer.echo(
            f"  unpriced:          {count(unpriced['requests_unpriced'], 'request')} whose cost is"
            " unknown, not 0:"
        )
        for reason in reasons_in_words(unpriced["unpriced_reasons"]):
            typer.echo(f"                     {reason}")
    if data["requests_simulated"]:
        typer.echo(
            f"  simulated:         {count(data['requests_simulated'], 'request')} {SIMULATED_NOTE}"
        )
    from pipeline.findings import summary_lines

    for line in summary_lines(con):
        typer.echo(line)


def _amount(value: float | None) -> str:
    """A money sum over the priced requests; NULL when it was unknown on every one of them.
    Printed as the weekly report prints it: 4 decimals, more when a non-zero amount needs them."""
    from pipeline.reports.numbers import money

    return "unknown" if value is None else money(value)


def _priced_note(row: dict[str, Any]) -> str:
    """`N requests priced`, and how many of them the savings and left-on-the-table sums leave
    out because their value is unknown (only when some are)."""
    unknown = [
        f"{what} unknown for {n:,}"
        for what, n in (
            ("savings", row["requests_savings_unknown"]),
            ("provider below its own rules", row["requests_ideal_unknown"]),
        )
        if n
    ]
    return "; ".join([f"{count(row['requests'], 'request')} priced", *unknown])


def _known_sum(total: int | None, unknown_rows: int, what: str) -> str:
    """A headline sum, or `unknown` with the number of requests it was unknown on."""
    if total is not None:
        return f"{total:,}"
    if not unknown_rows:
        return "n/a (no requests)"
    return f"unknown ({count(unknown_rows, 'request')} with {what} unknown)"
