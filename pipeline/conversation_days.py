"""conversation_links stored by UTC day; after an ingest, only the days from the first it changed.

Every link of queries/conversation_links.sql looks back in arrival order: a request's
conversation, parent and turn depend on earlier requests only, however long ago (a session id
joins turns weeks apart, so no horizon bounds them). When request_prefix kept the stored rows
of every day before the first day it computed again (pipeline/prefix_days.py), the links of
those days are the stored ones. `build` then:

1. takes the request_prefix rows of that day and every later day (a period session over them);
2. puts the stored links of the earlier days in place of the empty view `conversation_seed`:
   each step of the SQL that looks back at earlier requests reads the seed rows with the keys
   it looks for (a session, a history, a first exchange), as they were linked then, and turn
   numbers go on from the seed's count;
3. links the stored files of the earlier days and swaps the folder in.

The rows are those a whole-history run gives (tests/test_conversation_days.py compares them).
Everything else is a full build, written by day the same way: the first build, `--force`, the
SQL or the rules changed, request_prefix built in full, a request whose start is unknown, or
more than prefix_days.FULL_SHARE of the requests to compute. Past prefix_days.RUN_REQUESTS
requests (and with every start known) a full build goes a run of days at a time, each run
seeded from the runs before it: one pass over everything outgrew the build's memory cap.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path

import duckdb

from pipeline import day_folders, prefix_days, sql
from pipeline import period as periods

VIEW = "conversation_links"
SEED = "conversation_seed"
# The stored days, in small row groups sorted so that the lineage starts (no history parent),
# then the second turns, lie together: the seed's lookups of those filter on these columns,
# and row groups without such rows are skipped by their statistics instead of decoded. One day
# after 10M requests: 1.55-2.15 -> 1.43-1.51 s for the links; the smaller row groups take more
# room (467 MB stored instead of 400 MB).
STORED_ORDER = "history_parent IS NOT NULL, second_turn, session_hash IS NOT NULL"
STORED_ROW_GROUP_ROWS = 16_384


def compute_from(job: prefix_days.FromFirstDay) -> bool:
    """Write conversation_links under `job.out` (a new folder): the days from `job.first` on
    computed from the stored days before them, those linked. False when a full build is the
    faster or request_prefix is not stored and current (the caller removes `job.out`)."""
    total, to_compute = day_folders.stored_rows(job.wh, prefix_days.VIEW, job.first)
    if not job.keep_days_before(total, to_compute):
        return False
    if not to_compute:
        return True
    job.say(f"{VIEW}: computing {job.first} to {job.last} (the stored days before them as seed)")
    return _link_days(job)


def compute_in_runs(job: prefix_days.FromFirstDay, runs: list[tuple[date, date]]) -> bool:
    """Write every day of conversation_links under `job.out` (a new folder), one run of days
    (prefix_days.runs_of_requests) at a time: each run is linked to the rows the runs before it
    wrote, as an ingest's days are to the stored ones. False when request_prefix is not stored
    and current (the caller removes `job.out`)."""
    job.out.mkdir(parents=True)
    for first, last in runs:
        job.say(f"{VIEW}: computing {first} to {last} (a run of days; the runs before it as seed)")
        if not _link_days(job.run(first, last)):
            return False
    return True


def _link_days(job: prefix_days.FromFirstDay) -> bool:
    """Add the links of the days `job.first` to `job.last` under `job.out`, seeded from the
    files of the earlier days under `job.stored_path`."""
    days = periods.Period(job.first, job.last)
    con = sql.connect(
        job.wh, options=job.options, only=[VIEW], period=days, heavy_once=False, computed=[VIEW]
    )
    try:
        if prefix_days.VIEW not in sql.stored_views(con):
            return False
        job.limit_memory(con)
        # Each lookup of the seed is `key IN (keys of the requests computed)`. From its row
        # estimates DuckDB hashed the seed's millions of rows instead of those keys; as written,
        # the keys are hashed and the seed's scan is filtered by them (one day after 10M
        # requests: 2.8 -> 1.7 s)
        con.execute("SET disabled_optimizers = 'build_side_probe_side'")
        # the requests of the days computed (a period session also reads a margin before them)
        con.execute(
            "CREATE OR REPLACE TEMP TABLE run_prefix AS "
            "SELECT * FROM request_prefix WHERE started_at >= $start AND started_at < $end",
            {"start": days.start, "end": days.end},
        )
        con.sql("SELECT * FROM run_prefix").create_view(prefix_days.VIEW, replace=True)
        seed = day_folders.stored_files_before(job.stored_path, job.first, job.new_days)
        if seed:
            con.sql("SELECT * FROM read_parquet($p)", params={"p": seed}).create_view(
                SEED, replace=True
            )
        write_link_days(con, f"SELECT * FROM {VIEW}", job.out)
    finally:
        con.close()
    return True


def write_link_days(con: duckdb.DuckDBPyConnection, select: str, out: Path) -> int:
    """prefix_days.write_days with the order and row groups the seed's lookups skip by."""
    return prefix_days.write_days(
        con, select, out, order_by=STORED_ORDER, row_group_rows=STORED_ROW_GROUP_ROWS
    )
