"""The fork server that ingest's worker processes start from, and starting it early.

Workers fork from one server process that imported their modules once (`WORKER_MODULES`).
That server is a fresh interpreter: spawning it and importing pyarrow and the readers there
takes ~0.12 s before the first worker can fork. Started by the ingest itself, it began only
after the CLI's own imports (~0.17 s in), so the two start-ups ran one after the other.
`start_for_command_line` starts it first thing, while the CLI imports its modules on the
other core, when the command line names enough input for workers (`worker_count`): a 136 MB
capture went from 0.95-0.99 s to 0.80-0.84 s of wall time on 2 cores. It is light on purpose
(no pyarrow, no DuckDB): anything it imports delays that start.

A wrong guess costs nothing but time: the ingest decides again with the same rule, and
starting a running server is a no-op; a server started for an ingest that then needs none
exits with the process.
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterable
from multiprocessing.context import ForkServerContext
from pathlib import Path
from types import ModuleType

from pipeline import ctrl_c
from pipeline.engines import ENGINE_ENV

PARALLEL_MIN_BYTES = 8 * 1024 * 1024  # below this, worker start-up costs more than it saves
COMPRESSION_GUESS = 8  # content bytes per compressed byte, for that decision only

# Modules a worker needs, imported once in the fork server rather than in every worker.
# pyarrow.compute: `Array.take` imports it when a part is written (30 ms, once here).
WORKER_MODULES = [
    "pipeline.ingest_worker",
    "pipeline.sources.capture",
    "pipeline.sources.har",
    "pipeline.sources.otlp",
    "pyarrow.compute",
]

# This process's scratch folder in the temporary directory: the spill files of decompressed
# lines (`WorkerPool._spill`) and multiprocessing's own folder (the fork server's socket) live
# in it.
# Its name carries the owning pid, so the next ingest removes the folders of killed ingests
# (`ingest_pool.remove_stale_scratch`), and only those: ours, of processes that are gone.
SCRATCH_PREFIX = "cacheaudit-ingest-"
SOCKET_FOLDER_MAX = 80  # + "/listener-xxxxxxxx" stays within a Unix socket address
_scratch: str | None = None


def scratch_dir() -> str:
    """This process's scratch folder, made on first use and removed when the process exits."""
    global _scratch
    if _scratch is None or not Path(_scratch).is_dir():
        _scratch = tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-")
        atexit.register(shutil.rmtree, _scratch, True)
    return _scratch


def _size(path: Path) -> int:
    try:
        return path.stat().st_size if path.is_file() else 0
    except OSError:
        return 0


def work_estimate(path: Path) -> int:
    """Bytes of content a file holds, roughly: a compressed capture holds several times its size
    (a 5 MB zstd file of 250 MB of traffic must not be ingested on one core)."""
    size = _size(path)
    try:
        return size * COMPRESSION_GUESS if size and _sources().compression_of(path) else size
    except OSError:
        return 0


def _sources() -> ModuleType:
    """pipeline.sources, imported only when needed (see the module's doc), with Ctrl-C held
    back: orjson and zstandard are native modules that a KeyboardInterrupt raised while they
    initialise crashes (pipeline/__main__.py). Once imported, taken as it is: an ingest asks
    for each of its files."""
    imported = sys.modules.get("pipeline.sources")
    if imported is not None:
        return imported
    with ctrl_c.held():
        import pipeline.sources

    return pipeline.sources


