"""Taking a source's rows out of the warehouse: `cacheaudit forget`.

Ingest only adds: a file ingested again replaces its own earlier rows (a capture that grew, or
--force), never drops a record it no longer holds, and nothing else removes rows. Users need to:
a capture held a secret an older version stored, a file was ingested by mistake, a capture was
rewritten without some of its records (forget it, then ingest it again).

`forget` removes every generation of each named source: its manifest first (readers stop
seeing the source at once), then its parts of every table (requests, segments, prompt text,
rejects). Stored views hold rows of it too (cache_breaks keeps excerpts of prompt text), as do
`build`'s compacted copies of the days it was in: the copies of those days are removed, and
the caller brings the stored views up to date (`materialise.build`), which writes the days the
source was in again without it.

An exchange is stored once, from the first file that held it: another file ingested later
skipped it as a duplicate, so forgetting the first loses it from the second too until that one
is ingested again (with --force). `Forgotten.skipped_elsewhere` counts the records other
sources skipped, so the command can say so.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from pipeline.errors import NotFoundError
from pipeline.ingest_claims import same_file
from pipeline.period import day_of
from pipeline.warehouse import TABLES, Warehouse, key_of

COMPACT_DIR = Path("derived") / "compact"


@dataclass(slots=True)
class Forgotten:
    """What was removed of one named source (the counts of its live generation)."""

    source: str  # as the manifest names it
    requests: int
    rejected: int
    generations: int
    days: set[date | None] = field(default_factory=set)


@dataclass(slots=True)
class ForgetResult:
    sources: list[Forgotten]
    files_removed: int
    skipped_elsewhere: int  # records other sources skipped (some may have been these)


def forget(wh: Warehouse, paths: list[Path]) -> ForgetResult:
    """Remove every generation of the sources ingested from `paths`. Nothing is removed when a
    path names no source (NotFoundError); the lock is held exclusively meanwhile."""
    if not wh.exists():
        raise NotFoundError(f"no warehouse at {wh.root}", hint="run `cacheaudit ingest` first")
    with wh.lock():
        index = wh.manifest_index()
        matched: dict[str, tuple[str, dict[str, Any]]] = {}
        missing = []
        for path in paths:
            found = [(stem, row) for stem, row in index.values() if same_file(row, path)]
            if not found:
                missing.append(str(path))
            matched.update((key_of(stem), (stem, row)) for stem, row in found)
        if missing:
            raise NotFoundError(
                f"not a source of {wh.root}: {', '.join(missing)}",
                hint='`cacheaudit sql "SELECT source, source_path FROM sources"` lists them',
            )
        every_stem = wh.manifest_stems()
        sources, removed = [], 0
        for key, (_, row) in sorted(matched.items()):
            stems = sorted(s for s in every_stem if key_of(s) == key)
            days = _days_of(wh, stems)
            # the live generation last: until it goes, readers see the source as it was
            for stem in sorted(stems, key=lambda s: s == matched[key][0]):
                removed += wh.remove_stem(stem)
            sources.append(
                Forgotten(
                    str(row["source"]),
                    int(row.get("accepted") or 0),
                    int(row.get("rejected") or 0),
                    len(stems),
                    days,
                )
            )
        removed += _remove_compacted(wh, set().union(*(s.days for s in sources)))
        skipped = sum(int(r.get("skipped") or 0) for _, r in wh.manifest_index().values())
    return ForgetResult(sources, removed, skipped)


def _days_of(wh: Warehouse, stems: list[str]) -> set[date | None]:
    """The days the parts of these generations are in (None: the unknown-day partition)."""
    days: set[date | None] = set()
    for table in TABLES:
        base = wh.root / table
        if table == "sources" or not base.is_dir():
            continue
        for stem in stems:
            days.update(day_of(p) for p in base.rglob(f"{stem}-*.parquet"))
    return days


def _remove_compacted(wh: Warehouse, days: set[date | None]) -> int:
    """Remove `build`'s compacted copies of these days (pipeline/compaction.py): they hold the
    forgotten rows until a build copies the days again."""
    removed = 0
    base = wh.root / COMPACT_DIR
    for day in days:
        if day is None or not base.is_dir():
            continue
        for folder in base.glob(f"*/day={day.isoformat()}"):
            removed += sum(1 for p in folder.rglob("*") if p.is_file())
            shutil.rmtree(folder, ignore_errors=True)
    return removed
