"""Findings (queries/findings.sql; over a period, queries/params/findings_between.sql) for the
commands: filtered listing, the summary's top lines, and the `check` gate. The grouping and the
money are SQL; this module only selects and words."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

import duckdb

from pipeline.period import Period, bounded, first_day_of, last_day_before
from pipeline.reports.numbers import NOISE_DECIMALS, count, money
from pipeline.warehouse import Warehouse

# The causes queries/cache_breaks.sql names (schemas/cache_breaks.json lists the same), in the
# order it tries them: `check --fail-on` refuses any other word, so a typo cannot pass a gate.
CAUSES = (
    "cold_start",
    "expired",
    "model_changed",
    "tools_changed",
    "system_changed",
    "history_rewritten",
    "below_minimum",
    "provider_miss",
)

# What `findings` shows in a terminal (every column is in --format csv/json): the fix last, so
# a long one is read whole rather than cut.
TOP_COLUMNS = (
    "scope",
    "cause",
    "change_class",
    "turns",
    "tokens_lost",
    "currency",
    "lost_cost",
    "saving_per_week",
    "example_request_id",
    "fix",
)


def select(
    con: duckdb.DuckDBPyConnection,
    *,
    since: date | datetime | None = None,
    until: date | datetime | None = None,
    agent: str | None = None,
) -> duckdb.DuckDBPyRelation:
    """The findings of the breaks in [since, until), of one agent: grouped again over those
    breaks only (queries/params/findings_between.sql), so their money is the period's."""
    from pipeline import sql_catalog

    params = {"since": since, "until": until, "agent": agent}
    return con.sql(sql_catalog.param_query_sql("findings_between"), params=params)


def has_agent(con: duckdb.DuckDBPyConnection, agent: str) -> bool:
    """Whether any request of the warehouse names this agent (a misspelt --agent finds none)."""
    found = con.execute("SELECT count(*) FROM requests WHERE agent = $a", {"a": agent})
    return bool(found.fetchall()[0][0])


def period_of(wh: Warehouse, since: datetime | None, until: datetime | None) -> Period | None:
    """The days `findings --since/--until` reads: those of [since, until) and the margin before
    them (pipeline/period.py); everything when neither is given."""
    return bounded(
        wh,
        first_day_of(since) if since is not None else None,
        last_day_before(until) if until is not None else None,
    )


# A provider_miss (the prefix was intact, the provider read less than its own rules allow) is
# the provider's doing: its money is in "provider below its own rules" (request_costs
# .left_on_table), so it is listed as a finding but never summed into "lost to prompt
# changes" nor into check's lost share and money (`--fail-on provider_miss` still fails on it).
OURS = "cause <> 'provider_miss'"


def summary_lines(con: duckdb.DuckDBPyConnection, top: int = 3) -> list[str]:
    """The money lost to prompt changes per currency, then the costliest findings, one a line."""
    lines: list[str] = []
    # Read once: without a current build, findings is computed on the fly, and each query of
    # it computed the breaks again (19k requests: 7 s each)
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE findings_ours AS SELECT * FROM findings WHERE {OURS}"
    )
    totals = con.execute(
        "SELECT currency, sum(lost_cost), sum(lost_cost_unknown) FROM findings_ours"
        " GROUP BY currency ORDER BY currency NULLS LAST"
    ).fetchall()
    for currency, amount, unknown in totals:
        if currency is None:
            if unknown:
                lines.append(
                    f"  lost to prompt changes, unknown: {count(unknown, 'break')} whose loss or"
                    " price is unknown (not counted as 0)"
                )
            continue
        lines.append(
            f"lost to prompt changes ({currency}): {money(amount)}  (cache breaks, priced)"
        )
    rows = con.execute(
        "SELECT scope, cause, change_class, turns, currency, lost_cost, fix FROM findings_ours"
        " WHERE lost_cost > 0 ORDER BY lost_cost DESC LIMIT $top",
        {"top": top},
    ).fetchall()
    for scope, cause, klass, turns, currency, amount, fix in rows:
        what = cause + (f", {klass}" if klass else "")
        lines.append(
            f"  {scope}: {what}, {count(turns, 'turn')}, {money(amount)} {currency} - {fix}"
        )
    return lines


