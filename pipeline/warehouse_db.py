"""`<warehouse>/cacheaudit.duckdb`: the warehouse as a DuckDB database any DuckDB client opens.

Only cacheaudit knows which Parquet parts are live (`Warehouse.snapshot`: a replaced generation,
or a crashed ingest's parts, sit next to them), so a plain `read_parquet('warehouse/**')` can
count rows twice. This file holds, as of one moment:
- a view `raw_<table>` per table over exactly the live parts (an empty table when there are
  none; a day of many small sources read from `build`'s copy of it, pipeline/compaction.py),
  with the columns an older warehouse lacks added as NULL, as `pipeline.sql` does;
- the price and cache-rule tables, copied in as tables;
- every view of `queries/`, reading a stored `derived/` Parquet where its stamp is current.

Paths in the views are absolute: DuckDB resolves a relative path against the reader's working
directory, not the database file's, so relative paths would break `duckdb warehouse/x.duckdb`
run from anywhere but the directory they were written from. A moved warehouse needs the file
rewritten (any ingest or build does; so does `refresh`).

Every ingest rewrites it, so its cost is paid by every ingest, small ones included: creating
every view of queries/ makes DuckDB bind each (1.5 s), and the price tables take the price
library's conversion (0.4 s). When the file was written by the same queries, price and rule
files and price library (its `cacheaudit_meta` stamp says so), a copy of it is updated instead:
only the `raw_` views (the live parts changed) and the stored views whose body changed (a build
stored them, or new parts made them stale) are replaced, which DuckDB allows under views that
read them (a view is bound when read). Anything else, or any error on that path, writes the
file from scratch. A small ingest into a warehouse with a file took 0.58-0.65 s, 0.2 s of it
here; replacing only what changed and reading the stamp from the copy made it 0.42-0.47 s.

A warehouse that has no file yet (every first ingest) starts from a copy of the last file
written from scratch with the same stamp, kept in the cache directory (pipeline/user_cache.py
says where): that copy is updated as above, the same as a file of this
warehouse would be, since the update replaces everything that names a warehouse's files. A first
ingest of three records took 4.2 s, 3.4 s of it binding every view. Only the latest such copy is
kept; one that cannot be read or written only costs the time.

It is written under a temporary name and renamed into place, under the warehouse lock held
shared (no ingest lands between the files listed and the rename): a client holding the old file
keeps reading the old inode and never blocks the rename, and the next open sees the new file.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from pathlib import Path

import duckdb

from pipeline import compaction, dead_work, derived, schema, sql_catalog
from pipeline import sql as sqlmod
from pipeline.raw_parts import read_options
from pipeline.sql_text import quoted, strip_final_semicolon
from pipeline.user_cache import cache_dir
from pipeline.warehouse import TABLES, Warehouse

DB_NAME = "cacheaudit.duckdb"
TEMPLATE_PREFIX = "warehouse-db-"


def database_path(wh: Warehouse) -> Path:
    return wh.root / DB_NAME


def _literal(text: str) -> str:
    """A SQL string literal. A view's text is stored, so its paths cannot be bound parameters;
    these are our own file paths, quotes doubled anyway."""
    return "'" + text.replace("'", "''") + "'"


def _absolute(files: list[Path]) -> list[Path]:
    """`files` as absolute paths, each folder resolved once: resolving every part (a few
    syscalls each) took 0.1 s per ingest on a warehouse of 500 sources. Parts are plain files
    in the warehouse's folders, never links, so only the folders need resolving."""
    folders: dict[Path, Path] = {}
    out = []
    for f in files:
        folder = folders.get(f.parent)
        if folder is None:
            folder = folders[f.parent] = f.parent.resolve()
        out.append(folder / f.name)
    return out


def _raw(con: duckdb.DuckDBPyConnection, table: str, files: list[Path]) -> None:
    spec = schema.load(table)
    view = quoted(f"raw_{table}")
    if not files:
        cols = ", ".join(f"{quoted(c.name)} {c.type}" for c in spec.columns)
        con.execute(f"CREATE TABLE {view} ({cols})")
        return
    options = read_options(spec, files, con)
    listed = ", ".join(_literal(str(f)) for f in _absolute(files))
    select = f"SELECT * FROM read_parquet([{listed}], {options})"
    present = set(con.sql(select + " LIMIT 0").columns)
    missing = [c for c in spec.columns if c.name not in present]
    extra = "".join(f", CAST(NULL AS {c.type}) AS {quoted(c.name)}" for c in missing)
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
        con.execute(f"CREATE TABLE {quoted('stage_' + name)} AS SELECT * FROM {quoted(name)}")
        with contextlib.suppress(duckdb.Error):  # a temp table, not a registered object
            con.unregister(name)
        con.execute(f"DROP TABLE IF EXISTS temp.{quoted(name)}")
        con.execute(f"ALTER TABLE {quoted('stage_' + name)} RENAME TO {quoted(name)}")


