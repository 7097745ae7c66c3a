"""Ingest, before any record is read: which source an input file is.

An input file is either content the warehouse holds already ("unchanged", unless --force), a
capture that grew since it was ingested (its earlier rows are replaced, not counted twice), or
new. `claim` decides, and `new_generation` picks the generation its rows are written under and
the ones they replace. Both engines use them (pipeline/ingest.py, pipeline/engines/spark_ingest.py).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import xxhash

from pipeline.ingest_plan import FileResult, file_windows
from pipeline.normalise import SEGMENT_HASHING
from pipeline.reports.numbers import count
from pipeline.warehouse import Warehouse, key_of

Manifest = dict[str, tuple[str, dict[str, Any]]]  # `Warehouse.manifest_index`


def resolved_path(path: Path | str) -> str:
    """The file's absolute path with symlinks resolved: the same for every working directory
    and every way of naming it (the manifest keeps it beside the path as given)."""
    try:
        return str(Path(path).resolve())
    except (OSError, RuntimeError):  # a symlink loop: as absolute as it gets
        return str(Path(path).absolute())


def same_file(row: dict[str, Any], path: Path) -> bool:
    """Whether a manifest row is of this file: by the resolved path recorded at its ingest. A
    row written before that was recorded has only the path as given, resolved here against
    the current directory (right only when that is where it was ingested from)."""
    recorded = row.get("source_path")
    if recorded:
        return str(recorded) == resolved_path(path)
    given = str(row["source"])
    return given == str(path) or resolved_path(given) == resolved_path(path)


def under_folder(row: dict[str, Any], folder: Path) -> bool:
    """Whether a manifest row is of a file that was inside `folder` (at any depth) when it was
    ingested; the folder need not exist any more."""
    recorded = row.get("source_path") or resolved_path(str(row["source"]))
    return str(recorded).startswith(resolved_path(folder).rstrip(os.sep) + os.sep)


def _starts_with(path: Path, size: int, digest: str) -> bool:
    """Whether the file's first `size` bytes hash to `digest`: the content ingested then, since
    grown (a capture still being appended to), not replaced or rotated away."""
    h = xxhash.xxh3_128()
    with path.open("rb") as fh:
        if os.fstat(fh.fileno()).st_size < size:
            return False
        for _, window in file_windows(fh.fileno(), 0, size):
            with window, memoryview(window) as view:
                h.update(view)
    return h.hexdigest() == digest


def supersede(known: Manifest, path: Path, digest: str) -> list[tuple[str, str]]:
    """(stem, hash) of earlier ingests of this path whose rows this one replaces, because the
    file's content has changed since.

    A capture the proxy is still appending to is ingested again later with more lines; its
    manifest entry is keyed by content hash, so without this the old rows would stay beside the
    new ones and every earlier exchange would count twice. They are hidden when the new rows
    become visible (`write_manifests`), so a reader meanwhile sees the old ones.
    """
    replaced = []
    for stem, row in known.values():
        old = str(row["source_hash"])
        if (
            old != digest
            and same_file(row, path)
            and _starts_with(path, int(row["size_bytes"]), old)
        ):
            replaced.append((stem, old))
            print(
                f"{path}: changed since it was ingested"
                f" ({count(int(row['records']), 'record', grouping=False)},"
                f" {count(int(row['size_bytes']), 'byte', grouping=False)}); replacing those rows",
                file=sys.stderr,
            )
    return replaced


def claim(
    warehouse: Warehouse,
    known: Manifest,
    pending: dict[str, FileResult],
    path: Path,
    fmt: str,
    digest: str,
    size: int,
    force: bool,
) -> FileResult:
    """What ingest does with one input file (either engine): nothing ("unchanged") when its
    content is in the warehouse already, or earlier in this batch, and --force is not given;
    else ingest it ("ingested") under a new generation (`new_generation`). Content whose
    segments were hashed by another rule (`normalise.SEGMENT_HASHING`) is read again, as with
    --force: its prefixes would never match those of what is ingested now."""
    entry = None if digest in pending else known.get(digest)
    rehash = entry is not None and entry[1].get("segment_hashing") != SEGMENT_HASHING
    if digest in pending or (entry and not force and not rehash):
        return FileResult(str(path), fmt, "unchanged", size_bytes=size)
    if rehash and not force:
        print(f"{path}: ingested by an older version; reading it again", file=sys.stderr)
    fr = FileResult(str(path), fmt, "ingested", size_bytes=size)
    new_generation(warehouse, fr, digest, entry, supersede(known, path, digest))
    return fr


def new_generation(
    warehouse: Warehouse,
    fr: FileResult,
    digest: str,
    entry: tuple[str, dict[str, Any]] | None,
    grown: list[tuple[str, str]],
) -> None:
    """Choose the generation `fr` writes and the ones it replaces: its own earlier ingest
    (--force) and earlier ingests of the file it grew from. It takes the key of what it
    replaces, so its manifest supersedes theirs in one step (`Warehouse.live_stems`)."""
    fr.superseded = [old for _, old in grown]
    fr.replaces = ([entry[0]] if entry else []) + [stem for stem, _ in grown]
    key = key_of(fr.replaces[0]) if fr.replaces else warehouse.fresh_key(digest)
    fr.stem = warehouse.new_stem(key)
