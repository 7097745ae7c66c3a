"""The derived views on Spark SQL, translated from the one copy of the SQL in `queries/`.

Each `queries/<view>.sql` (DuckDB dialect) is transpiled to Spark SQL by sqlglot and registered as
a temp view in the same dependency order as `pipeline.sql.connect`. Raw tables are read from the
warehouse's Parquet with the types of `schemas/<table>.json`; data tables (prices, cache rules) are
loaded by the very providers DuckDB uses (`pipeline.sql.TABLE_PROVIDERS`) into a scratch DuckDB
connection and copied into Spark, so both engines see the same rows. Results are written as Parquet
cast to the view's schema file, so DuckDB reads them with the types it would have produced.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from pipeline import derived, materialise, prefix_days, schema, sql_catalog
from pipeline.engines.spark_translate import Step, Variables, spark_type, translate_steps
from pipeline.errors import NotFoundError, QueryError
from pipeline.sql import TABLE_PROVIDERS, SqlOptions
from pipeline.sql_catalog import Query, creation_order, load_queries
from pipeline.warehouse import TABLES, Warehouse, live

DERIVED_DIR = derived.DERIVED_DIR


@dataclass(frozen=True, slots=True)
class BuiltView:
    name: str
    path: str
    rows: int
    seconds: float


# --- translation ---------------------------------------------------------------------------


def _ddl(spec: schema.TableSchema) -> str:
    return ", ".join(f"`{c.name}` {spark_type(c.type)}" for c in spec.columns)


# --- inputs ---------------------------------------------------------------------------------


def _join(root: str, *parts: str) -> str:
    return "/".join([root.rstrip("/"), *parts])


def _has_parquet(spark: Any, path: str) -> bool:
    """Whether `path` holds any Parquet file, on any Hadoop filesystem (file:, s3a:, hdfs:)."""
    jvm = spark.sparkContext._jvm
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    fs = hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.exists(hpath):
        return False
    files = fs.listFiles(hpath, True)
    while files.hasNext():
        name = files.next().getPath().getName()
        if name.endswith(".parquet") and not name.startswith((".", "_")):
            return True
    return False


def _live_stems(spark: Any, root: str) -> set[str]:
    """`Warehouse.live_stems`, listed on any Hadoop filesystem: the generations readers see."""
    jvm = spark.sparkContext._jvm
    hpath = jvm.org.apache.hadoop.fs.Path(_join(root, "sources"))
    fs = hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.exists(hpath):
        return set()
    names = [status.getPath().getName() for status in fs.listStatus(hpath)]
    return live(
        {
            name.removesuffix(".parquet")
            for name in names
            if name.endswith(".parquet") and not name.startswith((".", "_"))
        }
    )


def register_raw(spark: Any, root: str) -> None:
    """`raw_<table>` temp views over the warehouse Parquet, typed by schemas/<table>.json.

    Only the files DuckDB reads (`Warehouse.files`): those of live generations. Spark lists a
    table's directory, which may also hold the parts of an ingest that crashed before its
    manifest, or a generation replaced by one whose ingest crashed before removing it."""
    from pyspark.sql import functions as F

    stems = sorted(_live_stems(spark, root))
    for table in TABLES:
        spec = schema.load(table)
        path = _join(root, table)
        if _has_parquet(spark, path):
            # Spark skips the writer's dot-named temp files, as DuckDB's glob does.
            df = (
                spark.read.schema(_ddl(spec))
                .option("basePath", path)
                .option("recursiveFileLookup", "false")
                .parquet(path)
            )
            # A file's stem: its name up to the first "-" (a part), or without ".parquet" (a
            # manifest), as `warehouse.stem_of`.
            name = F.regexp_replace(F.col("_metadata.file_name"), r"\.parquet$", "")
            df = df.where(F.substring_index(name, "-", 1).isin(stems))
        else:
            df = spark.createDataFrame([], _ddl(spec))
        df.select(*[f"`{c}`" for c in spec.names]).createOrReplaceTempView(f"raw_{table}")


def register_data_tables(spark: Any, options: SqlOptions) -> Variables:
    """Copy the tables the DuckDB providers register (prices, cache rules) into Spark views;
    returns the session variables they set, for `translate`."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    listing = "SELECT table_name FROM information_schema.tables ORDER BY table_name"
    before = {r[0] for r in con.execute(listing).fetchall()}
    for provider in TABLE_PROVIDERS:
        importlib.import_module(provider).register(con, options)
    names = [r[0] for r in con.execute(listing).fetchall() if r[0] not in before]
    for name in names:
        rel = con.sql(f'SELECT * FROM "{name}"')
        ddl = ", ".join(
            f"`{col}` {spark_type(str(typ))}"
            for col, typ in zip(rel.columns, rel.types, strict=True)
        )
        spark.createDataFrame([tuple(r) for r in rel.fetchall()], ddl).createOrReplaceTempView(name)
    rows = con.execute("SELECT name, CAST(value AS VARCHAR) FROM duckdb_variables()").fetchall()
    con.close()
    return tuple(sorted((str(n), str(v)) for n, v in rows))


