"""Conformance: the whole pipeline on Spark local[2] gives the same warehouse and the same view
rows as on DuckDB, from the same captures.

The DuckDB side is the reference: local ingest, then the views of `pipeline.sql.connect`. The
Spark side ingests the same files with `pipeline.engines.spark_ingest` into a second warehouse
and builds every view in queries/ with `pipeline.engines.spark_sql` (translated SQL), writing
Parquet that is read back with DuckDB. Rows are compared as multisets (sorted), floats to 1e-9
relative. SQL `hash()` fingerprints (integer columns named *_hash) differ by design between the
engines (DuckDB's hash vs Spark's xxhash64), so for them the test asserts the same grouping:
two rows share a fingerprint on Spark exactly when they share one on DuckDB.

Needs Java and pyspark; skipped with the reason otherwise.
"""

from __future__ import annotations

import gzip
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest
from test_spark_support import skip_module_without_spark

from pipeline import derived, sql_catalog
from pipeline import sql as sqlmod
from pipeline.demo import write_demo
from pipeline.ingest import ingest as local_ingest
from pipeline.warehouse import TABLES, Warehouse

skip_module_without_spark("Spark conformance tests")

pytestmark = pytest.mark.spark

ISSUE_VIEWS = {"requests", "prefix_reuse", "cache_breaks", "request_costs"}
VIEWS = sorted(sql_catalog.load_queries())
# Differ between runs by nature, not by engine.
RUN_COLUMNS = {"ingested_at"}
BAD_LINE = b'{"this is": "not a capture record"\n'


# --- fixtures: one capture set, two warehouses ----------------------------------------------


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """A demo capture with planted cache breakers, and a gzipped second one with a bad line:
    a splittable file and a whole-file stream, accepted rows and a reject."""
    folder = tmp_path_factory.mktemp("captures")
    main = folder / "capture.jsonl"
    write_demo(main, seed=11, sessions=5)
    other = folder / "other.jsonl"
    write_demo(other, seed=3, sessions=2)
    packed = folder / "other.jsonl.gz"
    # Its own request ids: both demos number theirs demo-SSS-TTT, and ids are unique per fleet.
    renamed = other.read_bytes().replace(b'"id":"demo-', b'"id":"other-')
    packed.write_bytes(gzip.compress(renamed + BAD_LINE))
    other.unlink()
    # A copy of the first 40 exchanges (already in capture.jsonl: skipped as duplicates) and a
    # file that is not traffic (one reject): both engines must treat them alike.
    overlap = folder / "overlap.jsonl"
    overlap.write_bytes(b"".join(main.read_bytes().splitlines(keepends=True)[:40]))
    stray = folder / "notes.json"
    stray.write_bytes(b'{"note": "not traffic"}\n')
    return [main, packed, overlap, stray]


@pytest.fixture(scope="module")
def duck_wh(captures: list[Path], tmp_path_factory: pytest.TempPathFactory) -> Warehouse:
    wh = Warehouse(tmp_path_factory.mktemp("duck") / "wh")
    local_ingest(captures, wh, workers=1)
    return wh


# How the test's session runs, never what it computes: on a few hundred rows Spark's time goes
# to starting and compiling, not to data. The JIT stops at its quick tier (C1), whole-stage code
# generation is off (no Java source compiled per stage) and adaptive execution is off (no
# re-planning between stages). About 40% off the build on 2 cores; the rows are the same.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
TEST_CONF = {
    "spark.driver.memory": "2g",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.adaptive.enabled": "false",
}


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from pipeline.engines.spark_session import get_session

    session = get_session(
        "local[2]",
        app_name="cacheaudit-conformance",
        shuffle_partitions=2,
        extra_conf=TEST_CONF,
        java_options=TEST_JVM_OPTIONS,
    )
    yield session
    session.stop()


@pytest.fixture(scope="module")
def spark_run(
    spark: Any, captures: list[Path], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Warehouse, Any]:
    from pipeline.engines.spark_ingest import ingest as spark_ingest

    wh = Warehouse(tmp_path_factory.mktemp("spark") / "wh")
    return wh, spark_ingest(spark, captures, wh)


@pytest.fixture(scope="module")
def spark_views(
    spark: Any, spark_run: tuple[Warehouse, Any], tmp_path_factory: Any
) -> tuple[Path, dict[str, Any]]:
    """Every view built on Spark once; a view that fails is recorded, so each test reports
    its own view's error instead of one failure for all."""
    from pipeline.engines import spark_sql

    out = tmp_path_factory.mktemp("spark_views")
    errors: dict[str, Any] = {}
    spark_sql.build(spark, str(spark_run[0].root), views=VIEWS, out_dir=str(out), errors=errors)
    return out, errors


