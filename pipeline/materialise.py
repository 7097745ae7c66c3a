"""`cacheaudit build`: compute the heavy views of `derived.MATERIALISED` and store them.

Each stale view (its stamp, `derived.view_stamp`, differs from the one stored beside it) is written
to `<warehouse>/derived/<view>.parquet` with its stamp, under the warehouse lock held shared, so
that no ingest lands between the rows read and the stamp stored; `sql.connect` then reads the
stored rows while the stamp matches. Each is stored as one folder per day. After an ingest,
request_prefix computes only the days it changed (pipeline/prefix_days.py), conversation_links
and cache_breaks the days from the first of those on (pipeline/conversation_days.py,
pipeline/break_days.py); a full build of request_prefix goes one group of cache scopes at a
time on large warehouses (pipeline/prefix_groups.py).
The days that many small sources split into many parts are copied into one file first
(pipeline/compaction.py). pipeline/derived.py says what a stamp digests and pipeline/sql.py how
sessions read the stored views.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TypeVar

import duckdb

from pipeline import (
    break_days,
    compaction,
    conversation_days,
    ctrl_c,
    day_folders,
    dead_work,
    derived,
    prefix_days,
    prefix_groups,
    raw_parts,
    schema,
    sql,
    sql_catalog,
)
from pipeline.errors import NotFoundError, QueryError
from pipeline.sql_text import one_line, path_literal, quoted
from pipeline.warehouse import Warehouse

_T = TypeVar("_T")

# The stored views that look back without a horizon, so that after an ingest a build computes
# them from the first day request_prefix computed again: how each does it
FROM_FIRST_DAY = {
    conversation_days.VIEW: conversation_days.compute_from,
    break_days.VIEW: break_days.compute_from,
}
# ... and how each is built in full a run of days at a time (prefix_days.RUN_REQUESTS)
IN_RUNS = {
    conversation_days.VIEW: conversation_days.compute_in_runs,
    break_days.VIEW: break_days.compute_in_runs,
}


# the base of a Spark build's stamp (lay_out_by_day): never equal to a DuckDB build's
SPARK_DAYS = "per-day, on Spark"


@dataclass(frozen=True, slots=True)
class BuildResult:
    name: str
    rebuilt: bool
    rows: int
    seconds: float


def materialised_order(
    names: Iterable[str] | None, queries: dict[str, sql_catalog.Query]
) -> list[str]:
    """The stored views a build of `names` (default: all of derived.MATERIALISED) writes, with those
    they read, in creation order."""
    targets = sql_catalog.needed(names if names is not None else derived.MATERIALISED, queries)
    return [
        n for n in sql_catalog.creation_order(queries) if n in targets and n in derived.MATERIALISED
    ]


def nothing_to_build(
    wh: Warehouse, order: list[str], options: sql.SqlOptions, force: bool
) -> list[BuildResult] | None:
    """Every view of `order` reported as reused when each is stored and current (and the build
    is not forced), else None. Then a build, on any engine, writes nothing and takes no lock
    (which needs a writable warehouse, and waits for an ingest)."""
    if force or not wh.exists():
        return None
    state = derived.warehouse_state(wh)
    if any(
        derived.stored_stamp(wh, n) != derived.view_stamp(wh, n, options, state=state)
        for n in order
    ):
        return None
    return [BuildResult(name, False, -1, 0.0) for name in order]


def stored_views_current(wh: Warehouse, options: sql.SqlOptions | None = None) -> bool:
    """Whether `build` stored every materialised view since the last ingest: period reads
    then take conversations, breaks and expected reads from the whole history."""
    order = materialised_order(None, sql_catalog.load_queries())
    return nothing_to_build(wh, order, options or sql.SqlOptions(), force=False) is not None


def build(
    wh: Warehouse,
    *,
    options: sql.SqlOptions | None = None,
    names: Iterable[str] | None = None,
    force: bool = False,
    group_segments: int | None = None,
    progress: Callable[[str], None] | None = None,
    wait: bool = True,
) -> list[BuildResult]:
    """Write each materialised view (and those it reads) whose stamp is stale.

    `group_segments`: past this many segments (default prefix_groups.GROUP_SEGMENTS)
    request_prefix is computed one group of cache scopes at a time (pipeline/prefix_groups.py).
    `progress` gets a line per step of that.

    Holds the warehouse lock shared: an ingest landing while the views are computed would
    otherwise have its manifest in the stamp of rows read before it. A build waits
    for a running ingest, and an ingest for a running build; without `wait`, a running ingest
    raises WarehouseBusy instead."""
    options = options or sql.SqlOptions()
    queries = sql_catalog.load_queries()
    targets = sql_catalog.needed(names if names is not None else derived.MATERIALISED, queries)
    order = materialised_order(names, queries)
    if not wh.exists():
        raise NotFoundError(f"no warehouse at {wh.root}", hint="run `cacheaudit ingest` first")
    out_dir = wh.root / derived.DERIVED_DIR
    # also when the views are current: the build that left it died
    dead_work.remove_dead_builds_work(out_dir)
    if (reused := nothing_to_build(wh, order, options, force)) is not None:
        return reused
    out_dir.mkdir(parents=True, exist_ok=True)

    def waiting() -> None:
        print(f"waiting for the ingest into {wh.root} to finish", file=sys.stderr)

    with wh.lock(shared=True, on_wait=waiting, wait=wait):
        per_group = group_segments or prefix_groups.GROUP_SEGMENTS
        return _build_locked(wh, options, order, targets, force, per_group, progress)


def _build_locked(
    wh: Warehouse,
    options: sql.SqlOptions,
    order: list[str],
    targets: set[str],
    force: bool,
    group_segments: int,
    progress: Callable[[str], None] | None,
) -> list[BuildResult]:
    # The stamps come from the state taken before the connection lists the Parquet parts:
    # even without the lock, a stamp could then only be older than the rows, never newer.
    state = derived.warehouse_state(wh)
    stamps = {name: derived.view_stamp(wh, name, options, state=state) for name in order}
    out_dir = wh.root / derived.DERIVED_DIR
    _compact(wh, out_dir, progress)  # first: the views below then read the copies
    session = _Session(wh, options, force, targets, out_dir / ".spill")
    try:
        return _build_views(wh, options, order, stamps, session, force, group_segments, progress)
    finally:
        session.close()


class _Session:
    """The build's session over the whole history, opened when a view needs it: after an
    ingest of a day each view is computed in sessions of its own, and opening this one (every
    view bound, the price tables loaded) took 0.5 s at 10M requests for nothing. A view stored
    by this build is read from its files by the session, whenever it opens."""

    def __init__(
        self, wh: Warehouse, options: sql.SqlOptions, force: bool, targets: set[str], spill: Path
    ) -> None:
        self._open = (wh, options, force, targets, spill)
        self._con: duckdb.DuckDBPyConnection | None = None
        self._stored: list[tuple[str, Path]] = []

    def con(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            wh, options, force, targets, spill = self._open
            con = sql.connect(
                wh, options=options, use_derived=not force, only=targets, heavy_once=False
            )
            _limit_build_memory(con, spill)
            for name, path in self._stored:
                sql.view_from_parquet(con, name, path)
            self._con = con
        return self._con

    def stored(self, name: str, path: Path) -> None:
        """Later views read view `name` from `path` instead of computing it again."""
        self._stored.append((name, path))
        if self._con is not None:
            sql.view_from_parquet(self._con, name, path)

    def close(self) -> None:
        if self._con is not None:
            self._con.close()


def _build_views(
    wh: Warehouse,
    options: sql.SqlOptions,
    order: list[str],
    stamps: dict[str, str],
    session: _Session,
    force: bool,
    group_segments: int,
    progress: Callable[[str], None] | None,
) -> list[BuildResult]:
    results: list[BuildResult] = []
    # request_prefix's days before this build and the days it computed again, when it kept
    # the others: cache_breaks then computes only from the first of them (break_days.py)
    prefix_since: tuple[dict[str, str], set[str]] | None = None
    for name in order:
        stamp = stamps[name]
        if not force and derived.stored_stamp(wh, name) == stamp:
            results.append(BuildResult(name, False, -1, 0.0))
            continue
        start = time.perf_counter()
        path = derived.derived_path(wh, name)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        extra: dict[str, object] = {}
        if name == prefix_days.VIEW:
            rows, extra, prefix_since = _removed_on_failure(
                tmp, f"building {name}",
                partial(_write_by_day, wh, options, session, tmp, force, group_segments, progress),
            )  # fmt: skip
        elif name in FROM_FIRST_DAY:
            rows, extra = _removed_on_failure(
                tmp, f"building {name}",
                partial(_write_from_first_day, wh, options, session, name, tmp, prefix_since,
                        progress),
            )  # fmt: skip
        else:
            rows = _removed_on_failure(
                tmp, f"building {name}", partial(_write_view, session.con(), name, tmp)
            )
        if path.is_dir() or tmp.is_dir():
            # a folder (request_prefix's days, or another engine's parts) cannot be swapped in
            # one step; a file replacing a file is. The stamp goes first: a build that dies
            # while the old folder is half removed leaves no stamp, so nothing reads or links
            # what is left of it, and the next build computes every day
            derived.stamp_path(wh, name).unlink(missing_ok=True)
            _remove(path)
        tmp.replace(path)
        stamp_tmp = derived.stamp_path(wh, name).with_suffix(f".{os.getpid()}.tmp")
        stamp_tmp.write_text(
            json.dumps({"view": name, "stamp": stamp, "rows": rows, **extra}, indent=1),
            encoding="utf-8",
        )
        stamp_tmp.replace(derived.stamp_path(wh, name))
        # later views read the stored result instead of recomputing this one
        session.stored(name, path)
        results.append(BuildResult(name, True, rows, time.perf_counter() - start))
    return results


def _compact(wh: Warehouse, out_dir: Path, progress: Callable[[str], None] | None) -> None:
    """Copy each day that many small sources split into many parts into one file."""
    con = ctrl_c.interruptible(duckdb.connect())
    try:
        con.execute("SET TimeZone = 'UTC'")
        _limit_build_memory(con, out_dir / ".spill")
        snapshot = wh.snapshot(compaction.COMPACTED_TABLES)
        compaction.write_missing(wh, snapshot, con, raw_parts.raw_relation, progress)
    except duckdb.Error as exc:
        raise QueryError(f"compacting the days of many sources: {one_line(exc)}") from exc
    finally:
        con.close()


def _write_view(con: duckdb.DuckDBPyConnection, name: str, tmp: Path) -> int:
    """Write view `name` to `tmp`, one Parquet file; returns the rows written."""
    written = con.execute(
        f"COPY (SELECT * FROM {quoted(name)}{stored_order(name)}) "
        f"TO '{path_literal(tmp)}' (FORMAT parquet, COMPRESSION zstd)"
    ).fetchall()
    return int(written[0][0]) if written else 0


def _write_by_day(
    wh: Warehouse,
    options: sql.SqlOptions,
    session: _Session,
    tmp: Path,
    force: bool,
    group_segments: int,
    progress: Callable[[str], None] | None,
) -> tuple[int, dict[str, object], tuple[dict[str, str], set[str]] | None]:
    """request_prefix as one folder per day under `tmp`: only the days an ingest changed
    computed again when the stored days allow it, else every day (pipeline/prefix_days.py).
    Returns the rows, what the stamp records of the days, and (the stored days' digests, the
    days computed) when the other days were kept."""
    path = derived.derived_path(wh, prefix_days.VIEW)
    spill = path.parent / ".spill"
    base = prefix_days.base_stamp(wh, options)
    days = prefix_days.day_inputs(wh)
    stored = derived.stamp_doc(wh, prefix_days.VIEW)
    old = None if force else prefix_days.stored_days(stored, base, path)
    todo = None
    if old is not None:
        todo = prefix_days.compute_days(
            wh, options, path, old, days, tmp, lambda c: _limit_build_memory(c, spill), progress
        )
    if old is None or todo is None:
        _remove(tmp)
        con = session.con()
        groups = prefix_groups.group_count(con, group_segments)
        if groups == 1:
            tmp.mkdir(parents=True)
            prefix_days.write_days(con, f"SELECT * FROM {quoted(prefix_days.VIEW)}", tmp)
        else:  # one group of cache scopes at a time, each adding its rows to the days
            prefix_groups.write_in_groups(con, tmp, groups, progress=progress)
    rows, counted = _finish_days(session.con, prefix_days.VIEW, tmp, days, (path, stored))
    since = (old, todo) if old is not None and todo is not None else None
    return rows, {"base": base, "days": days, **counted}, since


def _write_from_first_day(
    wh: Warehouse,
    options: sql.SqlOptions,
    session: _Session,
    name: str,
    tmp: Path,
    prefix_since: tuple[dict[str, str], set[str]] | None,
    progress: Callable[[str], None] | None,
) -> tuple[int, dict[str, object]]:
    """conversation_links or cache_breaks as one folder per day under `tmp`: from the first
    day request_prefix computed again when it kept the others and the stored rows are of the
    same days, else every day (FROM_FIRST_DAY). Returns the rows and what the stamp records."""
    path = derived.derived_path(wh, name)
    spill = path.parent / ".spill"
    base = derived.view_stamp(wh, name, options, state="per-day")
    days = prefix_days.day_inputs(wh)
    first = None
    if prefix_since is not None:
        old, todo = prefix_since
        if prefix_days.stored_days(derived.stamp_doc(wh, name), base, path) == old:
            # a day gone from the warehouse changed too: later days may have linked to it
            first = prefix_days.first_changed_day(todo | (old.keys() - days.keys()), days)

    def limit(c: duckdb.DuckDBPyConnection) -> None:
        _limit_build_memory(c, spill)

    job = None
    if first is not None:
        job = prefix_days.FromFirstDay(wh, options, path, first, days, tmp, limit, progress)
    if job is None or not FROM_FIRST_DAY[name](job):
        _remove(tmp)
        # every day: a run of days at a time on a large warehouse, else in one pass
        runs = prefix_days.runs_of_requests(wh, days)
        if runs is None or not IN_RUNS[name](
            prefix_days.FromFirstDay(wh, options, tmp, runs[0][0], days, tmp, limit, progress),
            runs,
        ):
            _remove(tmp)
            tmp.mkdir(parents=True)
            _writer(name)(session.con(), f"SELECT * FROM {quoted(name)}", tmp)
    rows, counted = _finish_days(session.con, name, tmp, days, (path, derived.stamp_doc(wh, name)))
    return rows, {"base": base, "days": days, **counted}


def lay_out_by_day(
    wh: Warehouse, options: sql.SqlOptions, name: str, parts: Path, out: Path, days: dict[str, str]
) -> tuple[int, dict[str, object]]:
    """The rows of stored view `name` that Spark wrote as Parquet parts under `parts`, laid out
    under `out` (a new folder) as this build stores them: a folder per UTC day, and what the
    stamp records of the days (`days`: prefix_days.day_inputs when Spark read the warehouse).
    Returns the rows and the stamp's part.

    The stamp's base names the engine. Spark's fingerprints (the `*_hash` columns) are other
    numbers than DuckDB's, and conversation_links looks requests up by them: days linked by
    one engine cannot seed the other's, so a DuckDB build after a Spark build computes every
    day, as before."""
    con = ctrl_c.interruptible(duckdb.connect())

    def store() -> tuple[int, dict[str, object]]:
        con.execute("SET TimeZone = 'UTC'")
        _limit_build_memory(con, derived.derived_path(wh, name).parent / ".spill")
        files = sorted(str(p) for p in parts.rglob("*.parquet"))
        if files:
            con.sql("SELECT * FROM read_parquet($p)", params={"p": files}).create_view(name)
        else:
            sql.create_empty_table(con, name, name)
        out.mkdir(parents=True)
        _writer(name)(con, f"SELECT * FROM {quoted(name)}", out)
        return _finish_days(lambda: con, name, out, days)

    try:
        rows, counted = _removed_on_failure(out, f"storing {name} by day", store)
    finally:
        con.close()
    base = derived.view_stamp(wh, name, options, state=SPARK_DAYS)
    return rows, {"base": base, "days": days, **counted}


def _writer(name: str) -> Callable[[duckdb.DuckDBPyConnection, str, Path], int]:
    """How view `name` is written by day: conversation_links in the order its seed is read by."""
    if name == conversation_days.VIEW:
        return conversation_days.write_link_days
    return prefix_days.write_days


def _finish_days(
    session: Callable[[], duckdb.DuckDBPyConnection],
    name: str,
    tmp: Path,
    days: dict[str, str],
    stored: tuple[Path, dict[str, object]] | None = None,
) -> tuple[int, dict[str, object]]:
    """A folder for every day with parts, a typed empty file when there is no row at all;
    returns the rows under `tmp` and what the stamp records of them by day (`stored`: the
    view's stored folder and stamp, whose linked days need no count)."""
    for day in days:  # a day with parts but no request (segments only) has a folder too
        (tmp / day).mkdir(exist_ok=True)
    if not any(tmp.rglob("*.parquet")):  # no request at all: readers still need the columns
        session().execute(
            f"COPY (SELECT * FROM {quoted(name)} LIMIT 0) "
            f"TO '{path_literal(tmp / 'empty.parquet')}' (FORMAT parquet)"
        )
    path, doc = stored if stored is not None else (tmp, {})
    per_folder = day_folders.count_days(tmp, path, doc)
    return sum(per_folder.values()), {day_folders.DAY_ROWS: per_folder}


def _removed_on_failure(path: Path, what: str, write: Callable[[], _T]) -> _T:
    """`write()`, and what it wrote at `path` removed if it fails; a DuckDB error becomes a
    QueryError saying `what` was being done.

    A query a Ctrl-C interrupted (pipeline/ctrl_c.py) leaves Python's KeyboardInterrupt to be
    raised at the first function called after it: here, as the removal starts. So the removal
    runs once more if the Ctrl-C cut it short. (As a context manager this ran too late:
    contextlib's own `__exit__` took the KeyboardInterrupt before the clean-up was reached.)"""
    try:
        return write()
    except BaseException as exc:
        try:
            _remove(path)
        except KeyboardInterrupt:
            _remove(path)
            raise
        if isinstance(exc, duckdb.Error) and not isinstance(exc, duckdb.InterruptException):
            raise QueryError(f"{what}: {one_line(exc)}") from exc
        raise


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def stored_order(name: str) -> str:
    """Rows of a stored view in started_at order: a period read (reports, summary) then skips
    the row groups outside its days by their min/max statistics."""
    if "started_at" in schema.load(name).names:
        return " ORDER BY started_at NULLS LAST"
    return ""


def _limit_build_memory(con: duckdb.DuckDBPyConnection, spill_dir: Path) -> None:
    # Row order of a derived file carries no meaning; keeping it would cost memory in sorts.
    con.execute("SET preserve_insertion_order = false")
    con.execute("SET temp_directory = ?", [str(spill_dir)])
    con.execute("SET memory_limit = ?", [f"{sql.build_memory_limit() // 1024**2}MiB"])
    con.execute("SET enable_progress_bar = false")
