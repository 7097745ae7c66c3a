"""DuckDB over the warehouse, with the views from `queries/*.sql` registered.

Base relations `raw_<table>` read the Parquet parts (pipeline/raw_parts.py), a day held in
many small parts from the copy `build` made of it (pipeline/compaction.py). A table
with no files yet is an empty relation typed from its schema, so every view and query works on
an empty warehouse. Each `queries/<name>.sql` becomes view `<name>`, in the order their headers
give (pipeline/sql_catalog.py). Values are always bound as parameters. A heavy view that `build`
stored is read from its Parquet while its stamp is current (pipeline/derived.py).
"""

from __future__ import annotations

import importlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

import duckdb

from pipeline import compaction, ctrl_c, dead_work, schema
from pipeline.derived import MATERIALISED, fresh_derived, warehouse_state
from pipeline.errors import QueryError
from pipeline.period import Period, margin_days, parts_within, stored_files
from pipeline.priced_by_days import day_runs
from pipeline.raw_parts import raw_relation
from pipeline.sql_catalog import Query, creation_order, load_queries, needed, views_named_in

# re-exported: every command builds its session's options as sql.SqlOptions
from pipeline.sql_catalog import SqlOptions as SqlOptions
from pipeline.sql_run import run as run  # re-exported: every command runs its queries as sql.run
from pipeline.sql_text import one_line, quoted, strip_final_semicolon
from pipeline.warehouse import TABLES, Warehouse, stem_of

# Modules that register data tables (not SQL) before the views are created. Each exposes
# `register(con, options)`; their data comes from files, bound through DuckDB's Python API.
TABLE_PROVIDERS = ("pipeline.prices.tables", "pipeline.cache_rules")

# Of the stored views (derived.MATERIALISED), the ones a period session computes from its own
# rows over the lookback margin (a rule's lookback can outlast its lifetime); cache_breaks reads
# them and looks back no further than a cache lifetime
LOOKING_BACK = ("request_prefix", "conversation_links")
# A temp table of each `connect` session: the views it reads from stored Parquet.
STORED_VIEWS_TABLE = "cacheaudit_stored_views"
# A build caps DuckDB's memory and spills to <warehouse>/derived/.spill beyond it: the window
# over every segment is larger than memory on big warehouses (bench/views.py: 1M requests).
BUILD_MEMORY_LIMIT_BYTES = 3 * 1024**3
# A period read (a weekly page, summary --since) works on its days only: 1 GiB kept a week of
# 500,000 requests at 1.2 GB resident in 6 s, where 3 GiB let it grow to 1.9 GB for the same
# time (bench/history.py); past it DuckDB spills.
PERIOD_MEMORY_LIMIT_BYTES = 1024**3
# Computed once per whole-history session of named views, as a table, besides the heavy views
# not read from storage: request_costs prices every request, and cost_summary, break_costs (so
# findings) and summary_requests each read it. As a view every query priced every request
# again: `check` reads findings five times, 37 s on 1M requests and over 15 minutes on 10M,
# where the pricing spills past the memory cap. A period read keeps it a view (few days, and a
# lower memory cap).
PRICED_ONCE = ("request_costs",)
# Read several times by one command (`check` reads findings in five queries, `summary` in
# three), each a grouping of every break with its money: computed once per whole-history
# session of named views too, as a table of a few hundred rows.
READ_SEVERAL_TIMES = ("findings",)


def _register_raw(con: duckdb.DuckDBPyConnection, table: str, files: list[Path]) -> None:
    view = f"raw_{table}"
    if files:
        raw_relation(con, table, files).create_view(view)
        return
    create_empty_table(con, view, table)


def create_empty_table(con: duckdb.DuckDBPyConnection, name: str, table: str) -> None:
    """A temporary table `name` with no rows and the columns of schema `table`: a table or view
    that has no file yet still has its columns."""
    cols = ", ".join(f"{quoted(c.name)} {c.type}" for c in schema.load(table).columns)
    con.execute(f"CREATE OR REPLACE TEMP TABLE {quoted(name)} ({cols})")


