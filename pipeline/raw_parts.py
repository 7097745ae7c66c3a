"""The warehouse's Parquet parts as DuckDB relations: `raw_relation` and the options it reads with.

A table's parts usually share their columns, and are then read without DuckDB's union by name
(which reads every part's footer each time a view over them is bound); parts written by older
versions or by the Spark engine may differ, and are read by name with the missing columns NULL.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from pipeline import compaction, schema
from pipeline.errors import WarehouseError
from pipeline.file_state import files_state
from pipeline.sql_text import one_line, quoted

# from this many Parquet parts on, their footers are read by DuckDB (see same_columns)
MANY_PARTS = 32


def same_columns(files: list[Path], con: duckdb.DuckDBPyConnection | None = None) -> bool:
    """Whether every Parquet part has the same columns, by name and type in order."""
    return part_columns(files, con) is not None


def part_columns(
    files: list[Path], con: duckdb.DuckDBPyConnection | None = None
) -> list[str] | None:
    """The column names every Parquet part has, when all have the same columns by name and
    type in order; None when they differ. Every part's footer is read, by DuckDB in one query
    on `con` (a new connection costs 0.03 s, so only many parts get one): one pyarrow read per
    part took 0.3 ms, 0.16 s per command on a warehouse of 500 hourly sources; DuckDB reads
    them in 0.09 s."""
    if con is None and len(files) < MANY_PARTS:
        return _footer_columns(files)
    reader = con or duckdb.connect()
    try:
        ((kinds, names),) = reader.execute(
            "SELECT count(DISTINCT columns), any_value(names) FROM (SELECT string_agg(name"
            " || ' ' || coalesce(duckdb_type, type, '') || ' ' || coalesce(repetition_type, ''),"
            " ',' ORDER BY column_id) AS columns, list(name ORDER BY column_id) AS names"
            # not the root element: each writer names it its own way (schema, spark_schema)
            " FROM parquet_schema($files) WHERE column_id > 0 GROUP BY file_name)",
            {"files": [str(f) for f in files]},
        ).fetchall()
    except duckdb.Error:
        return _footer_columns(files)  # says which part is unreadable
    finally:
        if con is None:
            reader.close()
    return list(names or []) if int(kinds) <= 1 else None


def _footer_columns(files: list[Path]) -> list[str] | None:
    """`part_columns`, a footer read at a time: names the part that cannot be read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    first: list[tuple[str, str]] | None = None
    for path in files:
        try:
            columns = [(f.name, str(f.type)) for f in pq.read_schema(path)]
        except (OSError, pa.ArrowException) as exc:
            if compaction.COMPACT_DIR.as_posix() in path.as_posix():
                hint = "delete it: the parts it copies are read instead, and `build` copies again"
            else:
                hint = "re-ingest its source with --force, or restore the warehouse from a copy"
            raise WarehouseError(
                f"{path}: not a readable Parquet part ({one_line(exc)})", hint=hint
            ) from exc
        if first is None:
            first = columns
        elif columns != first:
            return None
    return [name for name, _type in first or []]


def read_options(
    spec: schema.TableSchema, files: list[Path], con: duckdb.DuckDBPyConnection | None = None
) -> str:
    """The read_parquet options of a table's parts. `union_by_name` only where the parts'
    columns differ (a warehouse that older versions wrote to, a part from the Spark engine):
    with it DuckDB reads every part's footer each time a view over them is bound, and a query
    binds the raw views once per view it stacks on: on a warehouse of many small sources (a
    directory of test cassettes, 360 parts) that made writing cacheaudit.duckdb 7x slower and
    4x larger in memory. The day of a partitioned table is read from the parts when they all
    hold it (`Warehouse.with_day`), else from their folders (hive partitioning: parts written
    before the day was stored), which costs 3x as much to bind."""
    columns = _cached_columns(files, con)
    if columns is None:
        options = "union_by_name = true, hive_partitioning = true"
    elif spec.partition_by is not None and spec.partition_by in columns:
        return "hive_partitioning = false"
    else:
        options = "hive_partitioning = true"
    if spec.partition_by is not None:
        options += f", hive_types = {{{quoted(spec.partition_by)}: DATE}}"
    return options


def _cached_columns(files: list[Path], con: duckdb.DuckDBPyConnection | None) -> list[str] | None:
    """part_columns once per state of the parts in a process (pipeline/file_state.py): a build
    opens a session per view and per run of days, and each read every table's footers again
    (24 reads, 0.3 s, after one new day at 10M requests). A part that cannot be stat'ed is not
    cached: part_columns names it."""
    try:
        state = files_state(files)
    except OSError:
        return part_columns(files, con)
    if state not in _COLUMNS_SEEN:
        if len(_COLUMNS_SEEN) >= 64:
            _COLUMNS_SEEN.clear()
        _COLUMNS_SEEN[state] = part_columns(files, con)
    columns = _COLUMNS_SEEN[state]
    return None if columns is None else list(columns)


_COLUMNS_SEEN: dict[tuple[tuple[str, int, int, int], ...], list[str] | None] = {}


def raw_relation(
    con: duckdb.DuckDBPyConnection, table: str, files: list[Path]
) -> duckdb.DuckDBPyRelation:
    """The rows of `files`, parts (or compacted copies) of `table`, with the schema's columns."""
    spec = schema.load(table)
    options = read_options(spec, files, con)
    rel = con.sql(
        f"SELECT * FROM read_parquet($files, {options})",
        params={"files": [str(f) for f in files]},
    )
    # A warehouse written by an older version lacks the columns added since: they read as
    # NULL (unknown), as Spark does with its explicit schema, instead of breaking every view.
    missing = [c for c in spec.columns if c.name not in rel.columns]
    if missing:
        rel = rel.select(
            "*, " + ", ".join(f"CAST(NULL AS {c.type}) AS {quoted(c.name)}" for c in missing)
        )
    return rel
