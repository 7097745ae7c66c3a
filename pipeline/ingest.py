"""Ingest: files -> normalised rows -> warehouse parts, on every core and in bounded memory.

Work is cut into tasks that worker processes take from a bounded queue:
- an uncompressed capture JSONL is split at line boundaries into byte ranges of about
  `CHUNK_BYTES`, which workers read themselves (the parent reads nothing);
- a gzip/zstd capture is one stream that cannot be split, so the parent decompresses it once
  and hands out blocks of whole lines (written to a temporary file each, which the worker
  maps and deletes: cheaper than sending the bytes through the queue's pipe);
- an uncompressed HAR is one JSON document cut the same way, between entries: the parent finds
  an entry's start about every `CHUNK_BYTES` and counts the entries between two such starts by
  their `startedDateTime` keys (a byte search, no parse), so each range's first entry number is
  known; the workers read and parse their ranges themselves (`sources.har.iter_range`). A range
  whose entries are not what was counted (a damaged document) makes the whole file be read again
  as below, after the other tasks (`_read_again`);
- a compressed HAR is one stream, so the parent reads it entry by entry (`sources.har`) and hands
  out batches of read entries;
- anything else (OTLP/JSON) is one task per file.
Each worker keeps one set of column buffers per source across tasks and writes Parquet parts when
they pass the `FLUSH_*` limits and when the queue ends. At most `workers` tasks wait in the
queue, so memory is bounded by workers x (task + buffers) whatever the input size.

Invariant, per file and in total: records = accepted + rejected + skipped.
"""

from __future__ import annotations

import atexit
import binascii
import contextlib
import dataclasses
import fcntl
import gc
import io
import mmap
import multiprocessing as mp
import operator
import os
import queue
import re
import select
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import xxhash

from pipeline import __version__, providers, schema
from pipeline.errors import InputError, PipelineError, UsageError
from pipeline.normalise import SEGMENT_HASHING, Normalised, RejectRecord, Skip, normalise
from pipeline.records import Exchange, Reject
from pipeline.redact import mask_texts, redact_text
from pipeline.sources import (
    compression_of,
    damage_of,
    detect_format,
    iter_source,
    open_counted,
)
from pipeline.sources.capture import redact_excerpt, too_long
from pipeline.sources.har import RangeMismatch
from pipeline.sources.otlp import SPAN_INDEX_STRIDE
from pipeline.warehouse import LOCK_NAME, TABLES, Warehouse, key_of, source_key

CHUNK_BYTES = 32 * 1024 * 1024  # one task's share of a file the workers read themselves
TAIL_SPLIT = 8  # the end of a file goes in smaller ranges, down to CHUNK_BYTES / TAIL_SPLIT
HASH_BLOCK = 16 * 1024 * 1024
# Tasks the parent reads (decompressed lines, HAR entries) travel through a pipe: smaller, so
# the ones waiting in the queue and in flight hold less memory.
BATCH_BYTES = 8 * 1024 * 1024
PARALLEL_MIN_BYTES = 8 * 1024 * 1024  # below this, worker start-up costs more than it saves
COMPRESSION_GUESS = 8  # content bytes per compressed byte, for that decision only
# Buffered rows per process before a part is written. Measured at ~350 bytes per buffered
# segment (request rows and new content included; segments are kept as compact columns), plus
# their Arrow copy while a part is written, so all workers together buffer at most
# SEGMENTS_ALL_WORKERS (~210 MB, ~400 MB while writing), whatever the core count. Fewer, larger
# parts matter: every part is one Parquet file per table and UTC day, ~2 ms each to open.
SEGMENTS_ALL_WORKERS = 600_000
FLUSH_REQUESTS = 20_000
FLUSH_CONTENT_BYTES = 32 * 1024 * 1024
SEEN_CONTENT_MAX = 2_000_000  # distinct segment hashes remembered per source (~150 MB at most)
# The longest line (one capture record, one OTLP export) read; a longer one is one reject, read
# past without being held (a 132 KB zstd file can hold one line of 4 GiB). Far above any real
# record: a request carries at most tens of MB of images or documents.
MAX_RECORD_BYTES = 256 * 1024 * 1024

Record = Exchange | Reject
# One record (capture) or one batch of spans (OTLP) per line: split at line boundaries.
LINE_FORMATS = ("capture_jsonl", "otlp_json")


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
    duplicates: int = 0  # of the skipped: already in the warehouse or earlier in the batch
    # Hashes of earlier ingests of the same path, with other content, that this one replaced.
    superseded: list[str] = field(default_factory=list)
    stem: str = ""  # the warehouse generation this ingest writes (`Warehouse.new_stem`)
    # Generations this ingest replaces (--force, a grown capture): hidden when its manifest
    # lands, so readers see the old rows until then, never none; removed by a later ingest.
    replaces: list[str] = field(default_factory=list)
    # (inode, size, mtime in ns) before it was hashed: a file changed while it was read is
    # rejected whole (`changed_under_us`), not half counted.
    stamp: tuple[int, int, int] | None = None


@dataclass
class IngestResult:
    files: list[FileResult] = field(default_factory=list)

    def total(self, attr: str) -> int:
        return sum(getattr(f, attr) for f in self.files)


@dataclass(frozen=True)
class Task:
    """A share of one source. Exactly one of: a byte range of the file (start/end), a block of
    whole JSONL lines (lines, or `spill`: a file holding them), already-read records (items),
    or the whole file (none set). A HAR's byte range holds whole entries, the first numbered
    first_lineno (from 0)."""

    path: str
    fmt: str
    source_hash: str
    start: int | None = None
    end: int | None = None
    first_lineno: int = 1
    lines: bytes | None = None
    items: list[Record] | None = None
    weight: int = 0  # bytes of the file on disk this task accounts for (progress)
    # A block of lines the parent wrote to a file of its own, for a worker process to map and
    # then delete (`_Pool.run`); lines are numbered from first_lineno, `path` stays the source.
    spill: str | None = None
    stem: str = ""  # the generation its parts are written under (`FileResult.stem`)
    # A HAR range: how many entries the plan counted in it (None: the last range, to the end of
    # the document), and the offsets of their `startedDateTime` keys (`sources.har.iter_range`).
    entries: int | None = None
    anchors: array[int] | None = None