def connect(
    wh: Warehouse,
    *,
    options: SqlOptions | None = None,
    database: str = ":memory:",
    use_derived: bool = True,
    only: Iterable[str] | None = None,
    period: Period | None = None,
    heavy_once: bool = True,
    computed: Iterable[str] = (),
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with raw tables and every view in queries/ registered.

    `use_derived`: read a view from `<warehouse>/derived/` while its stamp is current, except
    those `computed` (a build computing them again, its stored rows current or not).
    `only`: create just these views and what they read (faster; unrelated views are skipped).
    `period`: register only the days of the period and the margin before it, of the raw tables
    and of the stored views (pipeline/period.py says what the margin leaves out).
    `heavy_once`: a heavy view (MATERIALISED) not read from storage is computed once, as a table
    of the session (`compute_once`), in a period read and in a session of named views (`only`);
    `build` turns it off: it computes request_prefix a group of scopes at a time.
    """
    options = options or SqlOptions()
    queries = load_queries()
    wanted = needed(only, queries) if only is not None else set(queries)
    recompute = wanted & set(computed)
    # Every table as of one moment: an ingest replacing a source meanwhile must not leave its
    # old requests beside its new segments. The stamps of stored views are checked against
    # the same files (once per session, not per view: it reads every manifest file).
    snapshot = wh.snapshot(TABLES)
    state = warehouse_state(wh, snapshot) if use_derived and wanted & set(MATERIALISED) else None
    con = ctrl_c.interruptible(duckdb.connect(database))
    con.execute("SET TimeZone = 'UTC'")
    # Every scan of a raw view opens all its parts, and a report scans them many times: keep
    # their footers once read (a warehouse of 707 hourly sources: report 7.6 -> 6.5 s,
    # summary 4.2 -> 3.4 s). The parts do not change under a session (its snapshot).
    con.execute("SET parquet_metadata_cache = true")
    _limit_read_memory(con, PERIOD_MEMORY_LIMIT_BYTES if period is not None else None)
    # the data tables first: the margin of a period read comes from the cache rules
    for provider in TABLE_PROVIDERS:
        importlib.import_module(provider).register(con, options)
    stored = {
        name: fresh_derived(wh, name, options, state=state) if use_derived else None
        for name in wanted & set(MATERIALISED)
        if name not in recompute
    }
    days = None
    if period is not None:
        from_sql = any(name in wanted and stored.get(name) is None for name in LOOKING_BACK)
        days = period.read_days(margin_days(con, lookback=from_sql))
        snapshot = period_parts(snapshot, days)
    # days of many small sources are read from build's copies (pipeline/compaction.py)
    parts = compaction.substitute(wh, snapshot)
    for table, files in parts.items():
        _register_raw(con, table, files)
    for name in creation_order(queries):
        if name not in wanted:
            continue
        derived = stored.get(name)
        if derived is not None:
            view_from_parquet(con, name, derived, days)
        elif name in PRICED_ONCE and heavy_once and only is not None and days is None:
            prefix = stored.get("request_prefix")
            _priced_by_day_runs(con, queries[name], parts.get("requests", []), prefix)
        elif heavy_once and _once_per_session(name, named=only is not None, period=days):
            compute_once(con, queries[name])
        else:
            create_query_view(con, queries[name])
    read_stored = sorted(name for name, path in stored.items() if path is not None)
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE {STORED_VIEWS_TABLE} AS SELECT unnest(?::VARCHAR[]) AS name",
        [read_stored],
    )
    return con


def _once_per_session(name: str, *, named: bool, period: Period | None) -> bool:
    """Whether a view not read from storage is computed once as a table of the session."""
    if name in MATERIALISED:
        return period is not None or named
    return name in READ_SEVERAL_TIMES and named and period is None


def stored_views(con: duckdb.DuckDBPyConnection) -> set[str]:
    """The views a `connect` session reads from `build`'s stored Parquet: what they are
    computed from is not read at all (a report need not prepare it)."""
    try:
        rows = con.execute(f"SELECT name FROM {STORED_VIEWS_TABLE}").fetchall()
    except duckdb.CatalogException:
        return set()  # a connection not made by `connect`
    return {str(name) for (name,) in rows}


def period_parts(snapshot: dict[str, list[Path]], days: Period) -> dict[str, list[Path]]:
    """The parts a period read registers: those of its days for the tables partitioned by day,
    and the prompt text (segment_content) of the sources that have parts on those days. A
    source stores the text of every segment it holds (ingest keeps each text once per source),
    so the segments read find their text without the rest of the history's."""
    out = {
        table: parts_within(files, days) if schema.load(table).partition_by == "day" else files
        for table, files in snapshot.items()
    }
    if "segment_content" in out:
        read = {stem_of(p) for t in ("requests", "segments") for p in out.get(t, [])}
        out["segment_content"] = [p for p in out["segment_content"] if stem_of(p) in read]
    return out


def create_query_view(con: duckdb.DuckDBPyConnection, q: Query) -> None:
    try:
        con.execute(f"CREATE OR REPLACE VIEW {quoted(q.name)} AS {strip_final_semicolon(q.sql)}")
    except duckdb.Error as exc:
        raise QueryError(f"{q.path.name}: {one_line(exc)}") from exc


def compute_once(con: duckdb.DuckDBPyConnection, q: Query) -> None:
    """A heavy view (MATERIALISED) a period read computes itself, as a temporary table of the
    session: a view would be computed again by every query, and within one query by every
    view that reads it (cache_breaks reads request_prefix directly and through
    conversations and expected_cache). `summary --by day` of one day of a 500k-request week
    without a build: 42 s -> 14 s, at the same peak memory. A whole-history session computes
    them so only when stored views cannot serve it (a user's rules, an ingest running, a
    read-only warehouse) and it named the views it reads; past the memory cap DuckDB spills
    the tables to its temporary directory."""
    try:
        con.execute(f"CREATE TEMP TABLE {quoted(q.name)} AS {strip_final_semicolon(q.sql)}")
    except duckdb.Error as exc:
        raise QueryError(f"{q.path.name}: {one_line(exc)}") from exc


def _priced_by_day_runs(
    con: duckdb.DuckDBPyConnection, q: Query, files: list[Path], prefix: Path | None
) -> None:
    """request_costs of a whole-history session, computed once as a table, a run of days at a
    time (pipeline/priced_by_days.py): whole, 10M requests spilled far past the memory cap.
    Each run reads its own days of the stored request_prefix too (expected_cache's input):
    scanning all of it for every run cost more than the pricing."""
    runs = day_runs(con, files)
    if len(runs) < 2:
        compute_once(con, q)
        return
    body = strip_final_semicolon(q.sql)
    try:
        for i, (days, parts) in enumerate(runs):
            _register_raw(con, "requests", parts)
            if prefix is not None:
                view_from_parquet(con, "request_prefix", prefix, days)
            verb = (
                f"CREATE TEMP TABLE {quoted(q.name)} AS"
                if i == 0
                else f"INSERT INTO {quoted(q.name)}"
            )
            con.execute(f"{verb} {body}")
    except duckdb.Error as exc:
        raise QueryError(f"{q.path.name}: {one_line(exc)}") from exc
    finally:  # every request again, and every stored day, for the rest of the session
        _register_raw(con, "requests", files)
        if prefix is not None:
            view_from_parquet(con, "request_prefix", prefix)


def view_from_parquet(
    con: duckdb.DuckDBPyConnection, name: str, path: Path, days: Period | None = None
) -> None:
    # the files as of now, not a glob expanded at every query: a build replacing a folder
    # meanwhile then fails a query of this session instead of giving it part of the rows
    files = sorted(str(p) for p in stored_files(path, days)) if path.is_dir() else [str(path)]
    if days is None:
        rel = con.sql("SELECT * FROM read_parquet($p)", params={"p": files})
    else:
        # stored rows lie in started_at order, or in a file per day: the filter skips the rest
        rel = con.sql(
            "SELECT * FROM read_parquet($p) WHERE started_at >= $start AND started_at < $end",
            params={"p": files, "start": days.start, "end": days.end},
        )
    rel.create_view(name, replace=True)


def build_memory_limit() -> int:
    """Bytes a build may hold in memory: BUILD_MEMORY_LIMIT_BYTES, or half of a smaller RAM."""
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return BUILD_MEMORY_LIMIT_BYTES
    return min(BUILD_MEMORY_LIMIT_BYTES, ram // 2)


def _limit_read_memory(con: duckdb.DuckDBPyConnection, cap: int | None = None) -> None:
    """Every reading command (report, summary, findings, sql...) holds no more than a build
    may (DuckDB's own default is 80% of RAM), a period read no more than `cap`, and spills
    past it to a directory of this process, which DuckDB empties when the connection closes.
    A process killed (SIGKILL) leaves its directory behind: the first read of each process
    removes those of processes that are gone."""
    tmp = Path(tempfile.gettempdir())
    dead_work.remove_dead_work_once(tmp, dead_work.SPILL_FOLDER, own_only=True)
    spill = tmp / f"{dead_work.SPILL_PREFIX}{os.getpid()}"
    limit = build_memory_limit() if cap is None else min(cap, build_memory_limit())
    con.execute("SET temp_directory = ?", [str(spill)])
    con.execute("SET memory_limit = ?", [f"{limit // 1024**2}MiB"])


def run_user_sql(
    wh: Warehouse, text: str, options: SqlOptions | None = None
) -> tuple[duckdb.DuckDBPyConnection, duckdb.DuckDBPyRelation]:
    """A user's statement over a session holding the views it names (`views_named_in`).

    A statement that fails there runs again over every view, so a miss of the name scan costs
    time, never an answer, and errors read as they would with every view (DuckDB's "did you
    mean" suggestions look among the views that exist). A script of several statements gets
    every view from the start."""
    # Several statements get every view: a retry would run those before the failing one twice.
    only = views_named_in(text) if _single_statement(text) else None
    con = connect(wh, options=options, only=only)
    try:
        return con, run(con, text)
    except QueryError:
        if only is None:
            raise
    con = connect(wh, options=options)
    return con, run(con, text)


def _single_statement(text: str) -> bool:
    try:
        return len(duckdb.extract_statements(text)) == 1
    except duckdb.Error:
        return False  # a parse error: the run reports it


# How DuckDB spells a type of schemas/ when it describes a view (information_schema).
_TYPE_DISPLAY = {"TIMESTAMPTZ": "TIMESTAMP WITH TIME ZONE"}


def documented_views() -> dict[str, list[tuple[str, str, str | None]]]:
    """View name -> [(column, type, unit)] from schemas/, for every view of queries/.

    The same columns and types a session would report (tests/test_schemas_agree_with_views.py
    checks them against DuckDB), without creating the views: binding all of them took 3.6 s."""
    out: dict[str, list[tuple[str, str, str | None]]] = {}
    for name in sorted(load_queries()):
        out[name] = [
            (c.name, _TYPE_DISPLAY.get(c.type, c.type), c.unit) for c in schema.load(name).columns
        ]
    return out


def views(con: duckdb.DuckDBPyConnection) -> dict[str, list[tuple[str, str]]]:
    """View name -> [(column, type)], for every view from queries/."""
    out: dict[str, list[tuple[str, str]]] = {}
    for name in sorted(load_queries()):
        rows = con.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_name = ? ORDER BY ordinal_position",
            [name],
        ).fetchall()
        out[name] = [(str(c), str(t)) for c, t in rows]
    return out
