"""Compacted copies of the days that many small sources split into many parts.

Each ingested source writes its own parts of each day, and a source is the unit a re-ingest
replaces. A proxy that rotates its capture every hour therefore leaves 24 parts per table per
day, and every scan of a raw view opens them all: on 707 hourly sources (19k requests),
`summary` took 2.8 s against 1.0 s reading the same rows from one file per day.

`cacheaudit build` writes, for each day of `requests` and `segments` held in at least
MIN_PARTS parts, one Parquet file with that day's rows:
`<warehouse>/derived/compact/<table>/day=YYYY-MM-DD/<stamp>.parquet`. The stamp is a digest of
the day's live parts (path and size): part files are written once under names that carry their
source's generation, so the same parts mean the same rows. Reading sessions (`sql.connect`)
read a day from its copy when the copy of the day's current parts exists, else from the parts,
as before; so an ingest after a build is read at once, and the next build copies its days again.

The parts stay the data: the manifests, staleness stamps of stored views and re-ingests know
only them, and removing `derived/` loses nothing. The copies cost disk (the days' requests
and segments once more, written smaller: 30 MB of parts made 8.5 MB of copies). A superseded
copy is kept REPLACED_GRACE_S after a build first finds it superseded, for readers that listed
it, then the next build that stores views (after an ingest, or --force) removes it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path

import duckdb

from pipeline import schema
from pipeline.period import day_of
from pipeline.warehouse import REPLACED_GRACE_S, Warehouse

COMPACTED_TABLES = ("requests", "segments")
# a day in fewer parts than this is read as it is: a copy would cost disk and save little
MIN_PARTS = 8
COMPACT_DIR = Path("derived") / "compact"
FORMAT = "compact-1"
SUPERSEDED = ".superseded"  # beside a copy no longer current: since when (its mtime)

RawRelation = Callable[[duckdb.DuckDBPyConnection, str, list[Path]], duckdb.DuckDBPyRelation]


def _days(files: list[Path]) -> dict[date, list[Path]]:
    """The parts of each known day (the unknown-day partition is never copied)."""
    out: dict[date, list[Path]] = {}
    for path in files:
        day = day_of(path)
        if day is not None:
            out.setdefault(day, []).append(path)
    return out


def _stamp(wh: Warehouse, table: str, parts: list[Path]) -> str | None:
    """Digest of a day's parts; None when one is gone (an ingest replaced it meanwhile)."""
    digest = hashlib.sha256(f"{FORMAT} {table}\n".encode())
    for path in sorted(parts):
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return None
        digest.update(f"{path.relative_to(wh.root).as_posix()} {size}\n".encode())
    return digest.hexdigest()[:32]


def copy_path(wh: Warehouse, table: str, day: date, stamp: str) -> Path:
    return wh.root / COMPACT_DIR / table / f"day={day.isoformat()}" / f"{stamp}.parquet"


def _wanted(wh: Warehouse, table: str, files: list[Path]) -> dict[date, tuple[list[Path], Path]]:
    """Day -> (its parts, the path of their copy), for the days worth a copy."""
    out = {}
    for day, parts in _days(files).items():
        if len(parts) >= MIN_PARTS and (stamp := _stamp(wh, table, parts)) is not None:
            out[day] = (parts, copy_path(wh, table, day, stamp))
    return out


def copy_of(wh: Warehouse, table: str, parts: list[Path]) -> Path | None:
    """The copy that holds exactly the rows of `parts` (the parts of one day), if built."""
    wanted = list(_wanted(wh, table, parts).values())
    if len(wanted) != 1 or len(wanted[0][0]) != len(parts):
        return None  # not one known day worth a copy
    copy = wanted[0][1]
    return copy if copy.exists() else None


def substitute(wh: Warehouse, snapshot: dict[str, list[Path]]) -> dict[str, list[Path]]:
    """`snapshot` (the parts a session reads) with each day that has a current copy read from
    the copy instead of its parts."""
    out = dict(snapshot)
    for table in COMPACTED_TABLES:
        files = snapshot.get(table)
        if not files:
            continue
        replaced: set[Path] = set()
        copies: list[Path] = []
        for parts, copy in _wanted(wh, table, files).values():
            if copy.exists():
                replaced.update(parts)
                copies.append(copy)
        if copies:
            out[table] = sorted(copies) + [p for p in files if p not in replaced]
    return out


def write_missing(
    wh: Warehouse,
    snapshot: dict[str, list[Path]],
    con: duckdb.DuckDBPyConnection,
    raw_relation: RawRelation,
    progress: Callable[[str], None] | None = None,
) -> int:
    """Write the copy of each day worth one that has none for its current parts, and remove
    copies superseded more than REPLACED_GRACE_S ago. Returns the copies written. The caller
    holds the warehouse lock shared, so no ingest changes the parts meanwhile."""
    written = 0
    for table in COMPACTED_TABLES:
        spec = schema.load(table)
        columns = ", ".join(f'"{c.name}"' for c in spec.columns)
        wanted = _wanted(wh, table, snapshot.get(table, []))
        for day, (parts, copy) in sorted(wanted.items()):
            if copy.exists():
                continue
            copy.parent.mkdir(parents=True, exist_ok=True)
            tmp = copy.with_name(f".{copy.name}.{os.getpid()}.tmp")
            try:
                raw_relation(con, table, parts).select(columns).to_parquet(
                    str(tmp), compression="zstd"
                )
                tmp.replace(copy)
            finally:
                tmp.unlink(missing_ok=True)
            written += 1
            if progress is not None:
                progress(f"compacted {table} of {day}: {len(parts)} parts -> 1")
        _remove_superseded(wh, table, {copy for _parts, copy in wanted.values()})
    return written


def _remove_superseded(wh: Warehouse, table: str, current: set[Path]) -> None:
    """Remove the copies superseded more than REPLACED_GRACE_S ago. A copy's age says nothing
    of when it stopped being current, so a build that first finds it superseded leaves a
    marker (`<copy>.superseded`), and a build after the grace removes both. So does a temporary
    file left by a build that was killed, after the grace."""
    base = wh.root / COMPACT_DIR / table
    if not base.is_dir():
        return
    cutoff = time.time() - REPLACED_GRACE_S
    # Builds may run side by side (each holds the lock shared): a file or folder this one
    # lists may be gone by the time it is touched.
    for path in base.rglob("*.parquet"):
        marker = path.with_name(path.name + SUPERSEDED)
        with contextlib.suppress(FileNotFoundError):
            if path in current:
                marker.unlink(missing_ok=True)  # current again: a later supersession counts anew
            elif not marker.exists():
                marker.touch()
            elif marker.stat().st_mtime < cutoff:
                path.unlink(missing_ok=True)
                marker.unlink()
    for marker in base.rglob("*" + SUPERSEDED):  # its copy was removed by other means
        if not marker.with_name(marker.name.removesuffix(SUPERSEDED)).exists():
            marker.unlink(missing_ok=True)
    for path in base.rglob(".*.tmp"):
        with contextlib.suppress(FileNotFoundError):
            if path.stat().st_mtime < cutoff:
                path.unlink()
    for folder in base.iterdir():
        with contextlib.suppress(OSError):  # not empty, or removed meanwhile
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