@dataclass(frozen=True)
class Options:
    keep_content: bool = True
    providers_file: str | None = None
    workers: int = 1  # processes sharing the memory budget (see SEGMENTS_ALL_WORKERS)
    max_record_bytes: int = MAX_RECORD_BYTES  # a longer line is one reject (`too_long`)

    @property
    def flush_segments(self) -> int:
        return max(10_000, SEGMENTS_ALL_WORKERS // max(1, self.workers))


Counts = tuple[int, int, int, int]  # records, accepted, rejected, skipped
Manifest = dict[str, tuple[str, dict[str, Any]]]  # `Warehouse.manifest_index`


def hash_file(path: Path) -> str:
    return hash_and_size(path)[0]


def hash_and_size(path: Path) -> tuple[str, int]:
    """xxh3-128 of the file's bytes and how many bytes that was: a file that grows while it is
    read (a capture still being written) is ingested up to exactly what was hashed."""
    h = xxhash.xxh3_128()
    with path.open("rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        for _, window in _windows(fh.fileno(), 0, size):
            with window, memoryview(window) as view:
                h.update(view)
    return h.hexdigest(), size


def _windows(fd: int, start: int, end: int) -> Iterator[tuple[int, mmap.mmap]]:
    """(offset, mapping) covering bytes [start, end) of a file in windows of about HASH_BLOCK.

    Mapped, not read: no copy through a buffer (reading cost 2-3x the hashing itself). Each
    window is unmapped by the caller before the next is mapped, so the file's pages never count
    towards this process's memory beyond one window."""
    pos = start - start % mmap.ALLOCATIONGRANULARITY
    while pos < end:
        # A file cut short since: no window past its end (mapping one fails; one mapped before
        # the cut kills the process when touched). The ingest then rejects the file.
        end = min(end, os.fstat(fd).st_size)
        if pos >= end:
            return
        length = min(HASH_BLOCK, end - pos)
        yield pos, mmap.mmap(fd, length, offset=pos, access=mmap.ACCESS_READ)
        pos += length


# --- planning: files -> tasks -------------------------------------------------------------


def count_lines(data: bytes | mmap.mmap, start: int, end: int) -> int:
    """Newlines in data[start:end] (bytes or mmap). Capture lines are tens of KB, so jumping from
    newline to newline with find (memchr) is ~10x faster than bytes.count; a run of short lines
    switches to one bulk count."""
    count, pos = 0, start
    while pos < end:
        nl = data.find(b"\n", pos, end)
        if nl < 0:
            break
        count += 1
        pos = nl + 1
        if count == 64 and pos - start < 64 * 2048:
            return count + data[pos:end].count(b"\n")
    return count


def split_ranges(path: Path, size: int) -> list[tuple[int, int, int]]:
    """(start, end, first line number) ranges of about CHUNK_BYTES, cut after a newline."""
    return list(iter_ranges(path, size))


def iter_ranges(path: Path, size: int) -> Iterator[tuple[int, int, int]]:
    """`split_ranges`, lazily: each range's first line number is counted only when the range
    before it is handed out, so counting overlaps the workers' start instead of delaying it."""
    if size <= CHUNK_BYTES // TAIL_SPLIT:
        yield 0, size, 1
        return
    with path.open("rb") as fh:
        fd = fh.fileno()
        start, lineno = 0, 1
        while start < size:
            end = min(start + _range_bytes(size - start), size)
            if end < size:
                end = _next_line_start(fd, end, size)
            yield start, end, lineno
            for offset, window in _windows(fd, start, end):
                with window:
                    lo = max(start - offset, 0)
                    lineno += count_lines(window, lo, min(end - offset, len(window)))
            start = end


def _range_bytes(remaining: int) -> int:
    """How much of the rest of a file the next range takes: CHUNK_BYTES, but the last two
    chunks' worth in quarters (at least CHUNK_BYTES / TAIL_SPLIT each). The workers end
    together instead of all but one waiting while the last takes a whole chunk (~0.3 s), and a
    file smaller than a chunk is still read by every core."""
    if remaining >= 2 * CHUNK_BYTES:
        return CHUNK_BYTES
    return max(CHUNK_BYTES // TAIL_SPLIT, remaining // 4)


def _next_line_start(fd: int, pos: int, size: int) -> int:
    """Offset just past the next newline at or after `pos`, never past `size`: the file may
    have grown since it was hashed, and only the hashed bytes are ingested."""
    while pos < size:
        block = os.pread(fd, min(1024 * 1024, size - pos), pos)
        if not block:
            break
        nl = block.find(b"\n")
        if nl >= 0:
            return pos + nl + 1
        pos += len(block)
    return size


def _line_blocks(
    path: Path, fmt: str, digest: str, limit: int = MAX_RECORD_BYTES
) -> Iterator[Task]:
    """Blocks of whole lines from a compressed file, decompressed once, in order. A line longer
    than `limit` is read past in blocks, never held, and is one reject (`too_long`)."""
    stream, raw = open_counted(path)
    with stream:
        lineno, carry, consumed = 1, b"", 0
        long_head: bytes | None = None  # the start of a line too long to keep, being read past
        long_size = 0
        held: list[bytes] = []  # blocks of a line longer than a block, after `carry`
        held_size = 0
        while True:
            block = stream.read(BATCH_BYTES)
            if not block:
                if long_head is not None:
                    yield _too_long_task(path, fmt, digest, lineno, long_head, long_size, limit)
                    lineno += 1
                elif carry or held:
                    last = carry + b"".join(held)
                    yield Task(str(path), fmt, digest, first_lineno=lineno, lines=last,
                               weight=raw.tell() - consumed)  # fmt: skip
                    lineno += 1
                damage = damage_of(stream)
                if damage is not None:
                    yield _damage_task(path, fmt, digest, lineno, damage)
                return
            if long_head is not None:
                nl = block.find(b"\n")
                if nl < 0:
                    long_size += len(block)
                    continue
                long_size += nl + 1
                yield _too_long_task(path, fmt, digest, lineno, long_head, long_size, limit)
                lineno += 1
                long_head = None
                block = block[nl + 1 :]
                if not block:
                    continue
            cut = block.rfind(b"\n") + 1
            if cut == 0:
                # One line longer than a block: keep reading, joined once its end is found
                # (adding block by block copied the line once per block).
                held.append(block)
                held_size += len(block)
                if len(carry) + held_size > limit:
                    long_head = (carry + b"".join(b[:400] for b in held[:400]))[:400]
                    long_size = len(carry) + held_size
                    carry, held, held_size = b"", [], 0
                continue
            if held:
                carry += b"".join(held)
                held, held_size = [], 0
            lines = carry + block[:cut] if carry else block[:cut] if cut < len(block) else block
            carry = block[cut:]
            position = raw.tell()
            yield Task(str(path), fmt, digest, first_lineno=lineno, lines=lines,
                       weight=position - consumed)  # fmt: skip
            consumed = position
            lineno += count_lines(lines, 0, len(lines))


def _too_long_task(
    path: Path, fmt: str, digest: str, lineno: int, head: bytes, size: int, limit: int
) -> Task:
    index = lineno * SPAN_INDEX_STRIDE if fmt == "otlp_json" else lineno
    reject = Reject(str(path), index, too_long(size, limit), redact_excerpt(head))
    return Task(str(path), fmt, digest, items=[reject])


def _damage_task(path: Path, fmt: str, digest: str, lineno: int, damage: str) -> Task:
    """One reject for the part of a damaged compressed file that could not be read, at the
    line (or entry) after the last one read: the records before it land as usual."""
    index = lineno * SPAN_INDEX_STRIDE if fmt == "otlp_json" else lineno
    print(f"{path}: {damage}; the records before it are kept", file=sys.stderr)
    return Task(str(path), fmt, digest, items=[Reject(str(path), index, damage, "")])


def _har_batches(path: Path, digest: str) -> Iterator[Task]:
    """Batches of read HAR entries, about BATCH_BYTES of bodies each, in order."""
    from pipeline.sources.har import iter_entries, read_entry

    stream, raw = open_counted(path)
    source = str(path)
    with stream:
        batch: list[Record] = []
        size, consumed, after = 0, 0, 0
        try:
            for index, entry in iter_entries(stream):
                item = read_entry(entry, source, index)
                after = index + 1
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
        damage = damage_of(stream)
        if damage is not None:
            yield _damage_task(path, "har", digest, after, damage)


def _har_ranges(path: Path, digest: str, size: int) -> Iterator[Task]:
    """Byte ranges of whole entries of an uncompressed HAR, about CHUNK_BYTES each (smaller at
    the end, as `_range_bytes` says), for workers to read. Each range ends where an entry starts
    (`har.entry_start_after`) and counts its entries by their `startedDateTime` keys, which
    numbers the first entry of the next; the worker checks both (`har.iter_range`). The last
    range runs to the end of the file: the `]` closing the entries, or where the file ends."""
    from pipeline.sources.har import entries_offset, entry_start_after, find_anchors

    source = str(path)
    with path.open("rb") as fh:
        try:
            start = entries_offset(fh)
        except InputError as exc:
            raise InputError(f"{path}: {exc.message}", hint=exc.hint) from None
        fd = fh.fileno()
        index = done = 0
        while True:
            cut = None
            if size - start > CHUNK_BYTES // TAIL_SPLIT:
                want = start + _range_bytes(size - start)
                cut = entry_start_after(fd, want, size) if want < size else None
            end = size if cut is None else cut
            anchors = find_anchors(fd, start, end)
            counted = None if cut is None else len(anchors)
            yield Task(source, "har", digest, start=start, end=end, first_lineno=index,
                       weight=end - done, entries=counted, anchors=anchors)  # fmt: skip
            if cut is None:
                return
            index += len(anchors)
            start = done = cut


def plan(
    path: Path, fmt: str, digest: str, size: int, max_record: int = MAX_RECORD_BYTES
) -> Iterator[Task]:
    if fmt == "har":
        if compression_of(path) is not None:
            return _har_batches(path, digest)
        return _har_ranges(path, digest, size)
    if fmt in LINE_FORMATS:
        if compression_of(path) is not None:
            return _line_blocks(path, fmt, digest, max_record)
        return (
            Task(str(path), fmt, digest, start=s, end=e, first_lineno=ln, weight=e - s)
            for s, e, ln in iter_ranges(path, size)
        )
    return iter([Task(str(path), fmt, digest, weight=size)])


# --- work: tasks -> rows -> parts -----------------------------------------------------------


class _DaySegments:
    """One day's segment columns in compact form: a request index per segment instead of its id,
    machine ints, and the digests as one byte string each, hex-encoded in one call at write."""

    __slots__ = (
        "digests",
        "kind",
        "position",
        "prefixes",
        "request_ids",
        "request_of",
        "role",
        "sizes",
    )

    def __init__(self) -> None:
        self.request_ids: list[str] = []
        self.request_of = array("i")
        self.position = array("i")
        self.kind: list[str] = []
        self.role: list[str | None] = []
        self.digests = bytearray()
        self.prefixes = bytearray()
        self.sizes = array("i")

    def add(self, request_id: str, norm: Normalised) -> None:
        n = len(norm.data)
        # Array repetition and slicing run in C; extending from an iterator costs per item.
        self.request_of += array("i", (len(self.request_ids),)) * n
        self.request_ids.append(request_id)
        self.position += _POSITIONS[:n] if n <= len(_POSITIONS) else array("i", range(n))
        self.kind.extend(norm.kinds)
        self.role.extend(norm.roles)
        self.digests += b"".join(norm.digests)
        self.prefixes += b"".join(norm.prefix_digests)
        self.sizes.extend(map(len, norm.data))

    def __len__(self) -> int:
        return len(self.kind)

    def table(self) -> pa.Table:
        n = len(self.kind)
        ids = pa.array(self.request_ids, pa.string()).take(_int32_column(self.request_of))
        columns = {
            "request_id": ids,
            "position": _int32_column(self.position),
            "kind": pa.array(self.kind, pa.string()),
            "role": pa.array(self.role, pa.string()),
            "segment_hash": _hex_column(self.digests, n),
            "prefix_hash": _hex_column(self.prefixes, n),
            "bytes": _int32_column(self.sizes),
        }
        return pa.Table.from_pydict(columns, schema=schema.load("segments").arrow())


_POSITIONS = array("i", range(4096))  # positions 0..4095, sliced for each request's segments


def _int32_column(values: array[int]) -> pa.Array:
    """An array('i') as an Arrow int32 array over the same memory (pa.array would convert each
    item, ~100 ns apiece). The array must not change afterwards: it is dropped after the write."""
    if values.itemsize != 4:  # pragma: no cover - C int is 32 bits on every platform we run on
        return pa.array(values, pa.int32())
    return pa.Array.from_buffers(pa.int32(), len(values), [None, pa.py_buffer(values)])


def _hex_column(digests: bytearray, n: int) -> pa.Array:
    """n 16-byte digests as 32-character hex strings, built from buffers (no object per row).

    hexlify gives the ASCII bytes in one pass (hex() then encode() made a str and copied it),
    and the offsets (0, 32, 64, ...) are a slice of one shared buffer: 5x faster in all."""
    data = pa.py_buffer(binascii.hexlify(digests))
    return pa.Array.from_buffers(pa.string(), n, [None, _hex_offsets(n), data])


_HEX_OFFSETS = array("i")  # 0, 32, 64, ...: replaced by a longer one when needed, never changed


def _hex_offsets(n: int) -> pa.Buffer:
    """The n + 1 offsets of n 32-byte strings, as a zero-copy slice of a shared buffer (an array
    built from them keeps the buffer it was sliced from alive)."""
    global _HEX_OFFSETS
    if len(_HEX_OFFSETS) <= n:
        _HEX_OFFSETS = array("i", range(0, 32 * (2 * n + 1) + 1, 32))
    return pa.py_buffer(_HEX_OFFSETS)[: 4 * (n + 1)]


class _Buffers:
    """Column buffers for one source in one process, kept per UTC day (the partition), written
    as parts when they grow: one file per table and day, with no filtering by day at write."""

    def __init__(
        self, wh: Warehouse, key: str, worker: int, keep_content: bool, flush_segments: int
    ) -> None:
        self.wh, self.key, self.worker, self.keep_content = wh, key, worker, keep_content
        self.flush_segments = flush_segments
        self.flushes = 0
        self.seen_content: set[bytes] = set()
        self.request_names = [n for n in schema.load("requests").names if n != "day"]
        # A row's values in column order, in one C call; columns are formed at flush.
        self.row_values = operator.itemgetter(*self.request_names)
        self.rejects_names = schema.load("rejects").names
        self._reset()

    def _reset(self) -> None:
        # None: the rows whose start is unknown (a cassette without a Date header)
        self.requests: dict[date | None, list[tuple[Any, ...]]] = {}
        self.segments: dict[date | None, _DaySegments] = {}
        self.content: dict[str, list[Any]] = {"segment_hash": [], "bytes": [], "content": []}
        self.rejects: dict[str, list[Any]] = {n: [] for n in self.rejects_names}
        self.request_count = self.segment_count = self.content_bytes = 0
        # Rows of the next part per fallback id base (`fallback_base`): numbers the exchanges of
        # identical content, so that ids are unique within a part (see `fallback_id`).
        self.occurrences: dict[str, int] = {}

    def add(self, norm: Normalised) -> None:
        row = norm.row
        started = row["started_at"]
        day = started.date() if started is not None else None
        requests = self.requests.get(day)
        if requests is None:
            requests = self.requests[day] = []
            self.segments[day] = _DaySegments()
        try:
            requests.append(self.row_values(row))
        except KeyError:  # a column the row does not have is NULL
            requests.append(tuple(row.get(name) for name in self.request_names))
        self.request_count += 1
        if norm.data:
            self.segments[day].add(row["request_id"], norm)
            self.segment_count += len(norm.data)
            if self.keep_content:
                self._add_content(norm.digests, norm.data)
        if (
            self.segment_count >= self.flush_segments
            or self.request_count >= FLUSH_REQUESTS
            or self.content_bytes >= FLUSH_CONTENT_BYTES
        ):
            self.flush()

    def _add_content(self, digests: list[bytes], data: list[bytes]) -> None:
        seen = self.seen_content
        if len(seen) > SEEN_CONTENT_MAX:
            seen.clear()  # bounded memory; a repeat costs a duplicate row, which views drop
        for digest, blob in zip(digests, data, strict=True):
            if digest in seen:
                continue
            seen.add(digest)
            self.content["segment_hash"].append(digest.hex())
            self.content["bytes"].append(len(blob))
            self.content["content"].append(blob.decode("utf-8", "replace"))
            self.content_bytes += len(blob)

    def reject(self, rej: Reject, now: datetime) -> None:
        self.rejects["source"].append(rej.source)
        self.rejects["source_index"].append(rej.index)
        # reasons and excerpts quote the input: a key in it is masked on the way to the disk
        self.rejects["reason"].append(redact_text(rej.reason)[:500])
        self.rejects["excerpt"].append(redact_text(rej.excerpt) if rej.excerpt else rej.excerpt)
        self.rejects["ingested_at"].append(now)

    def flush(self) -> None:
        part = f"{self.worker:02d}-{self.flushes:05d}"
        for day, rows in self.requests.items():
            columns = dict(zip(self.request_names, map(list, zip(*rows, strict=True)), strict=True))
            self.wh.write_partition("requests", columns, self.key, part, day)
            if len(self.segments[day]):
                self.wh.write_table("segments", self.segments[day].table(), self.key, part, day)
        # Prompt text is stored for excerpts: a key in it (pasted into a prompt, a tool's
        # credential argument) is masked here, after hashing, so prefixes compare as sent.
        self.content["content"] = mask_texts(self.content["content"])
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
        # Sources read whole in one task (a cassette, a small file): no more rows will come.
        self.finished: set[str] = set()
        # Which --providers entries matched the host of some record (a warning names the rest).
        self.matched_rules: set[int] = set()
        self._rule_of_host: dict[str, int | None] = {}

    def _records(self, task: Task) -> Iterable[Record]:
        if task.items is not None:
            return task.items
        limit = self.options.max_record_bytes
        if task.spill is not None:
            return _spilled_records(task, limit)
        if task.lines is not None:
            return _line_records(task, io.BytesIO(task.lines), limit)
        if task.start is not None and task.end is not None:
            if task.fmt == "har":
                return _har_range_records(task)
            from pipeline.sources.capture import iter_line_range

            lines = iter_line_range(Path(task.path), task.start, task.end, limit)
            return _line_records(task, lines, limit)
        records: Iterable[Record] = iter_source(Path(task.path), task.fmt)  # type: ignore[assignment]
        return records

    def run(self, task: Task) -> Counts:
        key = task.stem or source_key(task.source_hash)
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
            if self.rules and item.span is None:
                self._note_rule(item.url)
            base = None if item.record_id else fallback_base(item)
            if base is None:
                request_id = str(item.record_id)
            else:
                request_id = fallback_id(item, buffers.occurrences.get(base, 0), base)
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
            if base is not None:
                buffers.occurrences[base] = buffers.occurrences.get(base, 0) + 1
            buffers.add(norm)
            accepted += 1
        whole = task.items is None and task.lines is None and task.spill is None
        if whole and task.start is None:
            self.finished.add(key)
        self._bound()
        return records, accepted, rejected, skipped

    def _bound(self) -> None:
        """Keep what all sources buffer together within one source's budget: a directory of
        many small files (test-suite cassettes) would otherwise hold every file's rows until
        `finish`, each below the flush threshold on its own. Over the budget, every buffer is
        written, and those of sources read to the end are dropped (their remembered content
        hashes too)."""
        if len(self.buffers) < 2:
            return
        values = self.buffers.values()
        if (
            sum(b.segment_count for b in values) < self.options.flush_segments
            and sum(b.request_count for b in values) < FLUSH_REQUESTS
            and sum(b.content_bytes for b in values) < FLUSH_CONTENT_BYTES
        ):
            return
        for key, buffers in list(self.buffers.items()):
            buffers.flush()
            if key in self.finished:
                del self.buffers[key]

    def _note_rule(self, url: str) -> None:
        netloc = urlsplit(url).netloc.rpartition("@")[2]
        if netloc not in self._rule_of_host:
            assert self.rules is not None
            self._rule_of_host[netloc] = providers.matching_rule(netloc, self.rules)
        index = self._rule_of_host[netloc]
        if index is not None:
            self.matched_rules.add(index)

    def finish(self) -> None:
        for buffers in self.buffers.values():
            buffers.flush()
        self.buffers.clear()


def fallback_base(item: Exchange) -> str:
    """What identifies a record that has no id (HAR entries, capture records written without
    one), not where it is in its file: `x<hash>` of when and what was asked (start time, method,
    URL, request body), then `-<hash>` of the response's own id when its body names one
    (`response_identity`). Two calls with the same request at the same instant are two
    exchanges when the provider answered them with two completions.

    Not the response's bytes: two exports of one session can hold the same exchange with its
    response cut in one of them (taken while it was still streaming), and it must still be
    recognised as the same; a cut stream names its completion in its first event. An export
    saved without content names none: `dedupe` matches it to any copy of the same request."""
    h = xxhash.xxh3_64()
    when = item.started_at.isoformat() if item.started_at is not None else "unknown"
    h.update(f"{when} {item.method} {item.url}\n".encode())
    h.update(item.request_body)
    identity = response_identity(item.response_body)
    if identity is None:
        return f"x{h.hexdigest()}"
    return f"x{h.hexdigest()}-{xxhash.xxh3_64_hexdigest(identity)[:8]}"


# The first `"id"` (OpenAI, Anthropic, Responses, most compatible APIs: the completion's id, in
# a stream's first event too) or `"responseId"` (Gemini) string in the head of a response body.
_RESPONSE_ID = re.compile(rb'"(?:id|responseId)"\s*:\s*"((?:[^"\\]|\\.){1,256})"')
RESPONSE_ID_HEAD = 16 * 1024


def response_identity(body: bytes) -> bytes | None:
    """The id the provider gave this response, or None when its head names none (an error, a
    body not kept). Only records without an id of their own pay for this search."""
    match = _RESPONSE_ID.search(body, 0, RESPONSE_ID_HEAD) if body else None
    return match.group(1) if match else None


def fallback_id(item: Exchange, occurrence: int = 0, base: str | None = None) -> str:
    """The id of a record that has none: `fallback_base` and which exchange of that content in
    its file this is (0, 1, ... in file order), so that the same traffic keeps its ids in a renamed
    or compressed copy and in another export that overlaps this one (pipeline.dedupe then drops
    it), while two identical requests sent at the same instant stay two rows.

    A worker numbers only the exchanges it reads, so it sees part of a file: `dedupe` renumbers
    the new rows in file order (by source_index) whenever a file holds repeated content."""
    return f"{base or fallback_base(item)}:{occurrence}"


def _line_records(task: Task, lines: Iterable[bytes], limit: int) -> Iterator[Record]:
    """The records of a block of the task's lines, read as lines of its format; a line longer
    than `limit` is one reject."""
    if task.fmt == "otlp_json":
        from pipeline.sources.otlp import iter_otlp_lines

        return iter_otlp_lines(lines, task.path, task.first_lineno, limit)
    from pipeline.sources.capture import iter_capture_lines

    return iter_capture_lines(lines, task.path, task.first_lineno, limit)


def _har_range_records(task: Task) -> Iterator[Record]:
    """The entries of a HAR's byte range, read by this process (`har.iter_range`)."""
    from pipeline.sources.har import iter_range, read_entry

    assert task.start is not None and task.end is not None
    entries = iter_range(
        Path(task.path), task.start, task.end, task.first_lineno, task.entries, task.anchors or ()
    )
    return (read_entry(entry, task.path, index) for index, entry in entries)


def _spilled_records(task: Task, limit: int) -> Iterator[Record]:
    """The records of a block of lines the parent spilled to a file; the file is removed once
    read (the parent removes what a failed worker left)."""
    from pipeline.sources.capture import iter_line_range

    assert task.spill is not None
    spill = Path(task.spill)
    try:
        yield from _line_records(task, iter_line_range(spill, 0, spill.stat().st_size), limit)
    finally:
        spill.unlink(missing_ok=True)


def unreadable_reason(exc: OSError) -> str:
    """Why a worker could not read its share of a file (deleted or cut under it)."""
    return f"could not be read to the end while it was being ingested: {exc.strerror or exc}"


def _tune_gc() -> None:
    # Rows are built from many short-lived containers; the default gen-0 threshold (700) makes
    # the collector walk the growing buffers again and again. Nothing here makes cycles.
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)


PARENT_POLL_SECONDS = 1.0  # how often an idle worker checks that its ingest still runs


class _ParentWatch:
    """Whether the ingest process that started a worker still runs. The worker's own parent is
    the fork server, which lives on while any worker does, so a killed ingest (SIGTERM from
    `timeout` or a CI cancel, SIGKILL, the OOM killer) would leave its workers waiting for tasks
    for ever. Watched through a pidfd where there is one (it names that process, not a number
    the system may give to another), else by sending it signal 0."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.fd: int | None = None
        self.gone = False
        pidfd_open = getattr(os, "pidfd_open", None)
        if pidfd_open is not None:
            try:
                self.fd = pidfd_open(pid)
            except ProcessLookupError:
                self.gone = True
            except OSError:
                pass  # no pidfd support in this kernel: signal 0 below

    def alive(self) -> bool:
        if self.gone:
            return False
        if self.fd is not None:
            readable, _, _ = select.select([self.fd], [], [], 0)
            self.gone = bool(readable)  # a pidfd becomes readable when the process exits
        else:
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                self.gone = True
            except PermissionError:
                pass  # it exists (as another user: a reused pid, but it cannot be ours)
        return not self.gone


def _next_task(tasks: Any, parent: _ParentWatch) -> Task | None:
    """The next task from the queue, None at its end; exits the process at once (nothing
    flushed: the parts would be orphans anyway, which the next ingest removes) when the ingest
    that handed out the tasks is gone."""
    while True:
        try:
            task: Task | None = tasks.get(timeout=PARENT_POLL_SECONDS)
        except queue.Empty:
            task = None
            if parent.alive():
                continue
        if not parent.alive():
            if task is not None and task.spill is not None:
                Path(task.spill).unlink(missing_ok=True)
            os._exit(1)
        return task


def _worker_main(
    worker_id: int, root: str, options: Options, tasks: Any, results: Any, parent_pid: int
) -> None:  # pragma: no cover - runs in a child process; covered through ingest()
    _tune_gc()
    # Ctrl-C is the ingest process's to handle (it stops the workers); a worker that raised
    # KeyboardInterrupt itself would report a traceback as its failure.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = _ParentWatch(parent_pid)
    try:
        worker = Worker(root, options, worker_id)
        while (task := _next_task(tasks, parent)) is not None:
            try:
                results.put(("done", task.source_hash, task.weight, worker.run(task)))
            except RangeMismatch:  # the parent reads that HAR again (`_read_again`)
                results.put(("again", task.source_hash, task.weight, None))
            except OSError as exc:  # its file went away or changed: that file is rejected
                results.put(("failed", task.source_hash, task.weight, unreadable_reason(exc)))
        worker.finish()
        results.put(("exit", worker_id, 0, sorted(worker.matched_rules)))
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
        self.matched_rules: set[int] = set()  # --providers entries some record's host matched
        self.failed: dict[str, str] = {}  # sources a worker could not read to the end: why
        self.again: set[str] = set()  # HARs whose ranges did not hold what was counted

    def fail(self, digest: str, weight: int, reason: str) -> None:
        self.failed.setdefault(digest, reason)
        self.done += weight

    def read_again(self, digest: str, weight: int) -> None:
        self.again.add(digest)
        self.done += weight

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
            try:
                run.apply(task.source_hash, task.weight, worker.run(task))
            except RangeMismatch:
                run.read_again(task.source_hash, task.weight)
            except OSError as exc:
                run.fail(task.source_hash, task.weight, unreadable_reason(exc))
        worker.finish()
        run.matched_rules |= worker.matched_rules
    finally:
        gc.set_threshold(*thresholds)


# Modules a worker needs, imported once in the fork server rather than in every worker.
# pyarrow.compute: `Array.take` imports it when a part is written (30 ms, once here).
_WORKER_MODULES = [
    "pipeline.ingest",
    "pipeline.sources.capture",
    "pipeline.sources.har",
    "pipeline.sources.otlp",
    "pyarrow.compute",
]


PIPE_BYTES = 1024 * 1024  # Linux's limit for an unprivileged process (fs.pipe-max-size)


def _widen_pipe(q: Any) -> None:
    """Give a task queue's pipe PIPE_BYTES instead of the default 64 KB. A task the parent read
    (decompressed lines, HAR entries) is megabytes: through 64 KB every one costs hundreds of
    writes, reads and wake-ups, which measured 2.5x the CPU of the hand-off itself (0.5 s per
    110 MB between parent and worker, against 0.2 s with 1 MB). Where the pipe cannot be
    resized (not Linux, a lower limit) it stays as it is: slower, not wrong."""
    set_size = getattr(fcntl, "F_SETPIPE_SZ", None)
    writer = getattr(q, "_writer", None)  # multiprocessing.Queue's sending Connection
    if set_size is None or writer is None:
        return
    with contextlib.suppress(OSError, ValueError):
        fcntl.fcntl(writer.fileno(), set_size, PIPE_BYTES)


# This process's scratch folder in the temporary directory: the spill files of decompressed
# lines (`_Pool._spill`) and multiprocessing's own folder (the fork server's socket) live in it.
# Its name carries the owning pid, so the next ingest removes the folders of killed ingests
# (`remove_stale_scratch`), and only those: ours, of processes that are gone.
SCRATCH_PREFIX = "cacheaudit-ingest-"
SOCKET_FOLDER_MAX = 80  # + "/listener-xxxxxxxx" stays within a Unix socket address
LEGACY_SCRATCH_AGE_S = 24 * 3600  # folders named before they carried a pid: this old, removed
_scratch: str | None = None


def scratch_dir() -> str:
    """This process's scratch folder, made on first use and removed when the process exits."""
    global _scratch
    if _scratch is None or not Path(_scratch).is_dir():
        _scratch = tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-")
        atexit.register(shutil.rmtree, _scratch, True)
    return _scratch


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: not one of ours, but its folder is not ours either
    return True


def remove_stale_scratch() -> int:
    """Remove the scratch folders that ingests killed before their exit handlers ran left in
    the temporary directory (spill files of megabytes each, the fork server's socket): those
    whose owning process is gone. Returns how many were removed."""
    removed = 0
    try:
        folders = list(Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*"))
    except OSError:
        return 0
    for folder in folders:
        owner = folder.name[len(SCRATCH_PREFIX) :].split("-", 1)[0]
        try:
            if owner.isdigit() and "-" in folder.name[len(SCRATCH_PREFIX) :]:
                if int(owner) == os.getpid() or _pid_alive(int(owner)):
                    continue
            elif time.time() - folder.stat().st_mtime < LEGACY_SCRATCH_AGE_S:
                continue
        except OSError:
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed += not folder.exists()
    return removed


def _start_forkserver_without_ctrl_c() -> None:
    """Start the fork server (if it is not running) with SIGINT blocked. It imports the
    workers' modules before it ignores SIGINT itself, so a Ctrl-C in that first second killed
    it and the workers could not start ("can only join a started process"). A blocked signal
    stays blocked in it and in the workers it forks: a Ctrl-C reaches the ingest process alone,
    which stops them, and one that came meanwhile is delivered here when unblocked."""
    if threading.current_thread() is not threading.main_thread():
        return  # the mask is per thread; starting from the worker thread is as before
    from multiprocessing import forkserver

    # multiprocessing's folder (it holds the fork server's socket) inside ours, so that a
    # killed ingest leaves no `pymp-*` folder of its own that nothing removes.
    # Not when the socket's path would pass the 107 bytes a Unix socket address may have.
    config = getattr(mp.current_process(), "_config", None)
    if isinstance(config, dict) and "tempdir" not in config:
        with contextlib.suppress(OSError):
            folder = scratch_dir()
            if len(os.fsencode(folder)) <= SOCKET_FOLDER_MAX:
                config["tempdir"] = folder
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


class _Pool:
    """Worker processes, started before the inputs are hashed and planned so that their start-up
    (a fresh interpreter importing pyarrow, ~0.4 s) overlaps that work instead of following it."""

    def __init__(self, root: str, options: Options, n_workers: int) -> None:
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(_WORKER_MODULES)
        self.n_workers = n_workers
        self.task_q: Any = ctx.Queue(maxsize=n_workers)
        _widen_pipe(self.task_q)
        self.result_q: Any = ctx.Queue()
        self.procs = [
            ctx.Process(
                target=_worker_main,
                args=(i, root, options, self.task_q, self.result_q, os.getpid()),
                daemon=True,
            )
            for i in range(n_workers)
        ]
        self.exited = 0
        self.spill_dir: str | None = None  # blocks of lines handed to workers as files
        self.spilled = 0
        self.start_error: BaseException | None = None
        self.closing = False
        # Set when the starter thread is done. Waited on instead of joining the thread: a
        # Ctrl-C that interrupts Thread.join marks a running thread as finished (CPython 3.11),
        # so a later join returned while a worker was still starting, and the ingest exited
        # under it (a traceback from the half-started worker).
        self.started = threading.Event()
        # Starting the first worker waits for the fork server to import its modules: done on a
        # thread (`start`), so the caller hashes and plans meanwhile.
        self.starter = threading.Thread(target=self._start, daemon=True)

    def start(self) -> None:
        """Start the workers, in the background. Separate from creating the pool so that the
        caller holds it, to `close` it, before any process exists: a Ctrl-C in between left a
        worker starting after the ingest had exited, and it failed with a traceback."""
        _start_forkserver_without_ctrl_c()
        self.starter.start()

    def _start(self) -> None:
        try:
            for p in self.procs:
                if self.closing:
                    return
                p.start()
        except BaseException as exc:  # the fork server died: `run` reports it
            self.start_error = exc
        finally:
            self.started.set()

    def _drain(self, run: _Run, block: bool) -> None:
        while True:
            try:
                kind, ident, weight, payload = self.result_q.get(timeout=0.2 if block else 0.0)
            except queue.Empty:
                dead = [p for p in self.procs if p.exitcode not in (None, 0)]
                if dead:
                    code = dead[0].exitcode
                    why = (
                        ": an input file was cut short while it was read (SIGBUS); nothing of"
                        " this batch was written, ingest it again"
                        if code == -signal.SIGBUS
                        else ""
                    )
                    raise PipelineError(f"an ingest worker died (exit code {code}){why}") from None
                return
            if kind == "done":
                run.apply(ident, weight, payload)
            elif kind == "failed":
                run.fail(ident, weight, payload)
            elif kind == "again":
                run.read_again(ident, weight)
            elif kind == "exit":
                self.exited += 1
                run.matched_rules.update(payload or ())
            else:
                raise PipelineError(f"ingest worker failed: {payload}")
            block = False

    def run(self, tasks: Iterator[Task], run: _Run) -> None:
        self.started.wait()
        if self.start_error is not None:
            raise PipelineError(f"could not start the ingest workers: {self.start_error!r}")
        for task in tasks:
            if task.lines is not None:
                task = self._spill(task)
            while True:
                try:
                    self.task_q.put(task, timeout=0.2)
                    break
                except queue.Full:
                    self._drain(run, block=False)
            self._drain(run, block=False)
        for _ in self.procs:
            self.task_q.put(None)
        while self.exited < self.n_workers:
            self._drain(run, block=True)

    def _spill(self, task: Task) -> Task:
        """A block of lines (decompressed by the parent) as a file the worker maps, not bytes
        through the pipe: pickling, sending and unpickling 8 MB copied it four times and cost
        the parent and the worker 0.2 s per 110 MB, a write and a mapping ~0.05 s. At most
        the queued and in-flight blocks exist at a time; each worker deletes its own."""
        try:
            if self.spill_dir is None:
                self.spill_dir = tempfile.mkdtemp(prefix="spill-", dir=scratch_dir())
            self.spilled += 1
            spill = Path(self.spill_dir) / f"{self.spilled:08d}.block"
            spill.write_bytes(task.lines or b"")
        except OSError:  # no writable temporary directory, or it is full: the pipe still works
            return task
        return dataclasses.replace(task, lines=None, spill=str(spill))

    def close(self) -> None:
        self.closing = True
        if self.starter.ident is not None:
            self.started.wait()
        for p in self.procs:
            if p.pid is None:
                continue  # never started (the start failed, or was interrupted)
            if p.is_alive() and self.exited < self.n_workers:
                p.terminate()
            p.join()
        if self.spill_dir is not None:
            shutil.rmtree(self.spill_dir, ignore_errors=True)


def _work_estimate(path: Path) -> int:
    """Bytes of content a file holds, roughly: a compressed capture holds several times its size
    (a 5 MB zstd file of 250 MB of traffic must not be ingested on one core)."""
    try:
        size = path.stat().st_size if path.is_file() else 0
        return size * COMPRESSION_GUESS if size and compression_of(path) else size
    except OSError:
        return 0


def resolved_path(path: Path | str) -> str:
    """The file's absolute path with symlinks resolved: the same for every working directory
    and every way of naming it (the manifest keeps it beside the path as given)."""
    try:
        return str(Path(path).resolve())
    except (OSError, RuntimeError):  # a symlink loop: as absolute as it gets
        return str(Path(path).absolute())


def _same_file(row: dict[str, Any], path: Path) -> bool:
    """Whether a manifest row is of this file: by the resolved path recorded at its ingest. A
    row written before that was recorded has only the path as given, resolved here against
    the current directory (right only when that is where it was ingested from)."""
    recorded = row.get("source_path")
    if recorded:
        return str(recorded) == resolved_path(path)
    given = str(row["source"])
    return given == str(path) or resolved_path(given) == resolved_path(path)


def _starts_with(path: Path, size: int, digest: str) -> bool:
    """Whether the file's first `size` bytes hash to `digest`: the content ingested then, since
    grown (a capture still being appended to), not replaced or rotated away."""
    h = xxhash.xxh3_128()
    with path.open("rb") as fh:
        if os.fstat(fh.fileno()).st_size < size:
            return False
        for _, window in _windows(fh.fileno(), 0, size):
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
            and _same_file(row, path)
            and _starts_with(path, int(row["size_bytes"]), old)
        ):
            replaced.append((stem, old))
            print(
                f"{path}: changed since it was ingested ({row['records']} records, "
                f"{row['size_bytes']} bytes); replacing those rows",
                file=sys.stderr,
            )
    return replaced


def ingest(
    paths: list[Path],
    warehouse: Warehouse,
    *,
    force: bool = False,
    keep_content: bool = True,
    workers: int | None = None,
    providers_file: Path | None = None,
    progress: ProgressFn | None = None,
    max_record_bytes: int = MAX_RECORD_BYTES,
) -> IngestResult:
    """Ingest files into the warehouse; `progress(done_bytes, total_bytes)` runs as tasks end.
    A line (capture record, OTLP export) longer than `max_record_bytes` is one reject."""
    if not paths:
        raise InputError("no input files", hint="cacheaudit ingest CAPTURE.jsonl [MORE ...]")
    if providers_file is not None:
        providers.load_user_rules(providers_file)  # fail fast on a bad map, before any work
    # Before the warehouse is touched: a missing file, a pipe, or a single file that is not
    # traffic fails the command without creating a directory.
    formats = detect_formats(paths)
    n_workers = max(1, workers or os.cpu_count() or 1)
    if sum(_work_estimate(p) for p in paths) < PARALLEL_MIN_BYTES:
        n_workers = 1  # worker start-up would cost more than it saves
    if max_record_bytes < 1:
        raise UsageError("--max-record-bytes must be at least 1")
    options = Options(
        keep_content, str(providers_file) if providers_file else None, n_workers, max_record_bytes
    )
    created = _is_new(warehouse)
    with warehouse.lock():
        # Again under the lock: an ingest that failed while this one waited for the lock may
        # have removed the (empty) table directories (`_remove_empty_tables`).
        warehouse.ensure()
        try:
            warehouse.remove_orphans()  # parts of an ingest that crashed before its manifest
            remove_stale_scratch()  # spill folders of ingests that were killed
            pool = _Pool(str(warehouse.root), options, n_workers) if n_workers > 1 else None
            try:
                if pool is not None:
                    pool.start()
                result = _ingest_locked(paths, formats, warehouse, force, options, pool, progress)
            finally:
                if pool is not None:
                    pool.close()
        except BaseException:
            # A first ingest that failed (Ctrl-C, a worker that died) leaves no tables behind
            # that later commands would take for a warehouse holding nothing. Under the lock,
            # and never the directory or its lock file: another ingest may be waiting on it.
            if created and not warehouse.manifest_stems():
                _remove_empty_tables(warehouse)
            raise
    return result


def _is_new(warehouse: Warehouse) -> bool:
    """Whether the warehouse directory is missing, or holds only the lock file that a failed
    first ingest leaves (`_remove_empty_tables`). An empty directory was made by someone else."""
    try:
        return [p.name for p in warehouse.root.iterdir()] == [LOCK_NAME]
    except FileNotFoundError:
        return True
    except OSError:
        return False  # not a directory, unreadable: the lock reports it


def detect_formats(paths: list[Path]) -> list[str | InputError]:
    """Each file's format, or for a file of a batch that is not traffic the error (it becomes
    one reject, `record_unrecognised`). A single file that is not traffic, or a path that is not
    a regular file (missing, a directory, a pipe), fails the whole command."""
    formats: list[str | InputError] = []
    for path in paths:
        try:
            formats.append(detect_format(path))
        except InputError as exc:
            if len(paths) == 1 or not path.is_file():
                raise  # a single named file, or a missing one: the whole command is wrong
            formats.append(exc)
    return formats


def _remove_empty_tables(warehouse: Warehouse) -> None:
    """Remove what a failed first ingest left in a warehouse that holds no source: its parts
    (every part is an orphan then) and the table directories, when empty. The caller holds the
    lock; the directory and its lock file stay: another ingest may have opened the lock file and
    be waiting on it, and removing it would let a third one take a new lock beside that one."""
    with contextlib.suppress(OSError):
        warehouse.remove_orphans()
    for table in TABLES:
        base = warehouse.root / table
        if not base.is_dir():
            continue
        for day in base.glob("*=*"):
            with contextlib.suppress(OSError):
                day.rmdir()  # only if empty
        with contextlib.suppress(OSError):
            base.rmdir()


def _ingest_locked(
    paths: list[Path],
    formats: list[str | InputError],
    warehouse: Warehouse,
    force: bool,
    options: Options,
    pool: _Pool | None,
    progress: ProgressFn | None,
) -> IngestResult:
    """Plan every file and run its tasks, then write the manifest (last, under the lock)."""
    result = IngestResult()
    pending: dict[str, FileResult] = {}
    known = warehouse.manifest_index()  # once: the manifest does not change until the end
    unreadable: dict[str, FileResult] = {}
    plans: list[Iterator[Task]] = []
    failed: dict[str, str] = {}  # sources that could not be read to the end: why
    for path, fmt in zip(paths, formats, strict=True):
        if isinstance(fmt, InputError):
            digest, fr = record_unrecognised(warehouse, known, path, fmt, force)
            result.files.append(fr)
            if fr.status == "ingested":
                unreadable[digest] = fr
            continue
        stamp = file_stamp(path)
        digest, size = hash_and_size(path)
        fr = claim(warehouse, known, pending, path, fmt, digest, size, force)
        result.files.append(fr)
        if fr.status == "unchanged":
            continue
        fr.stamp = stamp
        pending[digest] = fr
        tasks = plan(path, fmt, digest, size, options.max_record_bytes)
        plans.append(with_stem(_guarded(tasks, digest, failed), fr.stem))
    total = sum(fr.size_bytes for fr in pending.values())
    run = _Run(pending, total, progress)
    run.failed = failed
    if progress and total:
        progress(0, total)  # the bar shows the size at once, not when a first task ends
    tasks = (task for p in plans for task in p)
    if pool is None:
        _run_inline(tasks, str(warehouse.root), options, run)
    else:
        pool.run(tasks, run)
    for digest in [d for d in pending if d in run.again and d not in failed]:
        _read_again(warehouse, pending[digest], digest, options, run)
    if progress and total:
        progress(total, total)  # a HAR's tail after log.entries is never read
    for digest, fr in list(pending.items()):
        reason = changed_under_us(fr) or run.failed.get(digest)
        if reason is not None:
            del pending[digest]
            unreadable.update([reject_changed(warehouse, fr, reason)])
    # Imported here: dedupe needs polars, which every worker process would otherwise load
    # at start-up for nothing (about 0.4 s each).
    from pipeline.dedupe import drop_duplicates

    drop_duplicates(warehouse, pending)
    write_manifests(warehouse, pending | unreadable)
    if options.providers_file:
        warn_unmatched_rules(Path(options.providers_file), run.matched_rules, result)
    return result


def _read_again(
    warehouse: Warehouse, fr: FileResult, digest: str, options: Options, run: _Run
) -> None:
    """Read a HAR again as one stream, here, when a range of it did not hold the entries its plan
    counted (`har.RangeMismatch`: a damaged stretch, an entry without `startedDateTime`), so the
    numbers of the entries after it were wrong: the rows its ranges wrote go, under a new
    generation of the same key the stream's rows come, numbered as `har.iter_har` numbers them."""
    warehouse.remove_stem(fr.stem)
    fr.stem = warehouse.new_stem(key_of(fr.stem))
    fr.records = fr.accepted = fr.rejected = fr.skipped = 0
    tasks = _guarded(_har_batches(Path(fr.source), digest), digest, run.failed)
    _run_inline(with_stem(tasks, fr.stem), str(warehouse.root), options, run)


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


def _guarded(tasks: Iterator[Task], digest: str, failed: dict[str, str]) -> Iterator[Task]:
    """A file's tasks, ending early when the file cannot be read to the end (deleted or cut
    short since it was hashed): the file is then rejected (`reject_changed`), the batch goes on."""
    try:
        yield from tasks
    except OSError as exc:
        failed.setdefault(digest, unreadable_reason(exc))


def with_stem(tasks: Iterable[Task], stem: str) -> Iterator[Task]:
    return (dataclasses.replace(task, stem=stem) for task in tasks)


def warn_unmatched_rules(path: Path, matched: set[int], result: IngestResult) -> None:
    """A warning on stderr for each --providers entry no record of this ingest matched: a
    pattern that never matches (a typo, a port the URLs do not carry) otherwise fails silently.
    Files already ingested were not read, so the map was not applied to them either."""
    rules = providers.load_user_rules(path)
    unchanged = sum(1 for f in result.files if f.status == "unchanged")
    if not any(f.status == "ingested" and f.format != "unrecognised" for f in result.files):
        if unchanged and rules:
            print(
                f"note: provider map {path} was not applied: every file was already ingested"
                " (--force re-ingests them with it)",
                file=sys.stderr,
            )
        return
    note = (
        f"; {unchanged} file(s) already ingested were not read again (--force applies the map"
        " to them)"
        if unchanged
        else ""
    )
    for i, rule in enumerate(rules):
        if i not in matched:
            print(
                f"warning: provider map {path}: entry {i + 1} ({rule.describe()}) matched no"
                f" record of this ingest{note}",
                file=sys.stderr,
            )


def file_stamp(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_ino, st.st_size, st.st_mtime_ns


def changed_under_us(fr: FileResult) -> str | None:
    """Why the file's rows cannot be trusted, or None: it was deleted, replaced (another
    inode), cut below what was hashed, or rewritten in place (same size, later mtime) while it
    was read. Growing is fine: a capture being appended to is read up to what was hashed."""
    if fr.stamp is None:
        return None
    inode, size, mtime = fr.stamp
    try:
        now = file_stamp(Path(fr.source))
    except OSError:
        return "deleted while it was being ingested"
    if now[0] != inode:
        return "replaced by another file while it was being ingested"
    if now[1] < fr.size_bytes:
        return (
            f"cut short while it was being ingested ({now[1]} of the {fr.size_bytes} bytes"
            " hashed are left)"
        )
    if now[1] == size and now[2] != mtime:
        return "rewritten while it was being ingested"
    return None


def reject_changed(warehouse: Warehouse, fr: FileResult, reason: str) -> tuple[str, FileResult]:
    """Turn a file that changed under the ingest into one reject with the reason: the rows
    read from it are removed (they may mix two versions, or miss the end), what it would have
    replaced stays, and the rest of the batch lands. Its manifest row is keyed by no content
    hash, so ingesting the file again reads it."""
    warehouse.remove_stem(fr.stem)
    marker = f"changed-{fr.stem}"
    fr.records, fr.accepted, fr.rejected, fr.skipped, fr.duplicates = 1, 0, 1, 0, 0
    fr.replaces, fr.superseded = [], []
    fr.stem = warehouse.new_stem(warehouse.fresh_key(xxhash.xxh3_128_hexdigest(marker.encode())))
    message = f"{fr.source}: {reason}; not ingested (ingest it again)"
    warehouse.write_rows(
        "rejects",
        {
            "source": [fr.source],
            "source_index": [0],
            "reason": [message[:500]],
            "excerpt": [""],
            "ingested_at": [datetime.now(UTC)],
        },
        fr.stem,
        "00-00000",
    )
    print(f"{message}: recorded in rejects; the rest of the batch goes on", file=sys.stderr)
    return marker, fr


def record_unrecognised(
    warehouse: Warehouse, known: Manifest, path: Path, exc: InputError, force: bool
) -> tuple[str, FileResult]:
    """A file of a batch that is not traffic (a stray note, a corrupt archive) is one rejected
    record with the reason, and the rest of the batch lands. Kept in the manifest like any
    source, so ingesting the same batch again does not report it again."""
    digest, size = hash_and_size(path)
    entry = known.get(digest)
    if entry and not force:
        return digest, FileResult(str(path), "unrecognised", "unchanged", size_bytes=size)
    fr = FileResult(str(path), "unrecognised", "ingested", 1, 0, 1, 0, size)
    new_generation(warehouse, fr, digest, entry, [])
    try:
        with path.open("rb") as fh:
            head = fh.read(400)
    except OSError:
        head = b""
    reason = exc.message + (f" ({exc.hint})" if exc.hint else "")
    warehouse.write_rows(
        "rejects",
        {
            "source": [str(path)],
            "source_index": [0],
            "reason": [reason[:500]],
            "excerpt": [redact_excerpt(head)],
            "ingested_at": [datetime.now(UTC)],
        },
        fr.stem,
        "00-00000",
    )
    print(f"{exc.message}: recorded in rejects; the rest of the batch goes on", file=sys.stderr)
    return digest, fr


def write_manifests(warehouse: Warehouse, done: dict[str, FileResult]) -> None:
    """One manifest row per ingested source, written last: a crash before it leaves orphans
    that the next ingest removes, never a half-counted source. Each makes its generation's rows
    visible in place of those it replaces, whose files a later ingest removes once no reader
    can still be using them (`Warehouse.remove_orphans`)."""
    now = datetime.now(UTC)
    for digest, fr in done.items():
        warehouse.write_manifest(
            {
                "source": fr.source,
                "source_path": resolved_path(fr.source),
                "source_hash": digest,
                "format": fr.format,
                "size_bytes": fr.size_bytes,
                "records": fr.records,
                "accepted": fr.accepted,
                "rejected": fr.rejected,
                "skipped": fr.skipped,
                "ingested_at": now,
                "cacheaudit_version": __version__,
                "segment_hashing": SEGMENT_HASHING,
            },
            fr.stem,
        )
