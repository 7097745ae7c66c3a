"""Execution engines: DuckDB on one machine (the default) and Apache Spark for scale-out.

Both write the same warehouse layout and run the same `queries/*.sql`; Spark runs them translated
by sqlglot. pyspark is an optional extra (`pip install -e ".[spark]"`), imported only when the Spark
engine is chosen, so the core install never needs Java.
"""

from __future__ import annotations

import os

from pipeline.errors import UsageError

ENGINES = ("duckdb", "spark")
DEFAULT_SPARK_MASTER = "local[*]"
ENGINE_ENV = "CACHEAUDIT_ENGINE"
MASTER_ENV = "CACHEAUDIT_SPARK_MASTER"


def engine_from(value: str | None) -> str:
    """The engine named by an option, else by CACHEAUDIT_ENGINE, else duckdb."""
    name = (value or os.environ.get(ENGINE_ENV) or "duckdb").strip().lower()
    if name not in ENGINES:
        raise UsageError(f"unknown engine {name!r}", hint=f"choose one of: {', '.join(ENGINES)}")
    return name


def master_from(value: str | None) -> str:
    """The Spark master URL: the option, else CACHEAUDIT_SPARK_MASTER, else local[*]."""
    return value or os.environ.get(MASTER_ENV) or DEFAULT_SPARK_MASTER
