"""What `cacheaudit summary` prints: the headline numbers, and the same per day, model, agent or
session (`--by`). The grouping is SQL (queries/params/summary_by.sql over the summary_requests
view), run with the dimension and the dates bound as parameters."""

from __future__ import annotations

from datetime import date

import duckdb

from pipeline import sql as sqlmod
from pipeline import sql_catalog
from pipeline.errors import UsageError
from pipeline.period import bounded
from pipeline.warehouse import Warehouse

DIMENSIONS = ("day", "model", "agent", "session")

# Why a request has no cost, in words (request_costs.unpriced_reason).
REASON_WORDS = {
    "input_unknown": "input tokens not reported",
    "cache_read_unknown": "cache read not reported",
    "output_unknown": "output tokens not reported",
    "cache_write_ttl_unknown": "cache write lifetime not reported",
    "model_unknown": "model unknown",
    "no_price_at_time": "no price for the model at that time",
    "time_unknown": "no start time recorded, so no dated price applies",
    "no_price_for_model": "no price for the model",
    "passes_in_different_price_tiers": "its passes fall in different price tiers",
    "no_price_for_uncached_input": "no established price for uncached input at that time",
    "no_price_for_cache_read": "no established price for cache reads at that time",
    "no_price_for_cache_write_5m": "no established price for 5-minute cache writes",
    "no_price_for_cache_write_1h": "no established price for 1-hour cache writes",
    "no_price_for_output": "no established price for output at that time",
    "audio_cache_split_unknown": "audio read from the cache, its share not reported",
    "no_price_for_web_search": "web searches made, no established fee for them",
    "reported_cost_currency_unknown": "the reported cost has no currency",
}


def reasons_in_words(reasons: str | None) -> list[str]:
    """`input_unknown=11; no_price_at_time=2` (cost_summary.unpriced_reasons) in words:
    [`11 with input tokens not reported (input_unknown)`, `2 with ...`]."""
    parts = []
    for item in (reasons or "").split("; "):
        reason, _, count = item.rpartition("=")
        if reason:
            words = REASON_WORDS.get(reason, reason)
            parts.append(f"{int(count):,} with {words} ({reason})")
    return parts


def grouped(
    wh: Warehouse,
    by: str,
    since: date | None = None,
    until: date | None = None,
    options: sqlmod.SqlOptions | None = None,
) -> tuple[duckdb.DuckDBPyConnection, duckdb.DuckDBPyRelation]:
    """summary_by (schemas/summary_by.json): one row per group of the requests in the range."""
    if by not in DIMENSIONS:
        raise UsageError(f"--by {by!r} is not one of {', '.join(DIMENSIONS)}")
    if since is not None and until is not None and since > until:
        raise UsageError(f"--since {since} is after --until {until}")
    # only the days asked for (and the margin before them) are read
    con = sqlmod.connect(
        wh, options=options, only=["summary_requests"], period=bounded(wh, since, until)
    )
    rel = sqlmod.run(
        con,
        sql_catalog.param_query_sql("summary_by"),
        params={"dimension": by, "since": since, "until": until},
    )
    return con, rel
