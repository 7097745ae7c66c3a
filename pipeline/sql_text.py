"""Text that goes into SQL or out to a user: quoted identifiers, path literals, one-line errors.

Values are always bound as parameters; these are for what cannot be (identifiers from our own
schema files, the path of a COPY ... TO) and for DuckDB's multi-line messages.
"""

from __future__ import annotations

import re
from pathlib import Path

from pipeline.errors import QueryError

_IDENT = re.compile(r"^[a-z_][a-z0-9_]*$")


def quoted(name: str) -> str:
    # Identifiers here come from our own schema files, never from user input; checked anyway.
    if not _IDENT.match(name):
        raise QueryError(f"bad identifier in schema: {name!r}")
    return f'"{name}"'


def path_literal(path: Path) -> str:
    # COPY ... TO takes no parameters; our own paths only, quotes doubled anyway.
    return str(path).replace("'", "''")


def strip_final_semicolon(sql: str) -> str:
    return sql.strip().rstrip(";")


def one_line(exc: BaseException | str) -> str:
    return " ".join(str(exc).split())