@pytest.fixture(scope="module")
def duck_con(duck_wh: Warehouse) -> duckdb.DuckDBPyConnection:
    return sqlmod.connect(duck_wh)


# --- comparison -----------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    return tuple(_plain(v) for v in value) if isinstance(value, list) else value


def _sort_key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    # Floats rounded so last-bit differences cannot reorder rows; None first, typed apart.
    out = []
    for v in row:
        if isinstance(v, float):
            v = float(f"{v:.9g}")
        out.append((v is not None, str(type(v)), v if v is not None else 0))
    return tuple(out)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9) or (math.isnan(a) and math.isnan(b))
    return bool(a == b)


def _table(con: duckdb.DuckDBPyConnection, sql: str) -> tuple[list[str], list[str], list[Any]]:
    rel = con.sql(sql)
    return rel.columns, [str(t) for t in rel.types], [tuple(map(_plain, r)) for r in rel.fetchall()]


def assert_same_rows(
    name: str, columns: list[str], types: list[str], duck: list[Any], spark: list[Any]
) -> None:
    assert len(duck) == len(spark), f"{name}: {len(duck)} rows on DuckDB, {len(spark)} on Spark"
    opaque = [
        i
        for i, (c, t) in enumerate(zip(columns, types, strict=True))
        if c.endswith("_hash") and t in {"BIGINT", "UBIGINT", "HUGEINT", "INTEGER"}
    ]
    skipped = set(opaque) | {i for i, c in enumerate(columns) if c in RUN_COLUMNS}
    kept = [i for i in range(len(columns)) if i not in skipped]

    def order(rows: list[Any]) -> list[Any]:
        return sorted(rows, key=lambda r: _sort_key(tuple(r[i] for i in kept)))

    duck_rows, spark_rows = order(duck), order(spark)
    for n, (d, s) in enumerate(zip(duck_rows, spark_rows, strict=True)):
        for i in kept:
            assert _same(d[i], s[i]), (
                f"{name} row {n}, column {columns[i]}: DuckDB {d[i]!r}, Spark {s[i]!r}"
                f"\nDuckDB row: {d}\nSpark row:  {s}"
            )
    for i in opaque:  # same grouping: a bijection between the two engines' fingerprints
        forward: dict[Any, Any] = {}
        backward: dict[Any, Any] = {}
        for d, s in zip(duck_rows, spark_rows, strict=True):
            assert (d[i] is None) == (s[i] is None), f"{name}.{columns[i]}: NULL on one side"
            assert forward.setdefault(d[i], s[i]) == s[i], f"{name}.{columns[i]}: groups differ"
            assert backward.setdefault(s[i], d[i]) == d[i], f"{name}.{columns[i]}: groups differ"


# --- tests ----------------------------------------------------------------------------------


def test_spark_ingest_counts_every_record_like_the_local_engine(
    spark_run: tuple[Warehouse, Any], captures: list[Path]
) -> None:
    _, result = spark_run
    by_name = {Path(f.source).name: f for f in result.files}
    demo_lines = captures[0].read_bytes().count(b"\n")
    assert by_name["capture.jsonl"].records == demo_lines
    assert by_name["capture.jsonl"].accepted == demo_lines
    packed = by_name["other.jsonl.gz"]
    assert packed.records == gzip.decompress(captures[1].read_bytes()).count(b"\n")
    assert packed.rejected == 1  # the one line that is not a capture record
    assert packed.records == packed.accepted + packed.rejected + packed.skipped
    overlap = by_name["overlap.jsonl"]
    assert (overlap.records, overlap.accepted, overlap.duplicates) == (40, 0, 40)
    stray = by_name["notes.json"]
    assert (stray.format, stray.records, stray.rejected) == ("unrecognised", 1, 1)


def test_spark_ingest_writes_the_same_layout_and_rows_as_the_local_engine(
    spark_run: tuple[Warehouse, Any], duck_wh: Warehouse
) -> None:
    spark_wh, _ = spark_run
    con = duckdb.connect()
    for table in TABLES:
        duck_files, spark_files = duck_wh.files(table), spark_wh.files(table)
        assert {f.parent.relative_to(duck_wh.root) for f in duck_files} == {
            f.parent.relative_to(spark_wh.root) for f in spark_files
        }, f"{table}: different partition directories"
        # Parts are named <source key>-...: the same sources own parts in both warehouses.
        assert {f.name[:16] for f in duck_files} == {f.name[:16] for f in spark_files}, table
        query = "SELECT * FROM read_parquet($files, hive_partitioning = true, union_by_name = true)"
        if table == "segment_content":
            # Content is stored once per worker task that meets it: how often is a matter of
            # how each engine cut the files into tasks, not of what was stored.
            query = query.replace("SELECT *", "SELECT DISTINCT *")
        cols, types, duck = _table_params(con, query, duck_files)
        _, _, spark = _table_params(con, query, spark_files)
        assert_same_rows(table, cols, types, duck, spark)


