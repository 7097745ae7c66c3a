"""request_costs of a whole history, computed a run of days at a time.

Pricing a request reads only that request (and the price tables, and the request's own row of
expected_cache), so the view can be computed over any split of the requests and the parts put
together. Computed whole, its chain of joins holds every request several times over (22.9 GB
of intermediate rows at 1M requests): past a few million requests it spills far beyond the
memory cap (10M: 110 s, 24x the CPU of 1M). A run of days of up to CHUNK_REQUESTS requests fits
in memory, and the runs come in day order, each sorted as the view sorts, so the table is in
the view's order (undated requests, sorted last by the view, come last).
"""

from __future__ import annotations

from datetime import date
from pathlib import Path

import duckdb

from pipeline.period import Period, day_of

# Requests priced at a time: ~1.4 GB of DuckDB's working memory at 2.7 KB a request (1M
# requests took 2.7 GB), within a reading command's cap (3 GiB) beside what else it holds.
CHUNK_REQUESTS = 500_000


def day_runs(
    con: duckdb.DuckDBPyConnection, files: list[Path], limit: int | None = None
) -> list[tuple[Period | None, list[Path]]]:
    """The parts of `requests` in runs of whole days, in day order, each of at most `limit`
    requests (CHUNK_REQUESTS) unless one day alone holds more, with the days each run covers;
    the parts of unknown day last, a run of their own (days None). Row counts come from the
    parts' footers (kept by the session's metadata cache)."""
    limit = CHUNK_REQUESTS if limit is None else limit
    if not files:
        return []
    counts = dict(
        con.execute(
            "SELECT file_name, num_rows FROM parquet_file_metadata($files)",
            {"files": [str(f) for f in files]},
        ).fetchall()
    )
    by_day: dict[date | None, list[Path]] = {}
    for path in files:
        by_day.setdefault(day_of(path), []).append(path)
    runs: list[tuple[Period | None, list[Path]]] = []
    days: list[date] = []
    size = 0
    for day in sorted(d for d in by_day if d is not None):
        rows = sum(int(counts.get(str(p)) or 0) for p in by_day[day])
        if days and size + rows > limit:
            runs.append(_run(days, by_day))
            days, size = [], 0
        days.append(day)
        size += rows
    if days:
        runs.append(_run(days, by_day))
    if None in by_day:
        runs.append((None, by_day[None]))
    return runs


def _run(
    days: list[date], by_day: dict[date | None, list[Path]]
) -> tuple[Period | None, list[Path]]:
    return Period(days[0], days[-1]), [p for d in days for p in by_day[d]]