def context() -> ForkServerContext:
    """The fork-server context, with the workers' modules to import in the server."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(WORKER_MODULES)
    return ctx


def start() -> None:
    """Start the fork server (if it is not running) with SIGINT blocked. It imports the
    workers' modules before it ignores SIGINT itself, so a Ctrl-C in that first tenth of a
    second killed it: the workers could not start ("can only join a started process"), and
    its traceback followed the ingest's "interrupted". A blocked signal stays blocked in it
    and in the workers it forks: a Ctrl-C reaches the ingest process alone, which stops them,
    and one that came meanwhile is delivered here when unblocked."""
    if threading.current_thread() is not threading.main_thread():
        return  # the mask is per thread; starting from the worker thread is as before
    from multiprocessing import forkserver, resource_tracker

    context()
    # multiprocessing's folder (it holds the fork server's socket) inside ours, so that a
    # killed ingest leaves no `pymp-*` folder of its own that nothing removes.
    # Not when the socket's path would pass the 107 bytes a Unix socket address may have.
    config = getattr(mp.current_process(), "_config", None)
    if isinstance(config, dict) and "tempdir" not in config:
        with contextlib.suppress(OSError):
            folder = scratch_dir()
            if len(os.fsencode(folder)) <= SOCKET_FOLDER_MAX:
                config["tempdir"] = folder
    # The resource tracker first, on its own: starting it unblocks SIGINT on its way out
    # (multiprocessing.resource_tracker blocks and then unblocks SIGINT and SIGTERM around its
    # spawn), which, inside the block below, let the fork server start with SIGINT open. Once
    # it runs, the fork server's start finds it and leaves the mask alone.
    with ctrl_c.held():
        resource_tracker.ensure_running()
    with ctrl_c.held():
        forkserver.ensure_running()


# `cacheaudit ingest` options that take a value (the rest are flags); kept in step with the
# command in pipeline/cli.py. A value taken for a path, or the reverse, only changes the guess.
_VALUE_OPTIONS = frozenset(
    {
        "--warehouse",
        "-w",
        "--workers",
        "--providers",
        "--engine",
        "--spark-master",
        "--max-record-bytes",
    }
)


def start_for_command_line(args: list[str]) -> bool:
    """Start the fork server when `args` (the command line after the program) is an ingest
    on this machine that will use workers; returns whether it did. Never fails the command:
    any error only means the ingest starts the server itself, as without this."""
    try:
        paths, workers, engine = _ingest_arguments(args)
        engine = engine or os.environ.get(ENGINE_ENV) or "duckdb"
        if not paths or engine.strip().lower() != "duckdb":
            return False
        if worker_count(_files(paths), workers) < 2:
            return False
        start()
    except Exception:  # an optimisation must not stop the command
        return False
    return True


def worker_count(
    files: Iterable[Path], workers: int | None, min_bytes: int = PARALLEL_MIN_BYTES
) -> int:
    """How many worker processes an ingest of `files` uses: `workers` (all cores by default),
    or one when they hold less than `min_bytes` to read, too little for the workers' start-up
    to pay off."""
    count = max(1, workers or os.cpu_count() or 1)
    files = list(files)
    if count == 1 or sum(map(_size, files)) >= min_bytes:
        return count  # sizes on disk reach it already: no need to open the files
    return count if sum(map(work_estimate, files)) >= min_bytes else 1


def _ingest_arguments(args: list[str]) -> tuple[list[Path], int | None, str | None]:
    """(paths, --workers, --engine) of an `ingest` command line; no paths for anything else
    (another command, --help, a root option before the command)."""
    if not args or args[0] != "ingest":
        return [], None, None
    paths: list[Path] = []
    values: dict[str, str] = {}
    rest = iter(args[1:])
    for arg in rest:
        if arg in ("--help", "-h", "--"):
            return [], None, None
        name, eq, value = arg.partition("=")
        if name in _VALUE_OPTIONS:
            values[name] = value if eq else next(rest, "")
        elif not arg.startswith("-"):
            paths.append(Path(arg))
    workers = values.get("--workers")
    return paths, int(workers) if workers else None, values.get("--engine")


def _files(paths: list[Path]) -> Iterable[Path]:
    """The files an ingest of `paths` reads: a directory's capture-like names, as the CLI
    walks it."""
    for path in paths:
        if path.is_dir():
            capture_like = _sources().looks_like_capture
            yield from (f for f in path.rglob("*") if f.is_file() and capture_like(f))
        else:
            yield path
