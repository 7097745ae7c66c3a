"""`cacheaudit spark ...`: check a Spark setup and show the Spark SQL of a view.

`ingest` and `build` themselves take `--engine spark` (pipeline.engines.options); this group
holds what only the Spark engine needs.
"""

from __future__ import annotations

from typing import Annotated

import typer

from pipeline.engines.options import SparkMasterOpt

spark_app = typer.Typer(
    name="spark",
    help="The Spark engine: check the setup, show a view's translated Spark SQL.",
    no_args_is_help=True,
)


@spark_app.command("sql")
def show_sql(
    view: Annotated[str, typer.Argument(help="A view from queries/ (see `cacheaudit views`).")],
) -> None:
    """Print the Spark SQL that `--engine spark` runs for VIEW (translated from queries/VIEW.sql):
    first each CTE the query reads more than once, computed once as a temp view, then the query.

    Data-table variables (e.g. the expected-cache table request_costs reads) are resolved as
    `cacheaudit build --engine spark` resolves them."""
    import duckdb

    from pipeline import sql as sqlmod
    from pipeline import sql_catalog
    from pipeline.engines.spark_translate import translate_steps

    con = duckdb.connect()
    for provider in sqlmod.TABLE_PROVIDERS:
        __import__(provider, fromlist=["register"]).register(con, sqlmod.SqlOptions())
    rows = con.execute("SELECT name, CAST(value AS VARCHAR) FROM duckdb_variables()").fetchall()
    variables = tuple(sorted((str(n), str(v)) for n, v in rows))
    import sqlglot

    steps = translate_steps(sql_catalog.query_sql(view), variables, prefix=view)
    for name, spark_sql in steps:
        pretty = sqlglot.transpile(spark_sql, read="spark", write="spark", pretty=True)[0]
        if name is None:
            typer.echo(f"-- {view}" + (", reading the steps above" if len(steps) > 1 else ""))
        else:
            typer.echo(f"-- step: temp view {name}, computed once")
        typer.echo(pretty + ";\n")


@spark_app.command("check")
def check(spark_master: SparkMasterOpt = None) -> None:
    """Start a session, then translate and plan every view on an empty warehouse.

    Proves Java, pyspark and the SQL translation work before a long run."""
    import tempfile

    from pipeline.commands.options import err
    from pipeline.engines import master_from
    from pipeline.engines.spark_session import get_session
    from pipeline.engines.spark_sql import register_views
    from pipeline.errors import QueryError

    master = master_from(spark_master)
    err(f"starting Spark on {master} (the JVM takes a while to start) ...")
    spark = get_session(master, app_name="cacheaudit check")
    try:
        err(f"spark {spark.version} on {master}; translating and planning every view ...")
        errors: dict[str, QueryError] = {}
        with tempfile.TemporaryDirectory() as empty:
            register_views(spark, empty, errors=errors)
        for name, exc in sorted(errors.items()):
            typer.echo(f"FAIL {name}: {exc.message}")
        if errors:
            raise QueryError(f"{len(errors)} views do not run on Spark", hint="see FAIL lines")
        typer.echo("every view translates and plans on Spark")
    finally:
        spark.stop()


def register(app: typer.Typer) -> None:
    app.add_typer(spark_app)