def _table_params(
    con: duckdb.DuckDBPyConnection, query: str, files: list[Path]
) -> tuple[list[str], list[str], list[Any]]:
    rel = con.sql(query, params={"files": [str(f) for f in files]})
    return rel.columns, [str(t) for t in rel.types], [tuple(map(_plain, r)) for r in rel.fetchall()]


@pytest.mark.parametrize("view", VIEWS)
def test_view_built_on_spark_has_the_same_rows_as_on_duckdb(
    view: str, duck_con: duckdb.DuckDBPyConnection, spark_views: tuple[Path, dict[str, Any]]
) -> None:
    out, errors = spark_views
    if view in errors:
        pytest.fail(f"{view} failed on Spark: {errors[view].message}")
    cols, types, duck = _table(duck_con, f'SELECT * FROM "{view}"')
    spark_cols, _, spark = _table(duck_con, f"SELECT * FROM read_parquet('{out / view}/*.parquet')")
    assert spark_cols == cols
    assert_same_rows(view, cols, types, duck, spark)


def test_the_views_the_issue_names_exist_and_are_compared() -> None:
    assert set(VIEWS) >= ISSUE_VIEWS, f"missing: {sorted(ISSUE_VIEWS - set(VIEWS))}"


def test_views_built_on_spark_are_not_empty_where_duckdb_has_rows(
    duck_con: duckdb.DuckDBPyConnection,
) -> None:
    # Guards the comparison itself: a fixture that yields no rows would compare nothing.
    for view in ("requests", "segments", "rejects", "headline"):
        assert duck_con.sql(f'SELECT count(*) FROM "{view}"').fetchall()[0][0] > 0


