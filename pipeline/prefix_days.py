"""request_prefix stored by UTC day; after an ingest, only the days it changed are computed.

A row of request_prefix depends on the requests of its cache scope within the horizon before it
(queries/request_prefix.sql, docs/providers.md "The horizon"), on the requests of its own day
(the arrival order is ranked within the day), and on request_scopes: the model that served a
refused request and the run of a request without an account, which look across the whole
history. So `build` stores the view as one folder per day
(`derived/request_prefix.parquet/<YYYY-MM-DD>/`, `unknown-day/` for requests whose start is
unknown), records a digest of each day's inputs in the stamp, and on the next build:

1. finds the days whose request or segment parts changed (a digest of their names and sizes and
   of the manifests of their sources; a --force re-ingest rewrites the manifest);
2. computes request_scopes over every request (a few columns of the refused requests, the
   answers to their names and the requests without an account) and compares it with the stored
   rows: a day whose requests moved (a refused request took the model of an answer ingested
   since, a file's requests without an account fell into other runs) changed too;
3. computes those days and the days within the horizon after each (they look back at them),
   each run of consecutive days in a period session over its days and the horizon before them,
   with the whole-history request_scopes rows;
4. writes the new days beside the unchanged ones (hard links) and swaps the folder in.

Everything else (the SQL or the rules changed, another engine's layout, `--force`, or more than
FULL_SHARE of the requests to compute) is a full build, written by day the same way (one group
of cache scopes at a time on large warehouses, pipeline/prefix_groups.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb

from pipeline import day_folders, derived, sql
from pipeline import period as periods
from pipeline.sql_text import path_literal, quoted
from pipeline.warehouse import Warehouse, stem_of

VIEW = "request_prefix"
UNKNOWN_DAY = "unknown-day"
# past this share of the requests to compute again, a full build (grouped by scope when large)
FULL_SHARE = 0.5
DAY_COLUMN = "cacheaudit_day"
# the folder a request_prefix row belongs in
DAY_OF_ROW = f"coalesce(strftime(started_at, '%Y-%m-%d'), '{UNKNOWN_DAY}')"
INPUT_TABLES = ("requests", "segments")
# the part of request_prefix over the whole history (queries/request_scopes.sql)
SCOPES_VIEW = "request_scopes"
# queries/prefix_requests.sql numbers requests by day: the UTC day's number since 1970 times
# ORDER_PER_DAY plus the rank within the day; UNKNOWN_DAY_NUMBER is the day of an unknown start
ORDER_PER_DAY = 1_000_000_000
UNKNOWN_DAY_NUMBER = 9_000_000_000
# Past this many requests, a full build of a view that looks back without a horizon
# (conversation_links, cache_breaks) goes a run of days at a time, each run seeded from the
# runs before it as an ingest's new days are. In one pass over 10M requests their joins and
# windows outgrew the build's memory cap: 2.2x and 2.3x the time per request of 1M. At 10M a
# run of conversation_links without seed took 26 s for 2.5M requests, 7.4 s for 1M and 3.2 s
# for 500,000: a smaller run costs less per request, until reading the seed dominates.
RUN_REQUESTS = 500_000


def day_inputs(wh: Warehouse) -> dict[str, str]:
    """Per day (`YYYY-MM-DD`, or UNKNOWN_DAY): a digest of the request and segment parts readers
    see of it, and of the manifests of the sources those parts belong to."""
    snapshot = wh.snapshot([*INPUT_TABLES, "sources"])
    manifests: dict[str, bytes] = {}
    for path in snapshot["sources"]:
        try:
            manifests[stem_of(path)] = hashlib.sha256(path.read_bytes()).digest()
        except FileNotFoundError:
            continue
    per_day: dict[str, Any] = {}
    for table in INPUT_TABLES:
        for path in snapshot[table]:
            day = periods.day_of(path)
            key = day.isoformat() if day is not None else UNKNOWN_DAY
            digest = per_day.setdefault(key, hashlib.sha256(b"day\n"))
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                continue
            digest.update(f"{path.relative_to(wh.root).as_posix()} {size}\n".encode())
            digest.update(manifests.get(stem_of(path), b""))
    return {day: digest.hexdigest() for day, digest in sorted(per_day.items())}


def base_stamp(wh: Warehouse, options: sql.SqlOptions) -> str:
    """The view's stamp without the warehouse's rows: its SQL, the cache rules, the version."""
    return derived.view_stamp(wh, VIEW, options, state="per-day")


def stored_days(stamp: dict[str, object], base: str, path: Path) -> dict[str, str] | None:
    """The day digests of a stored per-day build under the same SQL and rules, else None."""
    days = stamp.get("days")
    if stamp.get("base") != base or not isinstance(days, dict) or not path.is_dir():
        return None
    if any(not (path / day).is_dir() for day in days):
        return None
    return {str(k): str(v) for k, v in days.items()}


def days_to_compute(
    con: duckdb.DuckDBPyConnection,
    stored_path: Path,
    old: dict[str, str],
    new: dict[str, str],
    reach_days: int,
) -> set[str]:
    """The days whose rows change: inputs changed, requests moved, or within `reach_days` after
    such a day. `con` has the whole-history request_scopes."""
    changed = {day for day in old.keys() | new.keys() if old.get(day) != new.get(day)}
    changed |= _moved_days(con, stored_path)
    known = sorted(date.fromisoformat(d) for d in new if d != UNKNOWN_DAY)
    out = {d for d in changed if d in new}
    for day in changed - {UNKNOWN_DAY}:
        first = date.fromisoformat(day)
        out.update(d.isoformat() for d in known if first < d <= first + timedelta(reach_days))
    return out


def _moved_days(con: duckdb.DuckDBPyConnection, stored_path: Path) -> set[str]:
    """The days of stored rows whose model or cache scope request_scopes now gives otherwise:
    a refused request took the model of an answer ingested since, a request without an account
    fell into another run. Every other column of a row depends on its own day's requests (the
    arrival order is ranked within the day), which the day's digest covers."""
    ((scoped,),) = con.execute("SELECT count(*) FROM request_scopes").fetchall()
    if not scoped:
        return set()
    moved = con.execute(
        f"""
        SELECT DISTINCT {DAY_OF_ROW}
        FROM (
            SELECT s.started_at
            FROM read_parquet($p) AS s
            JOIN request_scopes AS g USING (request_id)
            WHERE (g.refused AND s.model IS DISTINCT FROM g.served_model)
               OR (g.run_scope IS NOT NULL AND s.cache_scope IS DISTINCT FROM g.run_scope)
        )
        """,
        {"p": str(stored_path / "**" / "*.parquet")},
    ).fetchall()
    return {day for (day,) in moved}


