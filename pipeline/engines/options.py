"""Typer options shared by every command that can run on either engine (`ingest`, `build`)."""

from __future__ import annotations

from typing import Annotated

import typer

from pipeline.engines import ENGINE_ENV, MASTER_ENV

EngineOpt = Annotated[
    str | None,
    typer.Option(
        "--engine",
        envvar=ENGINE_ENV,
        help="duckdb (this machine, the default) or spark (a Spark cluster, or local[*]).",
        show_default=False,
    ),
]
SparkMasterOpt = Annotated[
    str | None,
    typer.Option(
        "--spark-master",
        envvar=MASTER_ENV,
        help="Spark master URL, passed through: local[*] (default), spark://host:7077, yarn,"
        " k8s://https://host:443.",
        show_default=False,
    ),
]
