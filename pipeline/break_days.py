"""cache_breaks stored by UTC day; after an ingest, only the days from the first one it changed.

A cache_breaks row depends on its request and on its parent (the turn before it in its
conversation): their request_prefix, conversations, expected_cache and segment rows. A
conversation is made from earlier requests only (queries/conversation_links.sql: every link, turn
number and root looks back in arrival order), so when request_prefix kept the stored rows of
every day before the first day it computed again (pipeline/prefix_days.py), the conversations
of those days are the stored ones too, and so are their breaks. `build` then:

1. finds the earliest day among the parents of the requests from that first day on (the day
   their arrival order holds, conversation_links.parent_order);
2. computes the breaks of the requests from that day on, in a period session (only the parts
   of the days from that earliest parent on are read) over the stored request_prefix and
   conversations, with the conversations cut to those requests and their parents;
3. links the stored files of the earlier days and swaps the folder in.

Everything else is a full build, also written by day: the first build, `--force`, the SQL or
the rules changed, request_prefix built in full, a request whose start is unknown (it belongs
to no day and sorts after every day, so no period session reads it), or more than
prefix_days.FULL_SHARE of the requests to compute. Past prefix_days.RUN_REQUESTS requests (and
with every start known) a full build goes a run of days at a time the same way, each run in a
period session from the earliest parent of its requests.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path

import duckdb

from pipeline import ctrl_c, day_folders, derived, prefix_days, sql
from pipeline import period as periods

VIEW = "cache_breaks"
# what the breaks of a request read beside the raw tables: stored by this build before them
READS_STORED = ("request_prefix", "conversation_links")


def compute_from(job: prefix_days.FromFirstDay) -> bool:
    """Write cache_breaks under `job.out` (a new folder): the days from `job.first` on
    computed, the earlier ones linked from the stored days. False when a full build is the
    faster or the stored views it reads are not current (the caller removes `job.out`)."""
    links = derived.derived_path(job.wh, READS_STORED[1])
    total, to_compute = day_folders.stored_rows(job.wh, READS_STORED[1], job.first)
    if not job.keep_days_before(total, to_compute):
        return False
    if not to_compute:
        return True
    return _break_days(job, links)


def compute_in_runs(job: prefix_days.FromFirstDay, runs: list[tuple[date, date]]) -> bool:
    """Write every day of cache_breaks under `job.out` (a new folder), one run of days
    (prefix_days.runs_of_requests) at a time, each in a period session from the earliest
    parent of its requests. False when the stored views it reads are not current (the caller
    removes `job.out`)."""
    links = derived.derived_path(job.wh, READS_STORED[1])
    job.out.mkdir(parents=True)
    return all(_break_days(job.run(first, last), links) for first, last in runs)


def _break_days(job: prefix_days.FromFirstDay, links: Path) -> bool:
    """Add the breaks of the requests of the days `job.first` to `job.last` under `job.out`."""
    parents_from = _parents_from(job, links) or job.first
    read = periods.Period(min(job.first, parents_from), job.last)
    job.say(f"{VIEW}: computing {job.first} to {read.last} (parents from {read.first})")
    con = sql.connect(
        job.wh, options=job.options, only=[VIEW], period=read, heavy_once=False, computed=[VIEW]
    )
    try:
        if not set(READS_STORED) <= sql.stored_views(con):
            return False
        job.limit_memory(con)
        # the requests whose breaks are computed, and their parents: a break reads nothing else
        con.execute(
            "CREATE OR REPLACE TEMP TABLE run_conversations AS "
            "SELECT * FROM conversations WHERE started_at >= $start OR request_id IN "
            "(SELECT parent_request_id FROM conversations WHERE started_at >= $start)",
            {"start": job.start},
        )
        con.sql("SELECT * FROM run_conversations").create_view("conversations", replace=True)
        prefix_days.write_days(
            con,
            f"SELECT * FROM {VIEW} WHERE started_at >= $start AND started_at < $end",
            job.out,
            {"start": job.start, "end": periods.Period(job.first, job.last).end},
        )
    finally:
        con.close()
    return True


def _parents_from(job: prefix_days.FromFirstDay, links: Path) -> date | None:
    """The earliest day among the parents of the requests of the days `job.first` to
    `job.last`: the day their arrival order holds, read from those days' stored links alone.
    (Looking their ids up among every stored request took 0.5 s on 10M requests.)"""
    files = [str(f) for f in day_folders.stored_files_from(links, job.first, job.last)]
    if not files:
        return None
    con = ctrl_c.interruptible(duckdb.connect())
    try:
        ((earliest,),) = con.execute(
            "SELECT min(parent_order) FROM read_parquet($p)", {"p": files}
        ).fetchall()
    finally:
        con.close()
    return None if earliest is None else prefix_days.day_of_order(int(earliest))
