"""Ingest, second step: tasks -> normalised rows -> warehouse parts, in one process.

A `Worker` keeps one set of column buffers per source across tasks and writes Parquet parts when
they pass the `FLUSH_*` limits and when the queue ends. It runs in each worker process
(`worker_main`), or in the ingest's own process for small inputs (pipeline/ingest_pool.py).
"""

from __future__ import annotations

import gc
import io
import os
import queue
import re
import select
import signal
import traceback
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import xxhash

from pipeline import providers
from pipeline.errors import PipelineError
from pipeline.ingest_buffers import (
    FLUSH_CONTENT_BYTES,
    FLUSH_REQUESTS,
    SEGMENTS_ALL_WORKERS,
    SourceBuffers,
)
from pipeline.ingest_plan import MAX_RECORD_BYTES, Record, Task
from pipeline.normalise import RejectRecord, Skip, normalise
from pipeline.records import Exchange, Reject
from pipeline.redact import cut, redact_text
from pipeline.sources import iter_source
from pipeline.sources.har import RangeMismatch
from pipeline.warehouse import Warehouse, source_key


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
        self.buffers: dict[str, SourceBuffers] = {}
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
            buffers = SourceBuffers(
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
                excerpt = redact_text(cut(item.request_body, 200).decode("utf-8", "replace"))
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


def worker_main(
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
