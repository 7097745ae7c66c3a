"""Running a statement on a session: DuckDB's errors about it told as the user's mistake.

A statement's error (a typo, a column that does not exist, a value that does not convert) is
the user's: one line, exit 1, with a hint where one helps. DuckDB's internal errors stay bugs.
Every command runs its queries through `run`, and `cacheaudit sql` a user's own.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import duckdb

from pipeline.errors import QueryError
from pipeline.sql_text import one_line

# DuckDB's errors about a statement or the values it meets: a user's mistake, told in DuckDB's
# own words. The rest (InternalException, FatalException) are bugs, in DuckDB or in our views.
_STATEMENT_ERRORS: tuple[type[duckdb.Error], ...] = (
    duckdb.ProgrammingError,  # parser, syntax, binder, catalog, invalid input or type
    duckdb.DataError,  # conversion, out of range, type mismatch: e.g. '2026-13-01'
    duckdb.NotSupportedError,
    duckdb.OperationalError,  # a file the statement reads, out of memory
    duckdb.DependencyException,
    duckdb.PermissionException,
)  # not InterruptException: a Ctrl-C, which the CLI reports as `interrupted`
_SQL_HINT = "`cacheaudit views` lists views and columns"
_CARET_CONTEXT = re.compile(r"\n\s*LINE \d+:.*", re.DOTALL)


@contextmanager
def statement_errors() -> Iterator[None]:
    """Report a DuckDB error that a statement raises, at bind time or while its rows are read,
    as the user's error (exit 1, one line); a DuckDB internal error stays a bug."""
    try:
        yield
    except _STATEMENT_ERRORS as exc:
        # DuckDB's caret under the statement ("LINE 1: ... ^^^") means nothing once on one line.
        message = one_line(_CARET_CONTEXT.sub("", str(exc)))
        hint = _SQL_HINT if isinstance(exc, duckdb.ProgrammingError) else None
        raise QueryError(message, hint=hint) from exc


def run(
    con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, object] | list[object] | None = None
) -> duckdb.DuckDBPyRelation:
    with statement_errors():
        rel = con.sql(sql, params=params)
    if rel is None:
        raise QueryError("statement returned no rows", hint="use a SELECT")
    return rel
