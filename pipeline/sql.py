"""DuckDB over the warehouse, with the views from `queries/*.sql` registered.

Base relations `raw_<table>` read the Parquet parts (pipeline/raw_parts.py), a day held in
many small parts from the copy `build` made of it (pipeline/compaction.py). A table
with no files yet is an empty relation typed from its schema, so every view and query works on
an empty warehouse. Each `queries/<name>.sql` becomes view `<name>`; its header names its inputs
(`-- inputs: a, b`, or `none`), which orders creation. Values are always bound as parameters.

Materialised views. The heavy views in `MATERIALISED` can be computed once and stored as
`<warehouse>/derived/<view>.parquet` (a file, or a directory of part files) next to
`<warehouse>/derived/<view>.stamp.json`, whose `stamp` is `view_stamp(...)`: a digest of the
query text of the view and of everything it reads (transitively), of the warehouse's rows
(`warehouse_state`: every manifest file's bytes, which each ingest of a source writes anew with
its `ingested_at`, and the name and size of every visible part) and of the files of the data
tables it reads (the cache rules; the price tables). `connect` reads a derived file instead of
recomputing the view while its stamp matches, and silently recomputes otherwise;
`materialise.build` (the `cacheaudit build` command) writes them, holding the warehouse lock
shared so that no ingest lands between the rows it reads and the stamp it stores. Any engine
may write derived views, as long as it writes the same two files.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import duckdb

from pipeline import compaction, resources, schema
from pipeline.errors import NotFoundError, QueryError
from pipeline.period import Period, margin_days, parts_within, stored_files
from pipeline.raw_parts import raw_relation
from pipeline.sql_run import run as run  # re-exported: every command runs its queries as sql.run
from pipeline.sql_text import one_line, quoted, strip_final_semicolon
from pipeline.warehouse import TABLES, Warehouse, stem_of

QUERY_DIR = resources.folder("queries")
_HEADER = re.compile(r"^--\s*(inputs|output)\s*:\s*(.+)$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class SqlOptions:
    """What a session needs beyond the warehouse: user price and cache-rule files."""

    prices_paths: tuple[Path, ...] = ()
    rules_paths: tuple[Path, ...] = ()


# Modules that register data tables (not SQL) before the views are created. Each exposes
# `register(con, options)`; their data comes from files, bound through DuckDB's Python API.
TABLE_PROVIDERS = ("pipeline.prices.tables", "pipeline.cache_rules")

# Views worth storing: each reads millions of segment rows or joins them (see bench/views.py).
MATERIALISED = ("request_prefix", "conversation_links", "cache_breaks")
# Of those, the ones a period session computes from its own rows over the lookback margin
# (a rule's lookback can outlast its lifetime); cache_breaks reads them and looks back no
# further than a cache lifetime
LOOKING_BACK = ("request_prefix", "conversation_links")
DERIVED_DIR = "derived"
# A temp table of each `connect` session: the views it reads from stored Parquet.
STORED_VIEWS_TABLE = "cacheaudit_stored_views"
STAMP_VERSION = "2"
# A build caps DuckDB's memory and spills to <warehouse>/derived/.spill beyond it: the window
# over every segment is larger than memory on big warehouses (bench/views.py: 1M requests).
BUILD_MEMORY_LIMIT_BYTES = 3 * 1024**3
# A period read (a weekly page, summary --since) works on its days only: 1 GiB kept a week of
# 500,000 requests at 1.2 GB resident in 6 s, where 3 GiB let it grow to 1.9 GB for the same
# time (bench/history.py); past it DuckDB spills.
PERIOD_MEMORY_LIMIT_BYTES = 1024**3


@dataclass(frozen=True, slots=True)
class Query:
    name: str
    path: Path
    sql: str
    inputs: tuple[str, ...]


@cache
def load_queries() -> dict[str, Query]:
    queries: dict[str, Query] = {}
    for path in sorted(QUERY_DIR.glob("*.sql")):
        text = path.read_text(encoding="utf-8")
        inputs: tuple[str, ...] = ()
        for key, value in _HEADER.findall(text):
            if key == "inputs":  # `-- inputs: none`: a view that reads nothing
                inputs = tuple(v.strip() for v in value.split(",") if v.strip() not in ("", "none"))
        queries[path.stem] = Query(path.stem, path, text, inputs)
    return queries


def query_sql(name: str) -> str:
    """The text of `queries/<name>.sql`, for callers that run a named query directly."""
    try:
        return load_queries()[name].sql
    except KeyError:
        raise NotFoundError(f"no query named {name!r}", hint=f"see {QUERY_DIR}") from None


def param_query_sql(name: str) -> str:
    """The text of `queries/params/<name>.sql`: a query run with bound parameters (`$name`), so
    not a view; it reads the views its header names as inputs."""
    path = QUERY_DIR / "params" / f"{name}.sql"
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise NotFoundError(
            f"no parameterised query named {name!r}", hint=f"see {path.parent}"
        ) from None


def creation_order(queries: dict[str, Query]) -> list[str]:
    graph = {q.name: {i for i in q.inputs if i in queries} for q in queries.values()}
    try:
        return list(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        raise QueryError(f"queries/ has a dependency cycle: {exc.args[1]}") from exc


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


def needed(names: Iterable[str], queries: dict[str, Query] | None = None) -> set[str]:
    """The queries `names` read, transitively, themselves included."""
    queries = queries if queries is not None else load_queries()
    out: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in out or name not in queries:
            continue
        out.add(name)
        todo.extend(queries[name].inputs)
    return out


# Words that make a statement read the catalog (list views, describe them) rather than name the
# views it reads: such a statement gets every view, as `cacheaudit views` does.
_CATALOG_WORDS = re.compile(
    r"\b(?:information_schema|duckdb_\w+|pg_\w+|sqlite_master|show|describe|summarize|pragma\w*)\b",
    re.IGNORECASE,
)


def views_named_in(text: str, queries: dict[str, Query] | None = None) -> set[str] | None:
    """The views of queries/ that a user's SQL names (as a word, any case), or None for all.

    Creating a view makes DuckDB bind it, and a deep view binds everything under it: registering
    all of queries/ took 3.6 s on a 1 GB warehouse, most of the latency of `cacheaudit sql`,
    when the usual query reads one or two views (0.2 s). A word match can only over-match (a
    view name inside a string or a column alias creates that view for nothing); a statement
    that reads the catalog gets every view. `connect(only=...)` adds what the named views read.
    """
    if _CATALOG_WORDS.search(text):
        return None
    queries = queries if queries is not None else load_queries()
    words = {w.lower() for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text)}
    return {name for name in queries if name in words}


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
    con = duckdb.connect(database)
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
    for table, files in compaction.substitute(wh, snapshot).items():
        _register_raw(con, table, files)
    for name in creation_order(queries):
        if name not in wanted:
            continue
        derived = stored.get(name)
        if derived is not None:
            view_from_parquet(con, name, derived, days)
        elif heavy_once and (days is not None or only is not None) and name in MATERIALISED:
            compute_once(con, queries[name])
        else:
            create_query_view(con, queries[name])
    read_stored = sorted(name for name, path in stored.items() if path is not None)
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE {STORED_VIEWS_TABLE} AS SELECT unnest(?::VARCHAR[]) AS name",
        [read_stored],
    )
    return con


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


# --- materialised views -------------------------------------------------------------------


def derived_path(wh: Warehouse, name: str) -> Path:
    return wh.root / DERIVED_DIR / f"{name}.parquet"


def stamp_path(wh: Warehouse, name: str) -> Path:
    return wh.root / DERIVED_DIR / f"{name}.stamp.json"


# the data table the cache rules are registered as; every other data table is a price table
RULES_TABLE = "cache_rules"


def data_files(options: SqlOptions, *, rules: bool = True, prices: bool = True) -> list[Path]:
    """The files the data tables are read from: the cache rules' and the price tables'."""
    from pipeline import cache_rules

    files = list(cache_rules.all_paths(options)) if rules else []
    if not prices:
        return files
    price_dir = Path(__file__).resolve().parent / "prices" / "data"
    extra = [price_dir, *options.prices_paths]
    for p in extra:
        if p.is_dir():
            files.extend(sorted(f for f in p.rglob("*") if f.is_file()))
        elif p.is_file():
            files.append(p)
    return files


def warehouse_state(wh: Warehouse, files: dict[str, list[Path]] | None = None) -> str:
    """Digest of the rows readers see: what a stored view's stamp says it was computed from.

    A source's parts become visible with its manifest file and go with it, and every ingest of a
    source writes that file anew with its own `ingested_at`, also a --force re-ingest, which
    rewrites the rows under the same key (the key alone does not change, so a stamp built from keys
    would miss it). So the bytes of every manifest file change whenever rows do; the name and size
    of every visible part are added for parts removed or replaced by other means. No mtimes: a
    copied warehouse keeps its stored views. `files`: the `Warehouse.snapshot` the caller reads,
    when it has one."""
    digest = hashlib.sha256(b"warehouse\n")
    files = files if files is not None else wh.snapshot(TABLES)
    for path in files["sources"]:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue  # removed meanwhile (an ingest replacing it): the digest differs anyway
        digest.update(f"manifest {stem_of(path)} {len(data)}\n".encode())
        digest.update(data)
    for table in TABLES:
        if table == "sources":
            continue
        for path in files[table]:
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                continue
            digest.update(f"part {path.relative_to(wh.root).as_posix()} {size}\n".encode())
    return digest.hexdigest()


def view_stamp(
    wh: Warehouse, name: str, options: SqlOptions | None = None, *, state: str | None = None
) -> str:
    """Digest of everything view `name` is computed from (see the module docstring).

    `state`: `warehouse_state(wh)` when the caller has it, taken before the rows were read."""
    options = options or SqlOptions()
    queries = load_queries()
    if name not in queries:
        raise NotFoundError(f"no query named {name!r}", hint=f"see {QUERY_DIR}")
    digest = hashlib.sha256(f"cacheaudit-derived {STAMP_VERSION}\n".encode())
    data_tables: set[str] = set()
    for dep in sorted(needed([name], queries)):
        digest.update(f"query {dep}\n".encode())
        digest.update(queries[dep].sql.encode())
        data_tables.update(i for i in queries[dep].inputs if i not in queries)
    data_tables = {t for t in data_tables if not t.startswith("raw_")}
    digest.update(f"state {state or warehouse_state(wh)}\n".encode())
    # only the data a view reads: the heavy views read the cache rules, never a price, so a
    # user's price file (`--prices`) leaves their stored rows current
    rules, prices = RULES_TABLE in data_tables, bool(data_tables - {RULES_TABLE})
    if rules or prices:
        for path in data_files(options, rules=rules, prices=prices):
            data = path.read_bytes()
            digest.update(f"data {path.name} {len(data)}\n".encode())
            digest.update(data)
    return digest.hexdigest()


def stamp_doc(wh: Warehouse, name: str) -> dict[str, object]:
    """What `build` wrote beside view `name` (its stamp, rows, days): {} when none or damaged."""
    try:
        doc = json.loads(stamp_path(wh, name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def stored_stamp(wh: Warehouse, name: str) -> str | None:
    if not derived_path(wh, name).exists():
        return None
    stamp = stamp_doc(wh, name).get("stamp")
    return stamp if isinstance(stamp, str) else None


def fresh_derived(
    wh: Warehouse, name: str, options: SqlOptions | None = None, *, state: str | None = None
) -> Path | None:
    """The derived Parquet of `name` when its stamp matches the current inputs, else None."""
    if name not in MATERIALISED:
        return None
    stored = stored_stamp(wh, name)
    if stored is None or stored != view_stamp(wh, name, options, state=state):
        return None
    return derived_path(wh, name)


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
    past it to a directory of this process, which DuckDB empties when the connection closes."""
    spill = Path(tempfile.gettempdir()) / f"cacheaudit-spill-{os.getpid()}"
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