def test_spark_ingest_names_a_provider_map_entry_that_matched_no_record_like_the_local_engine(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from test_ingest_support import capture_record, line

    from pipeline.engines.spark_ingest import ingest as spark_ingest

    capture = tmp_path / "c.jsonl"
    url = "http://127.0.0.1:18901/v1/chat/completions"
    capture.write_bytes(
        b"".join(line(capture_record(i, record_id=f"r{i}", url=url)) for i in (1, 2))
    )
    toml = tmp_path / "providers.toml"
    toml.write_text(
        '[[provider]]\nhost = "127.0.0.1:1890*"\nprovider = "vllm"\n'
        '[[provider]]\nhost = "gw.internal*"\nprovider = "gateway"\n'
    )
    spark_ingest(spark, [capture], Warehouse(tmp_path / "wh"), providers_file=toml)
    warnings = [w for w in capsys.readouterr().err.splitlines() if w.startswith("warning")]
    assert len(warnings) == 1, warnings
    assert "entry 2" in warnings[0] and '"gw.internal*"' in warnings[0]


def test_spark_reads_only_live_generations_like_duckdb(
    spark: Any, duck_wh: Warehouse, tmp_path: Path
) -> None:
    """A table's directory may also hold the parts of an ingest that crashed before its
    manifest, and a generation replaced by one whose ingest crashed before removing it: Spark
    reads neither, as `Warehouse.files` does not list them."""
    import shutil

    from pipeline.engines import spark_sql
    from pipeline.warehouse import stem_of

    root = tmp_path / "wh"
    shutil.copytree(duck_wh.root, root)
    live_stem = sorted(Warehouse(root).live_stems())[0]
    key = live_stem.split(".")[0]
    for stale in (f"{key}.0000000000000001", "ffffffffffffffff.0000000000000001"):
        for path in list(root.rglob(f"{live_stem}*.parquet")):
            shutil.copy(path, path.with_name(path.name.replace(live_stem, stale, 1)))
    # The first copy has a manifest (a replaced generation), the second none (an orphan).
    (root / "sources" / "ffffffffffffffff.0000000000000001.parquet").unlink()
    assert {stem_of(p) for p in root.rglob("*.parquet")} > Warehouse(root).live_stems()
    spark_sql.register_raw(spark, str(root))
    for table in ("requests", "segments", "sources"):
        [(expected,)] = duckdb.sql(
            "SELECT count(*) FROM read_parquet($f)",
            params={"f": [str(p) for p in Warehouse(root).files(table)]},
        ).fetchall()
        [(seen,)] = spark.sql(f"SELECT count(*) FROM raw_{table}").collect()
        assert seen == expected > 0, table


def test_spark_honours_the_record_length_limit_as_the_local_engine_does(
    spark: Any, tmp_path: Path
) -> None:
    """`--max-record-bytes` on Spark: a longer line is one reject with its length, the lines
    around it land, and the counts are the local engine's."""
    import orjson

    from pipeline.engines.spark_ingest import ingest as spark_ingest

    lines = [
        orjson.dumps({"schema_version": 1, "id": f"r{i}", "pad": "x" * (50 if i != 1 else 5000)})
        for i in range(3)
    ]
    capture = tmp_path / "long.jsonl"
    capture.write_bytes(b"\n".join(lines) + b"\n")
    counts = []
    for name, run in (
        ("local", lambda wh: local_ingest([capture], wh, workers=1, max_record_bytes=1000)),
        ("spark", lambda wh: spark_ingest(spark, [capture], wh, max_record_bytes=1000)),
    ):
        wh = Warehouse(tmp_path / name)
        fr = run(wh).files[0]
        [(reason,)] = duckdb.sql(
            "SELECT reason FROM read_parquet($f) WHERE source_index = 2",
            params={"f": [str(p) for p in wh.files("rejects")]},
        ).fetchall()
        counts.append((fr.records, fr.rejected, reason.split(":")[0]))
    assert counts[0] == counts[1]
    assert counts[1][0] == 3 and counts[1][2] == "record too long"


def _rows_by_day(wh: Warehouse, view: str) -> dict[str, list[Any]]:
    """The rows of each day folder of a stored view."""
    folder = derived.derived_path(wh, view)
    return {
        day.name: [
            tuple(map(_plain, r))
            for r in duckdb.sql(
                "SELECT * FROM read_parquet($p)", params={"p": str(day / "*.parquet")}
            ).fetchall()
        ]
        for day in sorted(folder.iterdir())
        if any(day.glob("*.parquet"))
    }


def test_a_spark_build_stores_every_view_by_day_with_the_rows_duckdb_stores_on_that_day(
    spark: Any, tmp_path: Path
) -> None:
    from test_days_support import demo_halves

    from pipeline import materialise, prefix_days, schema
    from pipeline.engines import spark_sql

    early, late = demo_halves(tmp_path)
    on_spark, on_duck = Warehouse(tmp_path / "spark"), Warehouse(tmp_path / "duck")
    for wh in (on_spark, on_duck):
        local_ingest([early], wh, workers=1)
    materialise.build(on_duck)
    assert all(r.rebuilt for r in spark_sql.build_derived(spark, on_spark))
    for view in derived.MATERIALISED:
        spark_days, duck_days = _rows_by_day(on_spark, view), _rows_by_day(on_duck, view)
        assert sorted(spark_days) == sorted(duck_days) and len(duck_days) > 5, view
        spec = schema.load(view).columns
        columns, types = [c.name for c in spec], [c.type for c in spec]
        for day, rows in duck_days.items():
            assert_same_rows(f"{view} {day}", columns, types, rows, spark_days[day])
        stamp = derived.stamp_doc(on_spark, view)
        assert stamp["days"] == prefix_days.day_inputs(on_spark)
        assert stamp["rows"] == sum(len(rows) for rows in spark_days.values())
    # Spark built request_prefix; conversation_links and cache_breaks are stale: a Spark build
    # reads the stored days of request_prefix and computes the other two from them
    for view in derived.MATERIALISED[1:]:
        derived.stamp_path(on_spark, view).unlink()
    again = {r.name: r.rebuilt for r in spark_sql.build_derived(spark, on_spark)}
    assert again == {view: view != prefix_days.VIEW for view in derived.MATERIALISED}
    for view in derived.MATERIALISED[1:]:
        assert sorted(_rows_by_day(on_spark, view)) == sorted(_rows_by_day(on_duck, view))
    # Spark's fingerprints are not DuckDB's: after an ingest, a DuckDB build computes every day
    # rather than link new days to requests Spark linked
    local_ingest([late], on_spark, workers=1)
    said: list[str] = []
    materialise.build(on_spark, progress=said.append)
    assert not [line for line in said if ": computing" in line]
    assert derived.stamp_doc(on_spark, prefix_days.VIEW)["base"] == prefix_days.base_stamp(
        on_spark, sqlmod.SqlOptions()
    )
