"""The rows of every source's manifest, kept between ingests in one file beside them.

Each ingest needs every live manifest row (to know which sources it has seen), and a
warehouse fed by a proxy rotating its capture hourly holds thousands of one-row manifest
files: reading 707 of them cost 0.3 s of every hourly ingest, growing with each source.
`<warehouse>/sources/.manifest-index.arrow` keeps the rows read last time with each file's
size, modification time and inode; a manifest file still the same on all three is taken from
it, the rest are read. A manifest is never rewritten in place (a new one is renamed over it,
which changes its inode and time), so the check is exact in practice; deleting the index costs
one slower ingest, never data. Written only by an ingest, under the warehouse lock.

The index is Arrow IPC, not pickle: a warehouse directory may be shared, and loading it must
not run code.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc

from pipeline import schema

INDEX_NAME = ".manifest-index.arrow"
# The sources schema the index was written with, in its Arrow metadata: an index written by
# another version (a column added, a type changed) would give None or wrong values for the
# files it took from it, so it is ignored instead.
_SCHEMA_KEY = b"cacheaudit_sources_schema"
# the file columns that say whether a manifest file is the one the index read
_FILE_COLUMNS = ("index_stem", "index_size", "index_mtime_ns", "index_inode")

Rows = dict[str, list[dict[str, Any]]]
# stem -> (its file's size, mtime in ns and inode; its rows)
Entries = dict[str, tuple[tuple[int, int, int], list[dict[str, Any]]]]


def _identity(stat: os.stat_result) -> tuple[int, int, int]:
    return (stat.st_size, stat.st_mtime_ns, stat.st_ino)


def _schema_digest() -> bytes:
    spec = schema.load("sources")
    return "|".join(f"{c.name} {c.type}" for c in spec.columns).encode()


def rows_of(sources: Path, stems: list[str], read: Callable[[list[str]], Rows]) -> Rows:
    """The manifest rows of `stems` (files `<sources>/<stem>.parquet`): from the index where a
    file is unchanged, by `read` for the rest; the index is then written again if it changed.
    A stem whose file is gone meanwhile is left out, as `read` leaves it out."""
    identities: dict[str, tuple[int, int, int]] = {}
    for stem in stems:
        with contextlib.suppress(FileNotFoundError):
            identities[stem] = _identity((sources / f"{stem}.parquet").stat())
    kept = _load(sources / INDEX_NAME)
    found: Rows = {}
    for stem, identity in identities.items():
        cached = kept.get(stem)
        if cached is not None and cached[0] == identity:
            found[stem] = cached[1]
    missing = [stem for stem in identities if stem not in found]
    if missing:
        found.update(read(missing))
    if missing or set(kept) != set(found):
        _save(sources / INDEX_NAME, {s: (identities[s], found[s]) for s in found})
    return found


def _load(path: Path) -> Entries:
    """The index's rows by stem; empty when there is none or it cannot be read (an ingest
    killed while writing leaves only a temporary file, but a damaged copy must not stop one)."""
    try:
        with pa.memory_map(str(path)) as source:
            table = ipc.open_file(source).read_all()
    except Exception:  # any unreadable index only costs reading the manifests
        return {}
    written_with = (table.schema.metadata or {}).get(_SCHEMA_KEY)
    if written_with != _schema_digest() or not set(_FILE_COLUMNS) <= set(table.column_names):
        return {}
    names = schema.load("sources").names
    out: Entries = {}
    for row in table.to_pylist():
        identity = (row["index_size"], row["index_mtime_ns"], row["index_inode"])
        stem = row["index_stem"]
        entry = out.setdefault(stem, (identity, []))
        entry[1].append({name: row.get(name) for name in names})
    return out


def _save(path: Path, entries: Entries) -> None:
    """Write the index anew (a temporary file renamed over it). Failing to write it (a full
    disk) only costs the next ingest its time."""
    spec = schema.load("sources").arrow()
    files = pa.schema(
        [
            pa.field("index_stem", pa.string()),
            pa.field("index_size", pa.int64()),
            pa.field("index_mtime_ns", pa.int64()),
            pa.field("index_inode", pa.uint64()),  # inodes are unsigned (FUSE: up to 2^64)
        ]
    )
    rows = []
    for stem, ((size, mtime_ns, inode), manifest_rows) in sorted(entries.items()):
        for row in manifest_rows:
            record = {name: row.get(name) for name in spec.names}
            record.update(
                index_stem=stem, index_size=size, index_mtime_ns=mtime_ns, index_inode=inode
            )
            rows.append(record)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        table_schema = pa.unify_schemas([spec, files]).with_metadata(
            {_SCHEMA_KEY: _schema_digest()}
        )
        table = pa.Table.from_pylist(rows, schema=table_schema)
        with pa.OSFile(str(tmp), "wb") as sink, ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        tmp.replace(path)
    except Exception:  # a full disk, a value Arrow refuses: the next ingest reads the files
        with contextlib.suppress(OSError):
            tmp.unlink()