def first_changed_day(todo: set[str], new_days: dict[str, str]) -> date | None:
    """The first day whose rows a view that looks back without a horizon (conversations, and
    the breaks read from them) changes when the days `todo` changed (request_prefix computed
    them again, or they are gone from the warehouse): the earliest of them, or the day after
    the last one when none did. None when a
    request's start is unknown: such requests sort after every day and belong to none, so
    only a full build computes them."""
    if UNKNOWN_DAY in new_days or UNKNOWN_DAY in todo:
        return None
    if todo:
        return min(date.fromisoformat(d) for d in todo)
    known = [date.fromisoformat(d) for d in new_days]
    return max(known) + timedelta(days=1) if known else None


@dataclass(frozen=True, slots=True)
class FromFirstDay:
    """A build of a stored view from the first day an ingest changed on (FROM_FIRST_DAY in
    pipeline/materialise.py): the rows of the days before `first` are the stored ones."""

    wh: Warehouse
    options: sql.SqlOptions
    stored_path: Path  # the view's stored days
    first: date
    new_days: dict[str, str]  # day_inputs of the warehouse now
    out: Path  # the new folder of days
    limit_memory: Callable[[duckdb.DuckDBPyConnection], None]
    progress: Callable[[str], None] | None = None
    until: date | None = None  # the last day computed; None: the warehouse's last

    @property
    def start(self) -> datetime:
        return periods.Period(self.first, self.first).start

    @property
    def last(self) -> date:
        if self.until is not None:
            return self.until
        return max(date.fromisoformat(d) for d in self.new_days)

    def run(self, first: date, last: date) -> FromFirstDay:
        """The run of days first..last of a full build in runs (RUN_REQUESTS) into `out`: the
        runs already written there are its seed, as stored days are an ingest's."""
        return replace(self, stored_path=self.out, first=first, until=last)

    def keep_days_before(self, total: int, to_compute: int) -> bool:
        """False when the days from `first` hold more than FULL_SHARE of the `total` requests
        (a full build is then the faster); else create `out` with the stored files of the
        days before `first` (hard links)."""
        if total and to_compute > FULL_SHARE * total:
            return False
        self.out.mkdir(parents=True)
        for day in sorted(self.new_days):
            if date.fromisoformat(day) < self.first:
                day_folders.link_tree(self.stored_path / day, self.out / day)
        return True

    def say(self, message: str) -> None:
        _say(self.progress, message)


