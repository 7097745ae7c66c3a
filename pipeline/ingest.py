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

The steps have a module each: pipeline/ingest_claims.py (which source a file is: unchanged,
grown or new), ingest_plan.py (files -> tasks), ingest_worker.py (tasks -> rows, in one
process), ingest_buffers.py (rows -> parts) and ingest_pool.py (the worker processes and the
run's counts). This module runs an ingest: which files to read, the manifests, the rejects.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import xxhash

from pipeline import __version__, providers
from pipeline.errors import InputError, UsageError
from pipeline.file_state import file_stamp
from pipeline.fork_server import PARALLEL_MIN_BYTES, worker_count
from pipeline.ingest_claims import Manifest, claim, new_generation, resolved_path
from pipeline.ingest_plan import (
    MAX_RECORD_BYTES,
    FileResult,
    Task,
    har_batches,
    hash_and_size,
    plan,
)
from pipeline.ingest_pool import ProgressFn, Run, WorkerPool, remove_stale_scratch, run_inline
from pipeline.ingest_worker import Options, unreadable_reason
from pipeline.normalise import SEGMENT_HASHING
from pipeline.reports.numbers import count
from pipeline.sources import detect_format
from pipeline.sources.capture import redact_excerpt
from pipeline.warehouse import LOCK_NAME, TABLES, Warehouse, key_of


@dataclass
class IngestResult:
    files: list[FileResult] = field(default_factory=list)

    def total(self, attr: str) -> int:
        return sum(getattr(f, attr) for f in self.files)


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
    n_workers = worker_count(paths, workers, PARALLEL_MIN_BYTES)
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
            pool = WorkerPool(str(warehouse.root), options, n_workers) if n_workers > 1 else None
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
    pool: WorkerPool | None,
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
    run = Run(pending, total, progress)
    run.failed = failed
    if progress and total:
        progress(0, total)  # the bar shows the size at once, not when a first task ends
    tasks = (task for p in plans for task in p)
    if pool is None:
        run_inline(tasks, str(warehouse.root), options, run)
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
    warehouse: Warehouse, fr: FileResult, digest: str, options: Options, run: Run
) -> None:
    """Read a HAR again as one stream, here, when a range of it did not hold the entries its plan
    counted (`har.RangeMismatch`: a damaged stretch, an entry without `startedDateTime`), so the
    numbers of the entries after it were wrong: the rows its ranges wrote go, under a new
    generation of the same key the stream's rows come, numbered as `har.iter_har` numbers them."""
    warehouse.remove_stem(fr.stem)
    fr.stem = warehouse.new_stem(key_of(fr.stem))
    fr.records = fr.accepted = fr.rejected = fr.skipped = 0
    tasks = _guarded(har_batches(Path(fr.source), digest), digest, run.failed)
    run_inline(with_stem(tasks, fr.stem), str(warehouse.root), options, run)


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
            f"cut short while it was being ingested ({now[1]} of the"
            f" {count(fr.size_bytes, 'byte', grouping=False)} hashed are left)"
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


def _identity(path: Path) -> tuple[str, int]:
    """The content hash and size of a file, or for one that cannot be read (no permission, an
    I/O error) a hash of its path, size and time: it is still one rejected file of the batch,
    reported again once it changes."""
    try:
        return hash_and_size(path)
    except OSError:
        try:
            st = path.stat()
            size, mtime = st.st_size, st.st_mtime_ns
        except OSError:
            size, mtime = 0, 0
        stand_in = f"unreadable\n{path.resolve()}\n{size}\n{mtime}".encode()
        return xxhash.xxh3_128_hexdigest(stand_in), size


def record_unrecognised(
    warehouse: Warehouse, known: Manifest, path: Path, exc: InputError, force: bool
) -> tuple[str, FileResult]:
    """A file of a batch that is not traffic (a stray note, a corrupt archive) is one rejected
    record with the reason, and the rest of the batch lands. Kept in the manifest like any
    source, so ingesting the same batch again does not report it again."""
    digest, size = _identity(path)
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
