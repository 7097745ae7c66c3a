"""Options and helpers shared by `pipeline.cli` and the command modules in `pipeline.commands`.

They live here, not in `pipeline.cli`, so a command module never imports `pipeline.cli`: when
the CLI runs as `python -m pipeline.cli` that module is `__main__`, and importing
`pipeline.cli` again would run it a second time, half-initialised (a circular import).
"""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from collections.abc import Iterable

    from pipeline.materialise import BuildResult
    from pipeline.sql_catalog import SqlOptions
    from pipeline.warehouse import Warehouse

WarehouseOpt = Annotated[
    Path,
    typer.Option(
        "--warehouse",
        "-w",
        envvar="CACHEAUDIT_WAREHOUSE",
        help="Warehouse directory (Parquet tables).",
        show_default=True,
    ),
]
DEFAULT_WAREHOUSE = Path("warehouse")
PricesOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--prices",
        envvar="CACHEAUDIT_PRICES",
        help="Extra price table (CSV) or a directory of them; their rows win over shipped ones.",
    ),
]
RulesOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--rules",
        envvar="CACHEAUDIT_RULES",
        help="Extra cache-rule table (CSV) or a directory of them; their rows win.",
    ),
]


def sql_options(prices: list[Path] | None, rules: list[Path] | None) -> SqlOptions:
    from pipeline.sql_catalog import SqlOptions  # lazy: `ingest` start-up imports none of it

    return SqlOptions(prices_paths=tuple(prices or ()), rules_paths=tuple(rules or ()))


def existing_warehouse(path: Path) -> Warehouse:
    """The warehouse at `path` for a command that reads one; a missing path, or a directory
    of other things (a capture directory passed by mistake), is an error, not an empty result.
    An empty directory, or a warehouse where nothing was accepted yet, has empty tables."""
    from pipeline.errors import NotFoundError
    from pipeline.warehouse import LOCK_NAME, TABLES, Warehouse

    elsewhere = "point --warehouse (or CACHEAUDIT_WAREHOUSE) at an existing warehouse directory"
    if not path.exists():
        raise NotFoundError(
            f"no warehouse at {path}",
            hint=f"create it with `cacheaudit ingest FILE... --warehouse {path}`, or {elsewhere}",
        )
    if not path.is_dir():
        raise NotFoundError(f"{path} is not a directory, so not a warehouse", hint=elsewhere)
    wh = Warehouse(path)
    # what an interrupted first ingest leaves (its lock file, perhaps empty table folders) is
    # still a warehouse, with empty tables
    ours = {LOCK_NAME, *TABLES}
    if not wh.exists() and any(p.name not in ours for p in path.iterdir()):
        raise NotFoundError(
            f"{path} is not a warehouse (it holds other files and no sources/ manifest)",
            hint=f"`cacheaudit ingest FILE... --warehouse {path}` makes it one, or {elsewhere}",
        )
    return wh


def ingested_warehouse(path: Path) -> Warehouse | None:
    """`existing_warehouse`, for a command with nothing to do before a first ingest (build,
    diagnose): None, said in a line, where nothing was ingested yet (an empty directory, which
    the reading commands take as an empty warehouse)."""
    wh = existing_warehouse(path)
    if wh.exists():
        return wh
    err(no_requests_yet(path))
    return None


def no_requests_yet(path: Path | str) -> str:
    return f"{path} holds no requests yet: run `cacheaudit ingest FILE -w {path}`"


def day_option(value: str | None, flag: str) -> date | None:
    """A `--since` / `--until` day (YYYY-MM-DD, a whole UTC day), or None when not given."""
    from pipeline.errors import UsageError

    if value is None:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise UsageError(f"{flag} {value!r} is not a date", hint="write YYYY-MM-DD") from None


def err(message: str) -> None:
    typer.echo(message, err=True)


def say_built(results: Iterable[BuildResult], *, unchanged: bool = True) -> None:
    """A line per stored view `build` computed (and, with `unchanged`, per view it kept)."""
    from pipeline.reports.numbers import count

    for r in results:
        if r.rebuilt:
            rows = count(r.rows, "row")
            err(f"{r.name}: {rows} in {r.seconds:.1f} s -> derived/{r.name}.parquet")
        elif unchanged:
            err(f"{r.name}: up to date")
