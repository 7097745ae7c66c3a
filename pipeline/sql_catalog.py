"""What a SQL session is made of: the query files of `queries/` and the user's data files.

Each `queries/<name>.sql` becomes view `<name>`; its header names its inputs (`-- inputs: a, b`,
or `none`), which orders creation (`creation_order`) and says what a view reads (`needed`).
`queries/params/` holds queries run with bound parameters instead. No DuckDB here: the
command line reads these without starting a session.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

from pipeline import resources
from pipeline.errors import NotFoundError, QueryError

QUERY_DIR = resources.folder("queries")
_HEADER = re.compile(r"^--\s*(inputs|output)\s*:\s*(.+)$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class SqlOptions:
    """What a session needs beyond the warehouse: user price and cache-rule files."""

    prices_paths: tuple[Path, ...] = ()
    rules_paths: tuple[Path, ...] = ()


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


def needed(
    names: Iterable[str],
    queries: dict[str, Query] | None = None,
    *,
    stored: Iterable[str] = (),
) -> set[str]:
    """The queries `names` read, transitively, themselves included; not what a `stored` view
    is computed from (a session reads it from `build`'s Parquet instead)."""
    queries = queries if queries is not None else load_queries()
    stop = set(stored)
    out: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in out or name not in queries:
            continue
        out.add(name)
        if name not in stop:
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