# --- views ----------------------------------------------------------------------------------


def register_views(
    spark: Any,
    root: str,
    options: SqlOptions | None = None,
    errors: dict[str, QueryError] | None = None,
    materialise_into: str | None = None,
    wanted: Iterable[str] = (),
    stored: Mapping[str, str] | None = None,
) -> list[BuiltView]:
    """Register raw tables, data tables and every view in queries/, in dependency order.

    A view in `wanted` is written as Parquet under `materialise_into/<view>/` as soon as it is
    registered, and its temp view then reads that Parquet: the views built on it start from the
    stored result, as DuckDB's do from derived/, instead of re-planning the whole chain.
    With `errors`, a view that fails is recorded there and the others still go ahead (the views
    built on it then fail too); without, the first failure raises."""
    register_raw(spark, root)
    variables = register_data_tables(spark, options or SqlOptions())
    queries = load_queries()
    targets = set(wanted)
    # Only what the targets read: planning a view over unbuilt ancestors is slow.
    scope = sql_catalog.needed(targets, queries) if targets else set(queries)
    built: list[BuiltView] = []
    for name in creation_order(queries):
        if name not in scope:
            continue
        failed_inputs = sorted(i for i in queries[name].inputs if errors and i in errors)
        if failed_inputs and errors is not None:
            errors[name] = QueryError(f"{name}: not built, its input failed: {failed_inputs[0]}")
            continue
        if stored and name in stored:
            # a stored view is a folder per day (pipeline/prefix_days.py), not hive-named
            spark.read.option("recursiveFileLookup", "true").parquet(
                stored[name]
            ).createOrReplaceTempView(name)
            continue
        try:
            steps = _translated(queries[name], variables)
            try:
                frame = _run_steps(spark, steps)
            except QueryError:
                raise
            except Exception as exc:  # Spark's AnalysisException and friends
                raise QueryError(f"{name}.sql on Spark: {_one_line(exc)}") from exc
            frame.createOrReplaceTempView(name)
            if materialise_into is not None and name in targets:
                built.append(_materialise(spark, name, _join(materialise_into, name)))
            for step, _ in steps[:-1]:  # its plan holds what it needs; blocks freed with it
                spark.catalog.dropTempView(step)
        except QueryError as exc:
            if errors is None:
                raise
            errors[name] = exc
    return built


