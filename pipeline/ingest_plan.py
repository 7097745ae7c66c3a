"""Ingest, first step: input files -> tasks for the workers, and what is counted per file.

How a file is cut (pipeline/ingest.py's docstring says why): an uncompressed capture JSONL into
line-aligned byte ranges of about `CHUNK_BYTES` the workers read themselves; a gzip/zstd capture
into blocks of whole lines the parent decompresses; an uncompressed HAR into byte ranges of
whole entries, counted by their `startedDateTime` keys; a compressed HAR into batches of read
entries; anything else is one task per file.
"""

from __future__ import annotations

import mmap
import os
import sys
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import xxhash

from pipeline.errors import InputError
from pipeline.records import Exchange, Reject
from pipeline.sources import compression_of, damage_of, open_counted
from pipeline.sources.capture import redact_excerpt, too_long
from pipeline.sources.otlp import SPAN_INDEX_STRIDE

CHUNK_BYTES = 32 * 1024 * 1024  # one task's share of a file the workers read themselves
TAIL_SPLIT = 8  # the end of a file goes in smaller ranges, down to CHUNK_BYTES / TAIL_SPLIT
HASH_BLOCK = 16 * 1024 * 1024
# Tasks the parent reads (decompressed lines, HAR entries) travel through a pipe: smaller, so
# the ones waiting in the queue and in flight hold less memory.
BATCH_BYTES = 8 * 1024 * 1024
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
    # then delete (`WorkerPool.run`); lines are numbered from first_lineno, `path` stays the source.
    spill: str | None = None
    stem: str = ""  # the generation its parts are written under (`FileResult.stem`)
    # A HAR range: how many entries the plan counted in it (None: the last range, to the end of
    # the document), and the offsets of their `startedDateTime` keys (`sources.har.iter_range`).
    entries: int | None = None
    anchors: array[int] | None = None


def hash_file(path: Path) -> str:
    return hash_and_size(path)[0]


def hash_and_size(path: Path) -> tuple[str, int]:
    """xxh3-128 of the file's bytes and how many bytes that was: a file that grows while it is
    read (a capture still being written) is ingested up to exactly what was hashed."""
    h = xxhash.xxh3_128()
    with path.open("rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        for _, window in file_windows(fh.fileno(), 0, size):
            with window, memoryview(window) as view:
                h.update(view)
    return h.hexdigest(), size


def file_windows(fd: int, start: int, end: int) -> Iterator[tuple[int, mmap.mmap]]:
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
            for offset, window in file_windows(fd, start, end):
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


def har_batches(path: Path, digest: str) -> Iterator[Task]:
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
            return har_batches(path, digest)
        return _har_ranges(path, digest, size)
    if fmt in LINE_FORMATS:
        if compression_of(path) is not None:
            return _line_blocks(path, fmt, digest, max_record)
        return (
            Task(str(path), fmt, digest, start=s, end=e, first_lineno=ln, weight=e - s)
            for s, e, ln in iter_ranges(path, size)
        )
    return iter([Task(str(path), fmt, digest, weight=size)])