def day_of_order(order: int) -> date | None:
    """The UTC day an arrival order (request_prefix.arrival_order) holds; None for a request
    whose start is unknown."""
    number = order // ORDER_PER_DAY
    if number >= UNKNOWN_DAY_NUMBER:
        return None
    return date(1970, 1, 1) + timedelta(days=number)


def runs_of_requests(wh: Warehouse, days: dict[str, str]) -> list[tuple[date, date]] | None:
    """The days of `days` (day_inputs of the warehouse now) as runs of consecutive days with
    at most RUN_REQUESTS requests each in the stored request_prefix (a larger day
    is a run alone). None when one run holds them all, or when a request's start is unknown: it
    belongs to no day, so only one pass over everything computes it."""
    if UNKNOWN_DAY in days:
        return None
    per_day = day_folders.stored_day_rows(wh, VIEW)
    if sum(per_day.values()) <= RUN_REQUESTS:
        return None
    runs: list[tuple[date, date]] = []
    size = 0
    for day in sorted(date.fromisoformat(d) for d in days):
        rows = per_day.get(day, 0)
        if runs and size + rows <= RUN_REQUESTS:
            runs[-1] = (runs[-1][0], day)
            size += rows
        else:
            runs.append((day, day))
            size = rows
    return runs


def runs_of(days: set[str]) -> list[tuple[date, date]]:
    """Consecutive known days as (first, last) runs."""
    known = sorted(date.fromisoformat(d) for d in days if d != UNKNOWN_DAY)
    runs: list[tuple[date, date]] = []
    for day in known:
        if runs and runs[-1][1] + timedelta(days=1) == day:
            runs[-1] = (runs[-1][0], day)
        else:
            runs.append((day, day))
    return runs


