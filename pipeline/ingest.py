"""Ingest: files -> normalised rows -> warehouse parts, on every core and in bounded memory.

Work is cut into tasks that worker processes take from a bounded queue:
- an uncompressed capture JSONL is split at line boundaries into byte ranges of about
  `CHUNK_BYTES`, which workers read themselves (the parent reads nothing);
- a gzip/zstd capture is one stream that cannot be split, so the parent decompresses it once
  and hands out blocks of whole lines;
- a HAR is one JSON document, so the parent scans it entry by entry (`sources.har`) and hands
  out batches of read entries;
- anything else (OTLP/JSON) is one task per file.
Each worker keeps one set of column buffers per source across tasks and writes Parquet parts when
they pass the `FLUSH_*` limits and when the queue ends. At most `workers` tasks wait in the
queue, so memory is bounded by workers x (task + buffers) whatever the input size.

Invariant, per file and in total: records = accepted + rejected + skipped.
"""

from __future__ import annotations

import gc
import io
import multiprocessing as mp
import os
import queue
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import xxhash

from pipeline import __version__, providers, schema
from pipeline.errors import InputError, PipelineError
from pipeline.normalise import RejectRecord, Skip, normalise
from pipeline.records import Exchange, Reject, Segment
from pipeline.redact import redact_text
from pipeline.sources import compression_of, detect_format, iter_source, open_counted
from pipeline.warehouse import Warehouse, source_key

CHUNK_BYTES = 32 * 1024 * 1024  # one task's share of a file the workers read themselves
# Tasks the parent reads (decompressed lines, HAR entries) travel through a pipe: smaller, so
# the ones waiting in the queue and in flight hold less memory.
BATCH_BYTES = 8 * 1024 * 1024
PARALLEL_MIN_BYTES = 8 * 1024 * 1024  # below this, worker start-up costs more than it saves
# Buffered rows per process before a part is written. Measured at ~800 bytes per buffered
# segment at its peak (Python objects, then their Arrow copy while writing), so all workers
# together buffer at most SEGMENTS_ALL_WORKERS (~250 MB), whatever the core count.
SEGMENTS_ALL_WORKERS = 300_000
FLUSH_REQUESTS = 5_000
FLUSH_CONTENT_BYTES = 32 * 1024 * 1024
SEEN_CONTENT_MAX = 2_000_000  # distinct segment hashes remembered per source (~150 MB at most)

Record = Exchange | Reject


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
    """A share of one source. Exactly one of: a byte range of the file (start/end), a block of
    whole JSONL lines (lines), already-read records (items), or the whole file (none set)."""

    path: str
    fmt: str
    source_hash: str
    start: int | None = None
    end: int | None = None
    first_lineno: int = 1
    lines: bytes | None = None
    items: list[Record] | None = None
    weight: int = 0  # bytes of the file on disk this task accounts for (progress)