def _materialise(spark: Any, name: str, path: str) -> BuiltView:
    """Write the view as Parquet in one Spark job, counting its rows on the way (an observed
    metric, not a second job), and read it back with the schema it was written with (no job to
    infer it from the files)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    start = time.perf_counter()
    typed = typed_view(spark, name)
    counted = Observation(f"rows of {name}")
    try:
        typed.observe(counted, F.count(F.lit(1)).alias("rows")).write.mode("overwrite").parquet(
            path
        )
    except Exception as exc:
        raise QueryError(f"{name}.sql on Spark: {_one_line(exc)}") from exc
    spark.read.schema(typed.schema).parquet(path).createOrReplaceTempView(name)
    rows = int(counted.get["rows"])
    return BuiltView(name, path, rows, time.perf_counter() - start)


def _run_steps(spark: Any, steps: tuple[Step, ...]) -> Any:
    """Each step but the last computed once and pinned as its temp view (see
    spark_translate.translate_steps); the last, the view's query, returned as a DataFrame."""
    for step, text in steps[:-1]:
        _pinned(spark, spark.sql(text)).createOrReplaceTempView(step)
    return spark.sql(steps[-1][1])


def _pinned(spark: Any, frame: Any) -> Any:
    """The frame computed now, its plan cut to the stored rows: a reliable checkpoint when the
    session has a checkpoint directory (`spark.sparkContext.setCheckpointDir`, advised on a
    cluster, where an executor can be lost), else a local one in executor memory and disk."""
    if spark.sparkContext.getCheckpointDir():
        return frame.checkpoint(eager=True)
    return frame.localCheckpoint(eager=True)


def _translated(q: Query, variables: Variables) -> tuple[Step, ...]:
    try:
        return translate_steps(q.sql, variables, prefix=q.name)
    except QueryError as exc:
        raise QueryError(f"{q.path.name}: {exc.message}", hint=exc.hint) from exc
    except Exception as exc:  # sqlglot internals
        raise QueryError(f"{q.path.name}: cannot translate: {_one_line(exc)}") from exc


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:800]


def typed_view(spark: Any, name: str) -> Any:
    """The view as a DataFrame, cast to the column types of schemas/<name>.json when it exists."""
    df = spark.table(name)
    try:
        spec = schema.load(name)
    except NotFoundError:
        return df
    declared = {c.name: c.type for c in spec.columns}
    return df.selectExpr(
        *[
            f"CAST(`{c}` AS {spark_type(declared[c])}) AS `{c}`" if c in declared else f"`{c}`"
            for c in df.columns
        ]
    )


def derived_views() -> list[str]:
    """Views computed from other views or several tables: the ones worth materialising.
    A view that only selects from one raw table is read straight from the raw Parquet."""
    queries = load_queries()
    return [
        name
        for name in creation_order(queries)
        if not all(i.startswith("raw_") for i in queries[name].inputs)
    ]


def build(
    spark: Any,
    root: str,
    *,
    options: SqlOptions | None = None,
    views: Iterable[str] | None = None,
    out_dir: str | None = None,
    errors: dict[str, QueryError] | None = None,
    stored: Mapping[str, str] | None = None,
) -> list[BuiltView]:
    """Run the views on Spark and write `views` (default: every derived view) as Parquet
    directories `<out_dir or root/derived/spark>/<view>/`, replacing what was there. Works on
    any filesystem Spark reads (file:, s3a:, hdfs:). With `errors`, failures are collected
    there instead of raised (see register_views)."""
    wanted = list(views) if views is not None else derived_views()
    unknown = sorted(set(wanted) - set(load_queries()))
    if unknown:
        raise NotFoundError(f"no view named {', '.join(unknown)}", hint="see queries/")
    into = out_dir or _join(root, DERIVED_DIR, "spark")
    # Upstream derived views are written too: a view is then planned over stored results, not
    # over the inlined plans of its whole ancestry (which can exhaust the driver's memory).
    needed = _with_ancestors(wanted, set(derived_views()))
    return register_views(
        spark, root, options, errors, materialise_into=into, wanted=needed, stored=stored
    )


def _with_ancestors(names: Iterable[str], derived: set[str]) -> set[str]:
    queries = load_queries()
    out, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name in out:
            continue
        out.add(name)
        todo.extend(i for i in queries[name].inputs if i in queries and i in derived)
    return out