META = "cacheaudit_meta"
# What a file holds besides its views, in the static stamp: a file written by code that did not
# record the stored views' bodies (BODIES) would be updated as if its views were current
FILE_FORMAT = "bodies-1"
# the body each stored view (derived.MATERIALISED) was created with, to replace only those changed
BODIES = "cacheaudit_view_bodies"


def static_stamp(options: sqlmod.SqlOptions, queries: dict[str, sql_catalog.Query]) -> str:
    """Digest of what the file holds besides the live parts and the stored views' freshness:
    the package, every query, the price and rule files, the price library's release."""
    from pipeline import __version__
    from pipeline.prices import library

    digest = hashlib.sha256(
        f"cacheaudit-db {__version__} {derived.STAMP_VERSION} {FILE_FORMAT}\n".encode()
    )
    digest.update(f"library {library.version()}\n".encode())
    for name in sorted(queries):
        digest.update(f"query {name}\n".encode())
        digest.update(queries[name].sql.encode())
    for path in derived.data_files(options):
        data = path.read_bytes()
        digest.update(f"data {path.resolve()} {len(data)}\n".encode())
        digest.update(data)
    return digest.hexdigest()


def _view_body(
    wh: Warehouse,
    name: str,
    queries: dict[str, sql_catalog.Query],
    options: sqlmod.SqlOptions,
    state: str,
) -> str:
    stored = derived.fresh_derived(wh, name, options, state=state)
    if stored is None:
        return strip_final_semicolon(queries[name].sql)
    path = stored.resolve()
    pattern = str(path / "**" / "*.parquet") if path.is_dir() else str(path)
    return f"SELECT * FROM read_parquet({_literal(pattern)})"


def _write_full(
    con: duckdb.DuckDBPyConnection,
    wh: Warehouse,
    snapshot: dict[str, list[Path]],
    queries: dict[str, sql_catalog.Query],
    options: sqlmod.SqlOptions,
    stamp: str,
) -> None:
    state = derived.warehouse_state(wh, snapshot)
    for table, files in compaction.substitute(wh, snapshot).items():
        _raw(con, table, files)
    _data_tables(con, options)
    bodies = {}
    for name in sql_catalog.creation_order(queries):
        bodies[name] = _view_body(wh, name, queries, options, state)
        con.execute(f"CREATE VIEW {quoted(name)} AS {bodies[name]}")
    con.execute(f"CREATE TABLE {META} (stamp VARCHAR)")
    con.execute(f"INSERT INTO {META} VALUES (?)", [stamp])
    _record_bodies(con, {n: b for n, b in bodies.items() if n in derived.MATERIALISED})


def _record_bodies(con: duckdb.DuckDBPyConnection, bodies: dict[str, str]) -> None:
    con.execute(f"CREATE TABLE IF NOT EXISTS {BODIES} (name VARCHAR PRIMARY KEY, body VARCHAR)")
    for name, body in bodies.items():
        con.execute(f"INSERT OR REPLACE INTO {BODIES} VALUES (?, ?)", [name, body])