def write_days(
    con: duckdb.DuckDBPyConnection,
    select: str,
    out: Path,
    params: Any = None,
    *,
    order_by: str | None = None,
    row_group_rows: int | None = None,
) -> int:
    """Add the rows of `select` (rows with a started_at) under `out`, one folder per day;
    returns the rows written. No sort unless `order_by` (a constant of the caller): a period
    read takes whole days, so each file's statistics keep it away from files of other days
    whatever the order within a day. A partitioned write keeps the order within each thread's
    share of the rows, so a day's file holds a sorted run per thread."""
    order = f" ORDER BY {order_by}" if order_by else ""
    groups = f", ROW_GROUP_SIZE {int(row_group_rows)}" if row_group_rows else ""
    written = con.execute(
        f"COPY (SELECT *, {DAY_OF_ROW} AS {DAY_COLUMN} FROM ({select}){order}) "
        f"TO '{path_literal(out)}' (FORMAT parquet, COMPRESSION zstd{groups}, "
        f"PARTITION_BY ({DAY_COLUMN}), OVERWRITE_OR_IGNORE, FILENAME_PATTERN 'part-{{uuid}}')",
        params,
    ).fetchall()
    # `cacheaudit_day=2026-11-16/` -> `2026-11-16/`: a reader's glob must not find a hive column
    for folder in list(out.glob(f"{DAY_COLUMN}=*")):
        target = out / folder.name.split("=", 1)[1]
        target.mkdir(exist_ok=True)
        for part in folder.iterdir():
            part.replace(target / part.name)
        folder.rmdir()
    return int(written[0][0]) if written else 0


def compute_days(
    wh: Warehouse,
    options: sql.SqlOptions,
    stored_path: Path,
    old: dict[str, str],
    new: dict[str, str],
    out: Path,
    limit_memory: Callable[[duckdb.DuckDBPyConnection], None],
    progress: Callable[[str], None] | None = None,
) -> set[str] | None:
    """Write request_prefix under `out` (a new folder): the days to compute computed, the rest
    linked from `stored_path`; returns the days computed. None, with nothing written, when
    that is more than FULL_SHARE of the requests (a full build is then the faster)."""
    scopes = out.with_name(out.name + ".scopes.parquet")
    con = sql.connect(wh, options=options, only=[VIEW], use_derived=False, heavy_once=False)
    try:
        limit_memory(con)
        # the one whole-history stage, once, as a file every run below reads
        con.execute(f"COPY {SCOPES_VIEW} TO '{path_literal(scopes)}' (FORMAT parquet)")
        sql.view_from_parquet(con, SCOPES_VIEW, scopes)
        reach = periods.margin_days(con, lookback=True)
        todo = days_to_compute(con, stored_path, old, new, reach)
        # by the requests' `day` (a DATE, NULL for an unknown start): formatting every start
        # as text cost 0.8 s on 10M requests
        ((total, in_todo),) = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE day IN (SELECT unnest($d::DATE[]))"
            " OR (day IS NULL AND $unknown)) FROM requests",
            {"d": sorted(todo - {UNKNOWN_DAY}), "unknown": UNKNOWN_DAY in todo},
        ).fetchall()
        if total and in_todo > FULL_SHARE * total:
            return None
        out.mkdir(parents=True)
        for day in sorted(set(new) - todo):  # unchanged: the stored files, linked
            day_folders.link_tree(stored_path / day, out / day)
        for first, last in runs_of(todo):
            _say(progress, f"{VIEW}: computing {first} to {last} ({reach} days before them)")
            _compute_run(wh, options, scopes, first, last, out, limit_memory)
        if UNKNOWN_DAY in todo:
            _say(progress, f"{VIEW}: computing the requests whose start is unknown")
            _keep_requests(con, "started_at IS NULL")
            write_days(con, f"SELECT * FROM {quoted(VIEW)}", out)
        return todo
    finally:
        try:
            con.close()
        finally:  # a Ctrl-C raised as the first step returns must not keep the scopes file
            scopes.unlink(missing_ok=True)


def _compute_run(
    wh: Warehouse,
    options: sql.SqlOptions,
    scopes_file: Path,
    first: date,
    last: date,
    out: Path,
    limit_memory: Callable[[duckdb.DuckDBPyConnection], None],
) -> None:
    """The rows of days first..last, from the requests and segments of those days and the
    horizon before them (a period session registers just those) and the whole-history
    request_scopes rows."""
    days = periods.Period(first, last)
    con = sql.connect(
        wh, options=options, only=[VIEW], use_derived=False, heavy_once=False, period=days
    )
    try:
        limit_memory(con)
        sql.view_from_parquet(con, SCOPES_VIEW, scopes_file)
        _keep_requests(con, "true")
        _keep_segments_of_the_days(con, days)
        write_days(
            con,
            f"SELECT * FROM {quoted(VIEW)} WHERE started_at >= $start AND started_at < $end",
            out,
            {"start": days.start, "end": days.end},
        )
    finally:
        con.close()


