"""Ingest, the run: worker processes taking tasks from a bounded queue, and the bookkeeping.

At most `workers` tasks wait in the queue, so memory is bounded by workers x (task + buffers)
whatever the input size. Workers fork from a fork server that imported their modules once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import gc
import os
import queue
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pipeline import ctrl_c, fork_server
from pipeline.dead_work import pid_alive
from pipeline.errors import PipelineError
from pipeline.fork_server import SCRATCH_PREFIX, scratch_dir
from pipeline.ingest_plan import FileResult, Task
from pipeline.ingest_worker import Counts, Options, Worker, unreadable_reason, worker_main
from pipeline.sources.har import RangeMismatch

ProgressFn = Callable[[int, int], None]


class Run:
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


def run_inline(tasks: Iterator[Task], root: str, options: Options, run: Run) -> None:
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


LEGACY_SCRATCH_AGE_S = 24 * 3600  # folders named before they carried a pid: this old, removed


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
                if int(owner) == os.getpid() or pid_alive(int(owner)):
                    continue
            elif time.time() - folder.stat().st_mtime < LEGACY_SCRATCH_AGE_S:
                continue
        except OSError:
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed += not folder.exists()
    return removed


def _put_without_ctrl_c(q: Any, item: object, timeout: float) -> None:
    """`q.put` with SIGINT blocked: a Ctrl-C raised inside it, between the queue taking its
    lock and the block that releases it, left the lock held, and the queue's exit-time
    finaliser then waited for it forever (an interrupted ingest printed "interrupted" and
    never exited). A Ctrl-C meanwhile is delivered when the put returns, within `timeout`."""
    if threading.current_thread() is not threading.main_thread():
        q.put(item, timeout=timeout)  # signals are handled by the main thread only
        return
    with ctrl_c.held():
        q.put(item, timeout=timeout)


class WorkerPool:
    """Worker processes, started before the inputs are hashed and planned so that their start-up
    (a fresh interpreter importing pyarrow, ~0.4 s) overlaps that work instead of following it."""

    def __init__(self, root: str, options: Options, n_workers: int) -> None:
        ctx = fork_server.context()
        self.n_workers = n_workers
        self.task_q: Any = ctx.Queue(maxsize=n_workers)
        _widen_pipe(self.task_q)
        self.result_q: Any = ctx.Queue()
        self.procs = [
            ctx.Process(
                target=worker_main,
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
        fork_server.start()
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

    def _drain(self, run: Run, block: bool) -> None:
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

    def run(self, tasks: Iterator[Task], run: Run) -> None:
        self.started.wait()
        if self.start_error is not None:
            raise PipelineError(f"could not start the ingest workers: {self.start_error!r}")
        for task in tasks:
            if task.lines is not None:
                task = self._spill(task)
            self._hand_over(task, run)
            self._drain(run, block=False)
        for _ in self.procs:
            self._hand_over(None, run)
        while self.exited < self.n_workers:
            self._drain(run, block=True)

    def _hand_over(self, task: Task | None, run: Run) -> None:
        """Queue `task` (None: the end) for a worker, taking results while the queue is full."""
        while True:
            try:
                _put_without_ctrl_c(self.task_q, task, timeout=0.2)
                return
            except queue.Full:
                self._drain(run, block=False)

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