def _recorded_bodies(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """The body each stored view was last created with; empty for a file written before they
    were recorded (every stored view is then replaced)."""
    try:
        rows = con.execute(f"SELECT name, body FROM {BODIES}").fetchall()
    except duckdb.CatalogException:
        return {}
    return {str(name): str(body) for name, body in rows}


def _update(
    con: duckdb.DuckDBPyConnection,
    wh: Warehouse,
    snapshot: dict[str, list[Path]],
    queries: dict[str, sql_catalog.Query],
    options: sqlmod.SqlOptions,
) -> None:
    """Replace the raw views, and the stored views whose body changed, of a file written with
    the same stamp. A stored view's body is its query until a build stores it, then a read of
    this warehouse's Parquet: unchanged on most ingests, and replacing one makes DuckDB bind
    every view under it (0.13 s for the three, a third of a small ingest)."""
    state = derived.warehouse_state(wh, snapshot)
    tables = {name for (name,) in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    for table, files in compaction.substitute(wh, snapshot).items():
        raw = f"raw_{table}"
        kind = "TABLE" if raw in tables else "VIEW"
        con.execute(f"DROP {kind} IF EXISTS {quoted(raw)}")
        _raw(con, table, files)
    recorded = _recorded_bodies(con)
    changed = {}
    for name in derived.MATERIALISED:
        if name in queries:
            body = _view_body(wh, name, queries, options, state)
            if recorded.get(name) != body:
                con.execute(f"CREATE OR REPLACE VIEW {quoted(name)} AS {body}")
                changed[name] = body
    _record_bodies(con, changed)


def _template_path(stamp: str) -> Path:
    return cache_dir() / f"{TEMPLATE_PREFIX}{stamp[:32]}.duckdb"


def _keep_template(written: Path, stamp: str) -> None:
    """Keep a copy of a file written from scratch for the next warehouse's first file; older
    copies go (one per stamp would grow with every release and query change)."""
    path = _template_path(stamp)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # a copy killed mid-write (SIGKILL: no clean-up runs) left its file for good
        dead_work.remove_dead_work(
            path.parent, dead_work.CACHE_FILE, own_only=True, files_only=True
        )
        shutil.copyfile(written, tmp)
        tmp.replace(path)
        for old in path.parent.glob(f"{TEMPLATE_PREFIX}*.duckdb"):
            if old != path:
                old.unlink(missing_ok=True)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def _updated_copy(
    source: Path,
    tmp: Path,
    stamp: str,
    wh: Warehouse,
    snapshot: dict[str, list[Path]],
    queries: dict[str, sql_catalog.Query],
    options: sqlmod.SqlOptions,
) -> bool:
    """Copy `source` to `tmp` and, when it was written with `stamp`, update it for `wh`; False,
    leaving nothing at `tmp`, when it was not or that fails (no file, an older one). The stamp
    is read from the copy: opening the source read-only first cost another 0.03 s per ingest.
    A file a client holds for writing is copied as of its last checkpoint (its WAL is not)."""
    updated = False
    try:
        shutil.copyfile(source, tmp)
        with duckdb.connect(str(tmp)) as con:
            if con.execute(f"SELECT stamp FROM {META}").fetchall() == [(stamp,)]:
                _update(con, wh, snapshot, queries, options)
                con.execute("CHECKPOINT")
                updated = True
    except (duckdb.Error, OSError):
        pass
    if not updated:
        for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
            leftover.unlink(missing_ok=True)
    return updated


def _remove_dead_writers_files(wh: Warehouse) -> None:
    """Remove the temporary files (4 MB and more each) of writers of this file that were killed
    (SIGKILL, SIGTERM: no clean-up ran): nothing else ever removed them. Only those of
    processes that are gone: writers run side by side under the shared lock."""
    dead_work.remove_dead_work(wh.root, dead_work.DB_WRITER, files_only=True)


def write(wh: Warehouse, options: sqlmod.SqlOptions | None = None, *, wait: bool = True) -> Path:
    """Write `<warehouse>/cacheaudit.duckdb` anew (or update a copy of it, when only the live
    parts and the stored views can have changed); returns its path."""
    options = options or sqlmod.SqlOptions()
    target = database_path(wh)
    tmp = wh.root / f".{DB_NAME}.{os.getpid()}.tmp"
    leftovers = (tmp, tmp.with_name(tmp.name + ".wal"))
    with wh.lock(shared=True, wait=wait):
        snapshot = wh.snapshot(TABLES)
        queries = sql_catalog.load_queries()
        stamp = static_stamp(options, queries)
        for leftover in leftovers:
            leftover.unlink(missing_ok=True)
        _remove_dead_writers_files(wh)
        try:
            # this warehouse's own file, else another warehouse's kept for first files
            for source in (target, _template_path(stamp)):
                if _updated_copy(source, tmp, stamp, wh, snapshot, queries, options):
                    tmp.replace(target)
                    return target
            with duckdb.connect(str(tmp)) as con:
                _write_full(con, wh, snapshot, queries, options, stamp)
                con.execute("CHECKPOINT")
            tmp.replace(target)
            _keep_template(target, stamp)
        finally:
            for leftover in leftovers:
                leftover.unlink(missing_ok=True)
    return target


def refresh(wh: Warehouse, options: sqlmod.SqlOptions | None = None, *, wait: bool = True) -> str:
    """Rewrite the database file after an ingest or build; a failure is one line for stderr,
    never a failed ingest (the Parquet tables are the data; this file is a convenience).
    Without `wait`, a running ingest leaves the file to that ingest, which rewrites it."""
    from pipeline.errors import PipelineError, WarehouseBusy

    try:
        path = write(wh, options, wait=wait)
    except WarehouseBusy:
        return f"{DB_NAME} left to the running ingest, which rewrites it"
    except (PipelineError, duckdb.Error, OSError) as exc:
        return f"warning: {DB_NAME} not refreshed: {' '.join(str(exc).split())}"
    return f"DuckDB clients: duckdb {path} (views over the live files)"