def _keep_requests(con: duckdb.DuckDBPyConnection, where: str) -> None:
    """prefix_requests computed once, as a table of the session, keeping the rows `where`
    (a constant condition of this module): request_prefix reads it several times."""
    con.execute(f"CREATE TEMP TABLE run_requests AS SELECT * FROM prefix_requests WHERE {where}")
    con.sql("SELECT * FROM run_requests").create_view("prefix_requests", replace=True)


def _keep_segments_of_the_days(con: duckdb.DuckDBPyConnection, days: periods.Period) -> None:
    """Of the horizon before the days, keep only the segments the window of request_prefix
    reads for a request of the days. It partitions by the prefix within the cache scope and
    orders by arrival, and every horizon request arrived before the days, so of each prefix a
    request of the days has it reads the latest four requests before it (lags 1-4) and the
    latest that left an entry ending there or marked there by a breakpoint (last_value). The
    other horizon rows only made the sort and the per-request sums larger (at 10M requests,
    a day's run kept 0.9M of them), and their own rows are not kept."""
    # `s.day`, the partition of a segment's part, lets each scan read only its days' parts
    bounds = {"start": days.start, "first": days.first}
    con.execute(
        "CREATE OR REPLACE TEMP TABLE run_segments AS SELECT s.* "
        "FROM prefix_segments AS s JOIN prefix_requests AS q USING (request_id) "
        "WHERE s.day >= $first AND q.started_at >= $start",
        bounds,
    )
    con.execute(
        "CREATE OR REPLACE TEMP TABLE run_prefixes AS "
        "SELECT DISTINCT hash(s.chain_hash, q.scope_hash) AS scoped_prefix_hash "
        "FROM run_segments AS s JOIN prefix_requests AS q USING (request_id)"
    )
    # `leaves_entry`: where queries/request_prefix.sql (`seg`) gives a row an available entry
    # that is the end of its prompt or a breakpoint. The latest four of a prefix are those
    # from its fourth latest arrival on (a request holds a prefix once): a top-4 aggregate
    # and a join cost 0.3 s less than a row_number() window over the 0.9M candidate rows
    con.execute(
        """
        INSERT INTO run_segments
        WITH horizon AS MATERIALIZED (
            SELECT
                s.*,
                hash(s.chain_hash, q.scope_hash) AS scoped_prefix_hash,
                q.rid_ord,
                q.writes_cache AND (
                    s.position = q.segment_count - 1
                    OR coalesce(list_contains(q.cache_breakpoints, s.position), false)
                ) AS leaves_entry
            FROM prefix_segments AS s JOIN prefix_requests AS q USING (request_id)
            WHERE s.day < $first AND q.started_at < $start
              AND hash(s.chain_hash, q.scope_hash) IN (SELECT scoped_prefix_hash FROM run_prefixes)
        ),
        latest AS (
            SELECT scoped_prefix_hash, list_min(max(rid_ord, 4)) AS from_order
            FROM horizon
            GROUP BY scoped_prefix_hash
        )
        SELECT h.* EXCLUDE (scoped_prefix_hash, rid_ord, leaves_entry)
        FROM horizon AS h JOIN latest AS l USING (scoped_prefix_hash)
        WHERE h.rid_ord >= l.from_order OR h.leaves_entry
        """,
        bounds,
    )
    con.sql("SELECT * FROM run_segments").create_view("prefix_segments", replace=True)


def _say(progress: Callable[[str], None] | None, message: str) -> None:
    if progress is not None:
        progress(message)