@dataclass(frozen=True, slots=True)
class Verdict:
    """What `check` found: the limits broken (empty = pass) and the findings behind them."""

    broken: list[str] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)
    lost_share: float | None = None
    lost_money: dict[str, float] = field(default_factory=dict)
    # what the two limits leave out as unknown: breaks (provider misses aside) whose loss, or
    # whose money, is unknown, and requests whose input is unknown (not in the share's input)
    breaks_loss_unknown: int = 0
    breaks_unpriced: int = 0
    requests_input_unknown: int = 0


def check(
    con: duckdb.DuckDBPyConnection,
    *,
    max_lost_share: float | None,
    max_lost_money: float | None,
    fail_on: list[str],
) -> Verdict:
    """Compare the warehouse's breaks with the limits. lost share = tokens lost to breaks
    (provider misses aside: see OURS) / input tokens, over the requests whose input is known
    and whose break, if any, has a known loss: a break's input is not counted where its loss
    cannot be."""
    # No finding at all is a loss of 0 (nothing broke); findings whose loss is all unknown
    # leave the share unknown.
    lost, inputs, loss_unknown, unpriced, input_unknown = con.execute(
        "SELECT (SELECT CASE WHEN count(*) = 0 THEN 0 ELSE sum(tokens_lost) END FROM findings"
        f" WHERE {OURS}),"
        " (SELECT sum(r.input_tokens) FROM requests AS r WHERE r.input_tokens IS NOT NULL"
        "   AND NOT EXISTS (SELECT 1 FROM finding_breaks AS b WHERE b.request_id = r.request_id"
        f"   AND b.tokens_lost IS NULL AND b.{OURS})),"
        f" (SELECT coalesce(sum(tokens_lost_unknown), 0) FROM findings WHERE {OURS}),"
        f" (SELECT coalesce(sum(lost_cost_unknown), 0) FROM findings WHERE {OURS}),"
        " (SELECT count(*) FROM requests WHERE input_tokens IS NULL)"
    ).fetchone() or (None, None, 0, 0, 0)
    share = float(lost) / float(inputs) if lost is not None and inputs else None
    lost_money = {
        c: float(m)
        for c, m in con.execute(
            "SELECT currency, sum(lost_cost) FROM findings"
            f" WHERE currency IS NOT NULL AND {OURS} GROUP BY 1"
        ).fetchall()
    }
    rel = con.sql("SELECT * FROM findings ORDER BY lost_cost DESC NULLS LAST, tokens_lost DESC")
    rows = [dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()]
    ours = [r for r in rows if r["cause"] != "provider_miss"]
    broken: list[str] = []
    culprits: list[dict[str, Any]] = []
    if max_lost_share is not None and share is not None and share > max_lost_share:
        broken.append(f"lost share {share:.4f} > {max_lost_share}")
        culprits += [r for r in ours if (r["tokens_lost"] or 0) > 0]
    elif max_lost_share is not None and share is None:
        # an unknown share is no share under the limit: a capture of nothing (a test run that
        # made no LLM call, every record rejected) must not pass the gate. The findings behind
        # it are those whose loss is unknown
        why = "every break's loss is unknown" if inputs else "no request with a known input"
        broken.append(f"lost share unknown ({why}): the limit {max_lost_share} cannot be checked")
        culprits += [r for r in ours if r["tokens_lost_unknown"]]
    for currency, amount in sorted(lost_money.items()):
        # compared as the amount it is: a sum of float prices carries noise below a
        # ten-billionth (0.28 - 0.028 is not 0.252), and a loss exactly on the limit passes
        if max_lost_money is not None and round(amount, NOISE_DECIMALS) > max_lost_money:
            broken.append(f"lost money {_exact(amount)} {currency} > {_exact(max_lost_money)}")
            culprits += [r for r in ours if r["currency"] == currency and r not in culprits]
    for cause in fail_on:
        hits = [r for r in rows if r["cause"] == cause]
        if hits:
            broken.append(f"cause {cause}: {sum(r['turns'] for r in hits)} breaks")
            culprits += [r for r in hits if r not in culprits]
    return Verdict(
        broken, culprits, share, lost_money, int(loss_unknown), int(unpriced), int(input_unknown)
    )


def _exact(amount: float) -> str:
    """An amount against its limit, to every decimal it has (noise aside): at 4 places a loss
    of 0.000242 over a limit of 0.0002 would read `0.0002 > 0.0002`."""
    text = f"{round(amount, NOISE_DECIMALS) + 0.0:.{NOISE_DECIMALS}f}".rstrip("0")
    return text + "0" if text.endswith(".") else text
