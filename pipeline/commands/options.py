"""Options and helpers shared by `pipeline.cli` and the command modules in `pipeline.commands`.

They live here, not in `pipeline.cli`, so a command module never imports `pipeline.cli`: when
the CLI runs as `python -m pipeline.cli` that module is `__main__`, and importing
`pipeline.cli` again would run it a second time, half-initialised (a circular import).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from pipeline.sql import SqlOptions

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
    from pipeline.sql import SqlOptions  # lazy: keeps duckdb out of `ingest` start-up

    return SqlOptions(prices_paths=tuple(prices or ()), rules_paths=tuple(rules or ()))


def err(message: str) -> None:
    typer.echo(message, err=True)
