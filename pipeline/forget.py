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

A forget killed part way (SIGKILL, SIGTERM, Ctrl-C) has removed the manifest, so the file is no
source any more, yet its parts, the compacted copies and the stored views may still hold its
rows. So before removing anything it writes what it is forgetting to `PENDING`, and the command
removes that file only once the views are built again: `forget` of the same file, run again,
finds it there and finishes the job, as an uninterrupted run would have done it.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from pipeline.errors import NotFoundError, WarehouseError
from pipeline.ingest_claims import same_file, under_folder
from pipeline.period import day_of
from pipeline.warehouse import TABLES, Warehouse, key_of

COMPACT_DIR = Path("derived") / "compact"
PENDING = ".forget-pending.json"  # what a forget is removing, until its views are built again


@dataclass(slots=True)
class Forgotten:
    """What was removed of one named source (the counts of its live generation)."""

    source: str  # as the manifest names it
    requests: int
    rejected: int
    generations: int
    days: set[date | None] = field(default_factory=set)
    source_path: str | None = None  # as the manifest recorded it (`same_file`)
    stems: list[str] = field(default_factory=list)  # every generation removed


@dataclass(slots=True)
class ForgetResult:
    sources: list[Forgotten]
    files_removed: int
    skipped_elsewhere: int  # records other sources skipped (some may have been these)


def forget(wh: Warehouse, paths: list[Path]) -> ForgetResult:
    """Remove every generation of the sources ingested from `paths` (a path naming no file
    ingested but a folder: those ingested from inside it). Nothing is removed when a path names
    no source (NotFoundError); the lock is held exclusively meanwhile. A path a
    forget that did not finish was removing (`PENDING`) is found there, and its removal done
    again; `finish` ends it once the stored views are built again."""
    if not wh.exists():
        raise NotFoundError(f"no warehouse at {wh.root}", hint="run `cacheaudit ingest` first")
    with wh.lock():
        index = wh.manifest_index()
        pending = _read_pending(wh)
        matched: dict[str, tuple[str, dict[str, Any]]] = {}
        unfinished: dict[str, Forgotten] = {}
        missing = []
        for path in paths:
            found = [(stem, row) for stem, row in index.values() if same_file(row, path)]
            begun = [f for f in pending if same_file(asdict(f), path)]
            if not found and not begun:  # a folder: every file ingested from inside it
                found = [(stem, row) for stem, row in index.values() if under_folder(row, path)]
                begun = [f for f in pending if under_folder(asdict(f), path)]
            if not found and not begun:
                missing.append(str(path))
            matched.update((key_of(stem), (stem, row)) for stem, row in found)
            unfinished.update((f.stems[0] if f.stems else f.source, f) for f in begun)
        if missing:
            raise NotFoundError(
                f"not a source of {wh.root}: {', '.join(missing)}",
                hint='`cacheaudit sql "SELECT source, source_path FROM sources"` lists them',
            )
        every_stem = wh.manifest_stems()
        sources = []
        for key, (live_stem, row) in sorted(matched.items()):
            # the live generation last: until it goes, readers see the source as it was
            stems = sorted(
                (s for s in every_stem if key_of(s) == key), key=lambda s: s == live_stem
            )
            sources.append(
                Forgotten(
                    str(row["source"]),
                    int(row.get("accepted") or 0),
                    int(row.get("rejected") or 0),
                    len(stems),
                    _days_of(wh, stems),
                    str(row.get("source_path") or "") or None,
                    stems,
                )
            )
        for left in unfinished.values():  # ingested again since: one source, removed whole
            named = Path(left.source_path or left.source)
            same = [f for f in sources if same_file(asdict(f), named)]
            if not same:
                sources.append(left)
                continue
            same[0].days |= left.days
            same[0].stems = [*left.stems, *same[0].stems]
        removing = {s for f in sources for s in f.stems}
        _write_pending(wh, [f for f in pending if not removing & {*f.stems}] + sources)
        removed = sum(wh.remove_stem(stem) for f in sources for stem in f.stems)
        removed += _remove_compacted(wh, set().union(*(s.days for s in sources)))
        skipped = sum(int(r.get("skipped") or 0) for _, r in wh.manifest_index().values())
    return ForgetResult(sources, removed, skipped)


def finish(wh: Warehouse, result: ForgetResult) -> None:
    """The forget of `result` is done (the stored views were built again without its rows):
    its sources leave `PENDING`, which goes when no other forget is left in it."""
    done = {s for f in result.sources for s in f.stems} | {f.source for f in result.sources}
    with wh.lock():
        left = [f for f in _read_pending(wh) if not done & {*f.stems, f.source}]
        if left:
            _write_pending(wh, left)
        else:
            (wh.root / PENDING).unlink(missing_ok=True)


def _read_pending(wh: Warehouse) -> list[Forgotten]:
    try:
        doc = json.loads((wh.root / PENDING).read_text(encoding="utf-8"))
        return [
            Forgotten(
                str(f["source"]),
                int(f["requests"]),
                int(f["rejected"]),
                int(f["generations"]),
                {date.fromisoformat(d) if d else None for d in f["days"]},
                f.get("source_path"),
                [str(s) for s in f["stems"]],
            )
            for f in doc["sources"]
        ]
    except FileNotFoundError:
        return []
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise WarehouseError(
            f"cannot read {wh.root / PENDING} (what an unfinished forget was removing): {exc}",
            hint="forget those files again after removing it",
        ) from exc


def _write_pending(wh: Warehouse, sources: list[Forgotten]) -> None:
    doc = {
        "sources": [
            {
                **asdict(f),
                "days": sorted((d.isoformat() if d else "" for d in f.days), key=str),
            }
            for f in sources
        ]
    }
    path = wh.root / PENDING
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    tmp.replace(path)


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
