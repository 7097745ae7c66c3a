"""Ingest: files -> normalised rows -> warehouse parts, in parallel and in bounded memory.

Work is split into tasks: one per file, and an uncompressed capture JSONL larger than
`CHUNK_BYTES` is split at line boundaries into several tasks, so every core is busy on one big
file too. Each task streams its records, normalises them and flushes Parquet parts whenever its
buffers reach `FLUSH_*` limits, so memory stays bounded whatever the input size.

Invariant, per file and in total: records = accepted + rejected + skipped.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import xxhash

from pipeline import __version__, providers, schema
from pipeline.errors import InputError
from pipeline.normalise import RejectRecord, Skip, normalise
from pipeline.records import Exchange, Reject
from pipeline.redact import redact_text
from pipeline.sources import compression_of, detect_format, iter_source
from pipeline.warehouse import Warehouse, source_key

CHUNK_BYTES = 32 * 1024 * 1024
FLUSH_REQUESTS = 5_000
FLUSH_SEGMENTS = 150_000
FLUSH_CONTENT_BYTES = 48 * 1024 * 1024


@dataclass
class FileResult:
    source: str
    format: str
    status: str  # ingested, unchanged (already in the manifest)
    records: int = 0
    accepted: int = 0
    rejected: int = 0
    skipped: int = 0
    size_bytes: int = 0


@dataclass
class IngestResult:
    files: list[FileResult] = field(default_factory=list)

    def total(self, attr: str) -> int:
        return sum(getattr(f, attr) for f in self.files)


@dataclass(frozen=True)
class Task:
    path: str
    fmt: str
    source_hash: str
    chunk: int
    start: int | None = None
    end: int | None = None
    first_lineno: int = 1
    keep_content: bool = True
    providers_file: str | None = None


def hash_file(path: Path) -> str:
    h = xxhash.xxh3_128()
    with path.open("rb") as fh:
        while block := fh.read(8 * 1024 * 1024):
            h.update(block)
    return h.hexdigest()


def split_ranges(path: Path, size: int) -> list[tuple[int, int, int]]:
    """(start, end, first line number) ranges of about CHUNK_BYTES, cut after a newline."""
    if size <= CHUNK_BYTES:
        return [(0, size, 1)]
    ranges = []
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        start, lineno = 0, 1
        while start < size:
            end = min(start + CHUNK_BYTES, size)
            if end < size:
                nl = mm.find(b"\n", end)
                end = size if nl < 0 else nl + 1
            ranges.append((start, end, lineno))
            lineno += mm[start:end].count(b"\n")
            start = end
    return ranges


class _Buffers:
    """Column buffers for one task, flushed to the warehouse when they grow past the limits."""

    def __init__(self, wh: Warehouse, key: str, chunk: int, keep_content: bool) -> None:
        self.wh, self.key, self.chunk, self.keep_content = wh, key, chunk, keep_content
        self.flushes = 0
        self.seen_content: set[str] = set()
        self._reset()

    def _reset(self) -> None:
        self.requests: dict[str, list[Any]] = {n: [] for n in schema.load("requests").names}
        self.segments: dict[str, list[Any]] = {n: [] for n in schema.load("segments").names}
        self.content: dict[str, list[Any]] = {"segment_hash": [], "bytes": [], "content": []}
        self.rejects: dict[str, list[Any]] = {n: [] for n in schema.load("rejects").names}
        self.content_bytes = 0

    def add(self, row: dict[str, Any], norm: Any) -> None:
        day = row["started_at"].date()
        row["day"] = day
        for name, values in self.requests.items():
            values.append(row.get(name))
        seg = self.segments
        for s in norm.segments:
            seg["request_id"].append(s.request_id)
            seg["day"].append(day)
            seg["position"].append(s.position)
            seg["kind"].append(s.kind)
            seg["role"].append(s.role)
            seg["segment_hash"].append(s.segment_hash)
            seg["prefix_hash"].append(s.prefix_hash)
            seg["bytes"].append(s.bytes)
        if self.keep_content:
            for digest, data in norm.contents:
                if digest in self.seen_content:
                    continue
                self.seen_content.add(digest)
                self.content["segment_hash"].append(digest)
                self.content["bytes"].append(len(data))
                self.content["content"].append(data.decode("utf-8", "replace"))
                self.content_bytes += len(data)
        if (
            len(self.requests["request_id"]) >= FLUSH_REQUESTS
            or len(seg["request_id"]) >= FLUSH_SEGMENTS
            or self.content_bytes >= FLUSH_CONTENT_BYTES
        ):
            self.flush()

    def reject(self, rej: Reject, now: datetime) -> None:
        self.rejects["source"].append(rej.source)
        self.rejects["source_index"].append(rej.index)
        self.rejects["reason"].append(rej.reason[:500])
        self.rejects["excerpt"].append(rej.excerpt)
        self.rejects["ingested_at"].append(now)

    def flush(self) -> None:
        part = f"{self.chunk:04d}-{self.flushes:05d}"
        self.wh.write_rows("requests", self.requests, self.key, part)
        self.wh.write_rows("segments", self.segments, self.key, part)
        self.wh.write_rows("segment_content", self.content, self.key, part)
        self.wh.write_rows("rejects", self.rejects, self.key, part)
        self.flushes += 1
        self._reset()


def _records(task: Task) -> Iterable[object]:
    if task.start is not None and task.end is not None:
        from pipeline.sources.capture import iter_capture_range

        return iter_capture_range(Path(task.path), task.start, task.end, task.first_lineno)
    return iter_source(Path(task.path), task.fmt)


def run_task(task: Task, root: str) -> tuple[int, int, int, int]:
    """Ingest one file or file range. Returns (records, accepted, rejected, skipped)."""
    wh = Warehouse(Path(root))
    key = source_key(task.source_hash)
    rules = providers.load_user_rules(Path(task.providers_file)) if task.providers_file else None
    buffers = _Buffers(wh, key, task.chunk, task.keep_content)
    now = datetime.now(UTC)
    records = accepted = rejected = skipped = 0
    for item in _records(task):
        records += 1
        if isinstance(item, Reject):
            buffers.reject(item, now)
            rejected += 1
            continue
        assert isinstance(item, Exchange)
        request_id = item.record_id or f"{key[:12]}:{item.index}"
        try:
            norm = normalise(item, request_id, rules)
        except Skip:
            skipped += 1
            continue
        except RejectRecord as exc:
            excerpt = redact_text(item.request_body[:200].decode("utf-8", "replace"))
            buffers.reject(Reject(item.source, item.index, str(exc), excerpt), now)
            rejected += 1
            continue
        buffers.add(norm.row, norm)
        accepted += 1
    buffers.flush()
    return records, accepted, rejected, skipped


def plan(
    path: Path, source_hash: str, fmt: str, keep_content: bool, prov: str | None
) -> list[Task]:
    size = path.stat().st_size
    if fmt == "capture_jsonl" and compression_of(path) is None and size > CHUNK_BYTES:
        return [
            Task(str(path), fmt, source_hash, i, s, e, ln, keep_content, prov)
            for i, (s, e, ln) in enumerate(split_ranges(path, size))
        ]
    return [Task(str(path), fmt, source_hash, 0, keep_content=keep_content, providers_file=prov)]


ProgressFn = Callable[[int, int], None]


def ingest(
    paths: list[Path],
    warehouse: Warehouse,
    *,
    force: bool = False,
    keep_content: bool = True,
    workers: int | None = None,
    providers_file: Path | None = None,
    progress: ProgressFn | None = None,
) -> IngestResult:
    """Ingest files into the warehouse; `progress(done_bytes, total_bytes)` runs as tasks end."""
    if not paths:
        raise InputError("no input files", hint="cacheaudit ingest CAPTURE.jsonl [MORE ...]")
    if providers_file is not None:
        providers.load_user_rules(providers_file)  # fail fast on a bad map, before any work
    warehouse.ensure()
    result = IngestResult()
    pending: list[tuple[FileResult, str, list[Task]]] = []
    for path in paths:
        fmt = detect_format(path)
        digest = hash_file(path)
        size = path.stat().st_size
        entry = warehouse.manifest_entry(digest)
        if entry is not None and not force:
            result.files.append(FileResult(str(path), fmt, "unchanged", size_bytes=size))
            continue
        warehouse.remove_source(digest)  # --force, or leftovers of a crashed ingest
        fr = FileResult(str(path), fmt, "ingested", size_bytes=size)
        prov = str(providers_file) if providers_file else None
        pending.append((fr, digest, plan(path, digest, fmt, keep_content, prov)))
        result.files.append(fr)
    tasks = [(fr, digest, t) for fr, digest, ts in pending for t in ts]
    total_bytes = sum(
        ((t.end or 0) - (t.start or 0)) if t.start is not None else fr.size_bytes
        for fr, _, t in tasks
    )
    done_bytes = 0
    n_workers = max(1, min(workers or os.cpu_count() or 1, len(tasks)))
    root = str(warehouse.root)
    if n_workers == 1:
        outcomes = ((fr, t, run_task(t, root)) for fr, _, t in tasks)
        for fr, t, counts in outcomes:
            done_bytes += _apply(fr, t, counts)
            if progress:
                progress(done_bytes, total_bytes)
    else:
        with ProcessPoolExecutor(max_workers=n_workers) as pool:
            futures = {pool.submit(run_task, t, root): (fr, t) for fr, _, t in tasks}
            for fut in as_completed(futures):
                fr, t = futures[fut]
                done_bytes += _apply(fr, t, fut.result())
                if progress:
                    progress(done_bytes, total_bytes)
    now = datetime.now(UTC)
    for fr, digest, _ in pending:
        warehouse.write_manifest(
            {
                "source": fr.source,
                "source_hash": digest,
                "format": fr.format,
                "size_bytes": fr.size_bytes,
                "records": fr.records,
                "accepted": fr.accepted,
                "rejected": fr.rejected,
                "skipped": fr.skipped,
                "ingested_at": now,
                "cacheaudit_version": __version__,
            }
        )
    return result


def _apply(fr: FileResult, task: Task, counts: tuple[int, int, int, int]) -> int:
    records, accepted, rejected, skipped = counts
    fr.records += records
    fr.accepted += accepted
    fr.rejected += rejected
    fr.skipped += skipped
    if task.start is not None and task.end is not None:
        return task.end - task.start
    return fr.size_bytes