@dataclass(frozen=True)
class Options:
    keep_content: bool = True
    providers_file: str | None = None
    workers: int = 1  # processes sharing the memory budget (see SEGMENTS_ALL_WORKERS)

    @property
    def flush_segments(self) -> int:
        return max(10_000, SEGMENTS_ALL_WORKERS // max(1, self.workers))


Counts = tuple[int, int, int, int]  # records, accepted, rejected, skipped


def hash_file(path: Path) -> str:
    h = xxhash.xxh3_128()
    buf = bytearray(8 * 1024 * 1024)
    view = memoryview(buf)
    with path.open("rb", buffering=0) as fh:
        while n := fh.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


# --- planning: files -> tasks -------------------------------------------------------------


def split_ranges(path: Path, size: int) -> list[tuple[int, int, int]]:
    """(start, end, first line number) ranges of about CHUNK_BYTES, cut after a newline."""
    if size <= CHUNK_BYTES:
        return [(0, size, 1)]
    ranges = []
    buf = bytearray(8 * 1024 * 1024)
    with path.open("rb", buffering=0) as fh:
        start, lineno = 0, 1
        while start < size:
            end = min(start + CHUNK_BYTES, size)
            if end < size:
                end = _next_line_start(fh, end, size)
            ranges.append((start, end, lineno))
            lineno += _count_newlines(fh, start, end, buf)
            start = end
    return ranges


def _next_line_start(fh: Any, pos: int, size: int) -> int:
    fh.seek(pos)
    while pos < size:
        block: bytes = fh.read(1024 * 1024)
        nl = block.find(b"\n")
        if nl >= 0:
            return pos + nl + 1
        pos += len(block)
    return size


def _count_newlines(fh: Any, start: int, end: int, buf: bytearray) -> int:
    fh.seek(start)
    count, left = 0, end - start
    while left > 0:
        n: int = fh.readinto(buf)
        if not n:
            break
        count += buf.count(b"\n", 0, min(n, left))
        left -= n
    return count


def _line_blocks(path: Path, fmt: str, digest: str) -> Iterator[Task]:
    """Blocks of whole lines from a compressed file, decompressed once, in order."""
    stream, raw = open_counted(path)
    with stream:
        lineno, carry, consumed = 1, b"", 0
        while True:
            block = stream.read(BATCH_BYTES)
            data = carry + block
            if not block:
                if data:
                    yield Task(str(path), fmt, digest, first_lineno=lineno, lines=data,
                               weight=raw.tell() - consumed)  # fmt: skip
                return
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                carry = data  # one line longer than a block: keep reading
                continue
            carry = data[cut:]
            position = raw.tell()
            yield Task(str(path), fmt, digest, first_lineno=lineno, lines=data[:cut],
                       weight=position - consumed)  # fmt: skip
            consumed = position
            lineno += data.count(b"\n", 0, cut)


def _har_batches(path: Path, digest: str) -> Iterator[Task]:
    """Batches of read HAR entries, about BATCH_BYTES of bodies each, in order."""
    from pipeline.sources.har import iter_entries, read_entry

    stream, raw = open_counted(path)
    source = str(path)
    with stream:
        batch: list[Record] = []
        size, consumed = 0, 0
        try:
            for index, entry in iter_entries(stream):
                item = read_entry(entry, source, index)
                batch.append(item)
                if isinstance(item, Exchange):
                    size += len(item.request_body) + len(item.response_body) + 512
                if size >= BATCH_BYTES:
                    position = raw.tell()
                    yield Task(source, "har", digest, items=batch, weight=position - consumed)
                    batch, size, consumed = [], 0, position
        except InputError as exc:
            raise InputError(f"{path}: {exc.message}", hint=exc.hint) from None
        yield Task(source, "har", digest, items=batch, weight=raw.tell() - consumed)


def plan(path: Path, fmt: str, digest: str, size: int) -> Iterator[Task]:
    if fmt == "har":
        return _har_batches(path, digest)
    if fmt == "capture_jsonl":
        if compression_of(path) is not None:
            return _line_blocks(path, fmt, digest)
        return iter(
            [
                Task(str(path), fmt, digest, start=s, end=e, first_lineno=ln, weight=e - s)
                for s, e, ln in split_ranges(path, size)
            ]
        )
    return iter([Task(str(path), fmt, digest, weight=size)])


# --- work: tasks -> rows -> parts -----------------------------------------------------------


class _Buffers:
    """Column buffers for one source in one process, written as parts when they grow."""

    def __init__(
        self, wh: Warehouse, key: str, worker: int, keep_content: bool, flush_segments: int
    ) -> None:
        self.wh, self.key, self.worker, self.keep_content = wh, key, worker, keep_content
        self.flush_segments = flush_segments
        self.flushes = 0
        self.seen_content: set[str] = set()
        self.request_names = schema.load("requests").names
        self.rejects_names = schema.load("rejects").names
        self._reset()

    def _reset(self) -> None:
        self.requests: dict[str, list[Any]] = {n: [] for n in self.request_names}
        self.segments: list[Segment] = []
        self.segment_days: list[Any] = []
        self.content: dict[str, list[Any]] = {"segment_hash": [], "bytes": [], "content": []}
        self.rejects: dict[str, list[Any]] = {n: [] for n in self.rejects_names}
        self.content_bytes = 0

    def add(self, row: dict[str, Any], segments: list[Segment], contents: Any) -> None:
        day = row["started_at"].date()
        row["day"] = day
        for name, values in self.requests.items():
            values.append(row.get(name))
        self.segments.extend(segments)
        self.segment_days.extend([day] * len(segments))
        if self.keep_content:
            seen = self.seen_content
            if len(seen) > SEEN_CONTENT_MAX:
                seen.clear()  # bounded memory; a repeat costs a duplicate row, which views drop
            for digest, data in contents:
                if digest in seen:
                    continue
                seen.add(digest)
                self.content["segment_hash"].append(digest)
                self.content["bytes"].append(len(data))
                self.content["content"].append(data.decode("utf-8", "replace"))
                self.content_bytes += len(data)
        if (
            len(self.segment_days) >= self.flush_segments
            or len(self.requests["request_id"]) >= FLUSH_REQUESTS
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
        segs = self.segments
        segment_columns = {
            "request_id": [s.request_id for s in segs],
            "day": self.segment_days,
            "position": [s.position for s in segs],
            "kind": [s.kind for s in segs],
            "role": [s.role for s in segs],
            "segment_hash": [s.segment_hash for s in segs],
            "prefix_hash": [s.prefix_hash for s in segs],
            "bytes": [s.bytes for s in segs],
        }
        part = f"{self.worker:02d}-{self.flushes:05d}"
        self.wh.write_rows("requests", self.requests, self.key, part)
        self.wh.write_rows("segments", segment_columns, self.key, part)
        self.wh.write_rows("segment_content", self.content, self.key, part)
        self.wh.write_rows("rejects", self.rejects, self.key, part)
        self.flushes += 1
        self._reset()


class Worker:
    """Normalises tasks into per-source buffers; `finish` writes what is left."""

    def __init__(self, root: str, options: Options, worker_id: int) -> None:
        self.wh = Warehouse(Path(root))
        self.options = options
        self.worker_id = worker_id
        self.rules = (
            providers.load_user_rules(Path(options.providers_file))
            if options.providers_file
            else None
        )
        self.buffers: dict[str, _Buffers] = {}

    def _records(self, task: Task) -> Iterable[Record]:
        if task.items is not None:
            return task.items
        if task.lines is not None:
            return _iter_lines(task.lines, task.path, task.first_lineno)
        if task.start is not None and task.end is not None:
            from pipeline.sources.capture import iter_capture_range

            return iter_capture_range(Path(task.path), task.start, task.end, task.first_lineno)
        records: Iterable[Record] = iter_source(Path(task.path), task.fmt)  # type: ignore[assignment]
        return records

    def run(self, task: Task) -> Counts:
        key = source_key(task.source_hash)
        buffers = self.buffers.get(key)
        if buffers is None:
            buffers = _Buffers(
                self.wh,
                key,
                self.worker_id,
                self.options.keep_content,
                self.options.flush_segments,
            )
            self.buffers[key] = buffers
        now = datetime.now(UTC)
        records = accepted = rejected = skipped = 0
        for item in self._records(task):
            records += 1
            if isinstance(item, Reject):
                buffers.reject(item, now)
                rejected += 1
                continue
            request_id = item.record_id or f"{key[:12]}:{item.index}"
            try:
                norm = normalise(item, request_id, self.rules)
            except Skip:
                skipped += 1
                continue
            except RejectRecord as exc:
                excerpt = redact_text(item.request_body[:200].decode("utf-8", "replace"))
                buffers.reject(Reject(item.source, item.index, str(exc), excerpt), now)
                rejected += 1
                continue
            buffers.add(norm.row, norm.segments, norm.contents)
            accepted += 1
        return records, accepted, rejected, skipped

    def finish(self) -> None:
        for buffers in self.buffers.values():
            buffers.flush()
        self.buffers.clear()


def _iter_lines(data: bytes, source: str, first_lineno: int) -> Iterator[Record]:
    from pipeline.sources.capture import read_line

    for lineno, line in enumerate(io.BytesIO(data), start=first_lineno):
        item = read_line(line, source, lineno)
        if item is not None:
            yield item


def _tune_gc() -> None:
    # Rows are built from many short-lived containers; the default gen-0 threshold (700) makes
    # the collector walk the growing buffers again and again. Nothing here makes cycles.
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)


def _worker_main(
    worker_id: int, root: str, options: Options, tasks: Any, results: Any
) -> None:  # pragma: no cover - runs in a child process; covered through ingest()
    _tune_gc()
    try:
        worker = Worker(root, options, worker_id)
        while (task := tasks.get()) is not None:
            results.put(("done", task.source_hash, task.weight, worker.run(task)))
        worker.finish()
        results.put(("exit", worker_id, 0, None))
    except BaseException as exc:  # report anything to the parent, which raises it
        detail = exc.message if isinstance(exc, PipelineError) else traceback.format_exc()
        results.put(("error", worker_id, 0, detail))


# --- the run --------------------------------------------------------------------------------

ProgressFn = Callable[[int, int], None]


class _Run:
    """Bookkeeping of one ingest: per-source counts and progress."""

    def __init__(self, files: dict[str, FileResult], total: int, progress: ProgressFn | None):
        self.files, self.total, self.progress = files, total, progress
        self.done = 0

    def apply(self, digest: str, weight: int, counts: Counts) -> None:
        fr = self.files[digest]
        fr.records += counts[0]
        fr.accepted += counts[1]
        fr.rejected += counts[2]
        fr.skipped += counts[3]
        self.done += weight
        if self.progress:
            self.progress(min(self.done, self.total), self.total)


def _run_inline(tasks: Iterator[Task], root: str, options: Options, run: _Run) -> None:
    thresholds = gc.get_threshold()
    gc.set_threshold(50_000, 50, 100)  # as in workers (see _tune_gc); restored for the caller
    try:
        worker = Worker(root, options, 0)
        for task in tasks:
            run.apply(task.source_hash, task.weight, worker.run(task))
        worker.finish()
    finally:
        gc.set_threshold(*thresholds)


def _run_parallel(
    tasks: Iterator[Task], root: str, options: Options, run: _Run, n_workers: int
) -> None:
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["pipeline.ingest"])
    task_q: Any = ctx.Queue(maxsize=n_workers)
    result_q: Any = ctx.Queue()
    procs = [
        ctx.Process(target=_worker_main, args=(i, root, options, task_q, result_q), daemon=True)
        for i in range(n_workers)
    ]
    for p in procs:
        p.start()
    exited = 0

    def drain(block: bool) -> None:
        nonlocal exited
        while True:
            try:
                kind, ident, weight, payload = result_q.get(timeout=0.2 if block else 0.0)
            except queue.Empty:
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead:
                    code = dead[0].exitcode
                    raise PipelineError(f"an ingest worker died (exit code {code})") from None
                return
            if kind == "done":
                run.apply(ident, weight, payload)
            elif kind == "exit":
                exited += 1
            else:
                raise PipelineError(f"ingest worker failed: {payload}")
            block = False

    try:
        for task in tasks:
            while True:
                try:
                    task_q.put(task, timeout=0.2)
                    break
                except queue.Full:
                    drain(block=False)
            drain(block=False)
        for _ in procs:
            task_q.put(None)
        while exited < n_workers:
            drain(block=True)
    finally:
        for p in procs:
            if p.is_alive() and exited < n_workers:
                p.terminate()
            p.join()


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
    with warehouse.lock():
        warehouse.remove_orphans()  # parts of an ingest that crashed before its manifest
        result = IngestResult()
        pending: dict[str, FileResult] = {}
        plans: list[Iterator[Task]] = []
        for path in paths:
            fmt = detect_format(path)
            digest = hash_file(path)
            size = path.stat().st_size
            if digest in pending or (warehouse.manifest_entry(digest) and not force):
                result.files.append(FileResult(str(path), fmt, "unchanged", size_bytes=size))
                continue
            warehouse.remove_source(digest)  # --force
            fr = FileResult(str(path), fmt, "ingested", size_bytes=size)
            pending[digest] = fr
            result.files.append(fr)
            plans.append(plan(path, fmt, digest, size))
        total = sum(fr.size_bytes for fr in pending.values())
        run = _Run(pending, total, progress)
        if progress and total:
            progress(0, total)  # the bar shows the size at once, not when a first task ends
        tasks = (task for p in plans for task in p)
        n_workers = max(1, workers or os.cpu_count() or 1)
        if total < PARALLEL_MIN_BYTES:
            n_workers = 1
        options = Options(keep_content, str(providers_file) if providers_file else None, n_workers)
        if n_workers == 1:
            _run_inline(tasks, str(warehouse.root), options, run)
        else:
            _run_parallel(tasks, str(warehouse.root), options, run, n_workers)
        if progress and total:
            progress(total, total)  # a HAR's tail after log.entries is never read
        now = datetime.now(UTC)
        for digest, fr in pending.items():
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
