"""request_prefix built one group of cache scopes at a time, on warehouses too large for one window.

request_prefix is one window over every segment of the warehouse. On 10M requests (300M
segments) that window, the joins around it and the per-request aggregates needed more than the
3 GiB a build may hold, and DuckDB failed out of memory (bench/history.py). But every window and
aggregate of it stays within one cache scope: the prefix fingerprint it partitions by includes
the scope, a request's segments all share its scope, and the request it reuses is in that scope
too. So the rows of a group of scopes come out the same whether the group is computed alone or
with everything else. The steps over every request (the arrival order, and request_scopes: the
serving model of a refused request, the runs without an account) are taken once, in
prefix_requests.

So a build of a large warehouse:
1. writes prefix_requests (one row per request, the arrival order included) once, split into
   `groups` by `scope_hash % groups` (queries/params/prefix_request_groups.sql);
2. writes prefix_segments (one numeric row per segment, grouped by joining those stored rows)
   once, split the same way: the only pass over every segment;
3. computes request_prefix for each group from that group's files alone and adds its rows to
   the day folders of `derived/request_prefix.parquet/` (pipeline/prefix_days.py).

Memory then follows the largest group, not the warehouse: a group is ~GROUP_SEGMENTS segments
when the traffic has many scopes. Traffic of a single scope (one key, one model) stays one
group, as large as before. The split files live in a work directory next to the output and go
when the build ends, failed or not.
"""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import duckdb

# Segments per group: a group of 500,000 requests of ~30 segments. A whole build of 1M
# requests held 3.3 GB at the 3 GiB cap (bench/views.py); half of that leaves room.
GROUP_SEGMENTS = 15_000_000
GROUPED_VIEW = "request_prefix"
STAGES = ("prefix_requests", "prefix_segments")
# queries/params/: each stage's rows with the group of their cache scope
GROUP_QUERIES = ("prefix_request_groups", "prefix_segment_groups")
GROUP_COLUMN = "scope_group"


def group_count(con: duckdb.DuckDBPyConnection, per_group: int = GROUP_SEGMENTS) -> int:
    """How many groups a build of request_prefix splits the warehouse into (1: no split)."""
    ((segments,),) = con.execute("SELECT count(*) FROM raw_segments").fetchall()
    return max(1, math.ceil(int(segments) / per_group))


def write_in_groups(
    con: duckdb.DuckDBPyConnection,
    out: Path,
    groups: int,
    *,
    progress: Callable[[str], None] | None = None,
) -> int:
    """Write request_prefix under the directory `out`, one group of scopes at a time, each
    adding its rows to the folders of their days; returns the rows written."""
    # materialise imports this module at its top: the other way round only here
    from pipeline import sql, sql_catalog

    queries = sql_catalog.load_queries()
    work = out.with_name(out.name + ".work")
    shutil.rmtree(work, ignore_errors=True)
    out.mkdir(parents=True)
    work.mkdir()
    try:
        for stage, grouped in zip(STAGES, GROUP_QUERIES, strict=True):
            _say(progress, f"{GROUPED_VIEW}: writing {stage} in {groups} groups of cache scopes")
            began = time.monotonic()
            rel = con.sql(sql_catalog.param_query_sql(grouped), params={"groups": groups})
            rel.write_parquet(str(work / stage), partition_by=[GROUP_COLUMN], compression="zstd")
            took = _duration(time.monotonic() - began)
            _say(progress, f"{GROUPED_VIEW}: {stage} written in {took}")
            # later stages read the stored rows, not the query again
            sql.view_from_parquet(con, stage, work / stage)
        # a group no scope fell in has no directory
        numbers = sorted(
            int(p.name.removeprefix(f"{GROUP_COLUMN}="))
            for p in (work / STAGES[0]).glob(f"{GROUP_COLUMN}=*")
        )
        rows = 0
        began = time.monotonic()
        for done, number in enumerate(numbers, start=1):
            _say(progress, _group_line(done, len(numbers), time.monotonic() - began))
            for stage in STAGES:
                folder = work / stage / f"{GROUP_COLUMN}={number}"
                if folder.is_dir():
                    sql.view_from_parquet(con, stage, folder)
                else:  # requests without segments (a prompt that failed to parse)
                    con.sql(
                        "SELECT * FROM read_parquet($p) LIMIT 0",
                        params={"p": str(work / stage / "**" / "*.parquet")},
                    ).create_view(stage, replace=True)
            rows += _write_count(con, out)
        return rows
    finally:
        try:
            for stage in STAGES:
                sql.create_query_view(con, queries[stage])
        finally:  # a Ctrl-C raised as the first step starts must not keep the work folder
            shutil.rmtree(work, ignore_errors=True)


def _write_count(con: duckdb.DuckDBPyConnection, out: Path) -> int:
    """Add the group's rows under `out`, one folder per day (pipeline/prefix_days.py)."""
    from pipeline import prefix_days

    return prefix_days.write_days(con, f'SELECT * FROM "{GROUPED_VIEW}"', out)


def _group_line(number: int, total: int, spent: float) -> str:
    """`group 3 of 17`, with the time the groups before it took and an estimate of what is
    left at their pace (groups hold about the same number of segments): a 10M-request build
    spends ten minutes in them."""
    line = f"{GROUPED_VIEW}: group {number} of {total}"
    done = number - 1
    if done == 0:
        return line
    left = spent / done * (total - done)
    return f"{line} ({done} done in {_duration(spent)}, about {_duration(left)} left)"


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def _say(progress: Callable[[str], None] | None, message: str) -> None:
    if progress is not None:
        progress(message)
