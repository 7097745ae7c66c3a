"""`<warehouse>/cacheaudit.duckdb`: the warehouse as a DuckDB database any DuckDB client opens.

Only cacheaudit knows which Parquet parts are live (`Warehouse.snapshot`: a replaced generation,
or a crashed ingest's parts, sit next to them), so a plain `read_parquet('warehouse/**')` can
count rows twice. This file holds, as of one moment:
- a view `raw_<table>` per table over exactly the live parts (an empty table when there are
  none), with the columns an older warehouse lacks added as NULL, as `pipeline.sql` does;
- the price and cache-rule tables, copied in as tables;
- every view of `queries/`, reading a stored `derived/` Parquet where its stamp is current.

Paths in the views are absolute: DuckDB resolves a relative path against the reader's working
directory, not the database file's, so relative paths would break `duckdb warehouse/x.duckdb`
run from anywhere but the directory they were written from. A moved warehouse needs the file
rewritten (any ingest or build does; so does `refresh`).

It is written under a temporary name and renamed into place, under the warehouse lock held
shared (no ingest lands between the files listed and the rename): a client holding the old file
keeps reading the old inode and never blocks the rename, and the next open sees the new file.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import duckdb

from pipeline import schema
from pipeline import sql as sqlmod
from pipeline.warehouse import TABLES, Warehouse

DB_NAME = "cacheaudit.duckdb"


def database_path(wh: Warehouse) -> Path:
    return wh.root / DB_NAME


def _literal(text: str) -> str:
    """A SQL string literal. A view's text is stored, so its paths cannot be bound parameters;
    these are our own file paths, quotes doubled anyway."""
    return "'" + text.replace("'", "''") + "'"


def _quoted(name: str) -> str:
    return sqlmod._quoted(name)


def _raw(con: duckdb.DuckDBPyConnection, table: str, files: list[Path]) -> None:
    spec = schema.load(table)
    view = _quoted(f"raw_{table}")
    if not files:
        cols = ", ".join(f"{_quoted(c.name)} {c.type}" for c in spec.columns)
        con.execute(f"CREATE TABLE {view} ({cols})")
        return
    options = sqlmod.read_options(spec, files)
    listed = ", ".join(_literal(str(f.resolve())) for f in files)
    select = f"SELECT * FROM read_parquet([{listed}], {options})"
    present = set(con.sql(select + " LIMIT 0").columns)
    missing = [c for c in spec.columns if c.name not in present]
    extra = "".join(f", CAST(NULL AS {c.type}) AS {_quoted(c.name)}" for c in missing)
    con.execute(f"CREATE VIEW {view} AS SELECT *{extra} FROM ({select})")


def _data_tables(con: duckdb.DuckDBPyConnection, options: sqlmod.SqlOptions) -> None:
    """The price and cache-rule tables, which `pipeline.sql` registers from files in memory,
    copied into the database as tables."""
    import importlib

    for provider in sqlmod.TABLE_PROVIDERS:
        importlib.import_module(provider).register(con, options)
    temporary = con.execute(
        "SELECT view_name FROM duckdb_views() WHERE temporary AND NOT internal"
        " UNION SELECT table_name FROM duckdb_tables() WHERE temporary"
    ).fetchall()
    for (name,) in temporary:
        # A registered object (or temp table) shadows a table of the same name: copy it under
        # a staging name, drop the temporary, then give the copy its name.
        con.execute(f"CREATE TABLE {_quoted('stage_' + name)} AS SELECT * FROM {_quoted(name)}")
        with contextlib.suppress(duckdb.Error):  # a temp table, not a registered object
            con.unregister(name)
        con.execute(f"DROP TABLE IF EXISTS temp.{_quoted(name)}")
        con.execute(f"ALTER TABLE {_quoted('stage_' + name)} RENAME TO {_quoted(name)}")


def write(wh: Warehouse, options: sqlmod.SqlOptions | None = None) -> Path:
    """Write `<warehouse>/cacheaudit.duckdb` anew; returns its path."""
    options = options or sqlmod.SqlOptions()
    target = database_path(wh)
    tmp = wh.root / f".{DB_NAME}.{os.getpid()}.tmp"
    with wh.lock(shared=True):
        snapshot = wh.snapshot(TABLES)
        queries = sqlmod.load_queries()
        state = sqlmod.warehouse_state(wh, snapshot)
        for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
            leftover.unlink(missing_ok=True)
        try:
            con = duckdb.connect(str(tmp))
            try:
                for table, files in snapshot.items():
                    _raw(con, table, files)
                _data_tables(con, options)
                for name in sqlmod.creation_order(queries):
                    derived = sqlmod.fresh_derived(wh, name, options, state=state)
                    if derived is not None:
                        path = derived.resolve()
                        pattern = str(path / "**" / "*.parquet") if path.is_dir() else str(path)
                        body = f"SELECT * FROM read_parquet({_literal(pattern)})"
                    else:
                        body = sqlmod._strip_final_semicolon(queries[name].sql)
                    con.execute(f"CREATE VIEW {_quoted(name)} AS {body}")
                con.execute("CHECKPOINT")
            finally:
                con.close()
            tmp.replace(target)
        finally:
            for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
                leftover.unlink(missing_ok=True)
    return target


def refresh(wh: Warehouse, options: sqlmod.SqlOptions | None = None) -> str:
    """Rewrite the database file after an ingest or build; a failure is one line for stderr,
    never a failed ingest (the Parquet tables are the data; this file is a convenience)."""
    from pipeline.errors import PipelineError

    try:
        path = write(wh, options)
    except (PipelineError, duckdb.Error, OSError) as exc:
        return f"warning: {DB_NAME} not refreshed: {' '.join(str(exc).split())}"
    return f"DuckDB clients: duckdb {path} (views over the live files)"
