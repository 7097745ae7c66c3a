"""DuckDB over the warehouse, with the views from `queries/*.sql` registered.

Base relations `raw_<table>` read the Parquet parts (hive partitions, union by name). A table
with no files yet is an empty relation typed from its schema, so every view and query works on
an empty warehouse. Each `queries/<name>.sql` becomes view `<name>`; its header names its inputs
(`-- inputs: a, b`), which orders creation. Values are always bound as parameters.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from functools import cache
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import duckdb

from pipeline import schema
from pipeline.errors import NotFoundError, QueryError
from pipeline.warehouse import TABLES, Warehouse

QUERY_DIR = Path(__file__).resolve().parent.parent / "queries"
_HEADER = re.compile(r"^--\s*(inputs|output)\s*:\s*(.+)$", re.MULTILINE)
_IDENT = re.compile(r"^[a-z_][a-z0-9_]*$")


@dataclass(frozen=True, slots=True)
class SqlOptions:
    """What a session needs beyond the warehouse: user price and cache-rule files."""

    prices_paths: tuple[Path, ...] = ()
    rules_paths: tuple[Path, ...] = ()


# Modules that register data tables (not SQL) before the views are created. Each exposes
# `register(con, options)`; their data comes from files, bound through DuckDB's Python API.
TABLE_PROVIDERS = ("pipeline.prices.tables", "pipeline.cache_rules")


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
            if key == "inputs":
                inputs = tuple(v.strip() for v in value.split(",") if v.strip())
        queries[path.stem] = Query(path.stem, path, text, inputs)
    return queries


def query_sql(name: str) -> str:
    """The text of `queries/<name>.sql`, for callers that run a named query directly."""
    try:
        return load_queries()[name].sql
    except KeyError:
        raise NotFoundError(f"no query named {name!r}", hint=f"see {QUERY_DIR}") from None


def creation_order(queries: dict[str, Query]) -> list[str]:
    graph = {q.name: {i for i in q.inputs if i in queries} for q in queries.values()}
    try:
        return list(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        raise QueryError(f"queries/ has a dependency cycle: {exc.args[1]}") from exc


def _quoted(name: str) -> str:
    # Identifiers here come from our own schema files, never from user input; checked anyway.
    if not _IDENT.match(name):
        raise QueryError(f"bad identifier in schema: {name!r}")
    return f'"{name}"'


def _register_raw(con: duckdb.DuckDBPyConnection, wh: Warehouse, table: str) -> None:
    spec = schema.load(table)
    view = f"raw_{table}"
    files = wh.files(table)
    if files:
        hive = spec.partition_by is not None
        options = "hive_partitioning = true, union_by_name = true"
        if hive:
            options += f", hive_types = {{{_quoted(spec.partition_by or '')}: DATE}}"
        rel = con.sql(
            f"SELECT * FROM read_parquet($files, {options})",
            params={"files": [str(f) for f in files]},
        )
        rel.create_view(view)
        return
    cols = ", ".join(f"{_quoted(c.name)} {c.type}" for c in spec.columns)
    con.execute(f"CREATE OR REPLACE TEMP TABLE {_quoted(view)} ({cols})")


def connect(
    wh: Warehouse, *, options: SqlOptions | None = None, database: str = ":memory:"
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with raw tables and every view in queries/ registered."""
    con = duckdb.connect(database)
    con.execute("SET TimeZone = 'UTC'")
    for table in TABLES:
        _register_raw(con, wh, table)
    for provider in TABLE_PROVIDERS:
        importlib.import_module(provider).register(con, options or SqlOptions())
    queries = load_queries()
    for name in creation_order(queries):
        q = queries[name]
        try:
            con.execute(
                f"CREATE OR REPLACE VIEW {_quoted(name)} AS {_strip_final_semicolon(q.sql)}"
            )
        except duckdb.Error as exc:
            raise QueryError(f"{q.path.name}: {_one_line(exc)}") from exc
    return con


def _strip_final_semicolon(sql: str) -> str:
    return sql.strip().rstrip(";")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def run(
    con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, object] | list[object] | None = None
) -> duckdb.DuckDBPyRelation:
    try:
        rel = con.sql(sql, params=params)
    except duckdb.Error as exc:
        raise QueryError(_one_line(exc), hint="`cacheaudit views` lists views and columns") from exc
    if rel is None:
        raise QueryError("statement returned no rows", hint="use a SELECT")
    return rel


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