def build_derived(
    spark: Any,
    wh: Warehouse,
    *,
    options: SqlOptions | None = None,
    names: Iterable[str] | None = None,
    force: bool = False,
) -> list[materialise.BuildResult]:
    """`pipeline.materialise.build` on Spark: the same derived files for DuckDB to read.

    Each stale view of `derived.MATERIALISED` (and those it reads) is computed on Spark and
    stored as `<warehouse>/derived/<view>.parquet/` with its `<view>.stamp.json`, a folder per
    day as a DuckDB build stores it (`materialise.lay_out_by_day`); current ones are read, not
    recomputed. Other views the stale ones need are computed once into
    a scratch directory that is removed at the end."""
    options = options or SqlOptions()
    queries = load_queries()
    if not wh.exists():
        raise NotFoundError(f"no warehouse at {wh.root}", hint="run `cacheaudit ingest` first")
    order = materialise.materialised_order(names, queries)
    if (reused := materialise.nothing_to_build(wh, order, options, force)) is not None:
        return reused
    # As `materialise.build`: the lock held shared keeps an ingest from landing while Spark
    # reads, and the stamps come from the state taken before Spark lists the files, so a stored
    # view is never marked as covering rows it did not read
    with wh.lock(shared=True):
        state = derived.warehouse_state(wh)
        days = prefix_days.day_inputs(wh)
        current = (
            {} if force else {n: derived.fresh_derived(wh, n, options, state=state) for n in order}
        )
        stored = {n: str(p) for n, p in current.items() if p is not None}
        stale = [n for n in order if n not in stored]
        scratch = wh.root / DERIVED_DIR / f".spark-{os.getpid()}"
        try:
            built = {
                b.name: b
                for b in build(
                    spark,
                    str(wh.root),
                    options=options,
                    views=stale,
                    out_dir=str(scratch),
                    stored=stored,
                )
            }
            results = []
            for name in order:
                if name in stored:
                    results.append(materialise.BuildResult(name, False, -1, 0.0))
                    continue
                b = built[name]
                # stored as a DuckDB build stores it, a folder per day; the stamp's base names
                # Spark, so no DuckDB build takes these days for its own (lay_out_by_day)
                target = derived.derived_path(wh, name)
                by_day = target.with_name(f".{target.name}.{os.getpid()}.tmp")
                rows, extra = materialise.lay_out_by_day(
                    wh, options, name, Path(b.path), by_day, days
                )
                # the stamp first: a build that dies while the old folder is half removed
                # leaves none, and the next build computes every day
                derived.stamp_path(wh, name).unlink(missing_ok=True)
                _replace(by_day, target)
                stamp = {
                    "view": name,
                    "stamp": derived.view_stamp(wh, name, options, state=state),
                    "rows": rows,
                    **extra,
                }
                stamp_tmp = derived.stamp_path(wh, name).with_suffix(f".{os.getpid()}.tmp")
                stamp_tmp.write_text(json.dumps(stamp, indent=1), encoding="utf-8")
                stamp_tmp.replace(derived.stamp_path(wh, name))
                results.append(materialise.BuildResult(name, True, rows, b.seconds))
            return results
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


def _replace(new: Path, path: Path) -> None:
    """Put the directory `new` at `path`, whether a file or a directory was there."""
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
    new.replace(path)


def build_on(master: str, wh: Warehouse, **kwargs: Any) -> list[materialise.BuildResult]:
    """`build_derived` in a Spark session on `master`, stopped afterwards (the CLI's entry)."""
    from pipeline.engines.spark_session import get_session

    # nothing stale: no Spark session (nor lock) to start
    order = materialise.materialised_order(kwargs.get("names"), load_queries())
    options = kwargs.get("options") or SqlOptions()
    if (
        reused := materialise.nothing_to_build(wh, order, options, bool(kwargs.get("force")))
    ) is not None:
        return reused
    spark = get_session(master, app_name="cacheaudit build")
    try:
        return build_derived(spark, wh, **kwargs)
    finally:
        spark.stop()
