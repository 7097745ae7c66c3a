"""Ingest on Spark: the same normaliser (`pipeline.ingest_worker.Worker`), run as Spark tasks,
writing the same warehouse.

Two Spark jobs, so the driver never reads capture bytes:
1. survey: one Spark task per input file detects its format, hashes it and, for an uncompressed
   capture JSONL, cuts it into line-aligned byte ranges (`pipeline.ingest_plan.split_ranges`);
2. normalise: the ranges (or whole files: compressed captures and HAR are single streams, OTLP is
   one document) dealt into two groups per core; one Spark task per group runs a `Worker`, which
   writes the same `<table>/[day=YYYY-MM-DD/]<key>.<generation>-<worker>-<flush>.parquet` parts
   as the local engine.
The driver then writes the manifest, last, as `pipeline.ingest.ingest` does, so a source counts as
ingested only when every part landed. A Spark task's worker id is its index, so a retried or
speculative copy rewrites the same part names with the same rows (atomic renames): harmless.

Executors must see the input files and the warehouse at the same paths as the driver: one machine,
or a shared filesystem on a cluster (docs/cluster.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pipeline import providers
from pipeline.dedupe import drop_duplicates
from pipeline.errors import InputError, PipelineError, UsageError
from pipeline.ingest import (
    IngestResult,
    record_unrecognised,
    warn_unmatched_rules,
    with_stem,
    write_manifests,
)
from pipeline.ingest_claims import claim
from pipeline.ingest_plan import MAX_RECORD_BYTES, FileResult, Task, hash_file, split_ranges
from pipeline.ingest_pool import ProgressFn
from pipeline.ingest_worker import Options, Worker
from pipeline.sources import compression_of, detect_format, refuse_streams
from pipeline.warehouse import Warehouse

Counts = tuple[int, int, int, int]


def survey_file(path: str) -> dict[str, Any]:
    """Format, content hash, size and byte ranges of one file; errors travel back as data."""
    try:
        p = Path(path)
        fmt = detect_format(p)
        size = p.stat().st_size
        splittable = fmt == "capture_jsonl" and compression_of(p) is None
        ranges = split_ranges(p, size) if splittable else []
        return {"path": path, "format": fmt, "hash": hash_file(p), "size": size, "ranges": ranges}
    except PipelineError as exc:
        return {"path": path, "error": exc.message, "hint": exc.hint}
    except OSError as exc:
        return {"path": path, "error": f"cannot read {path}: {exc.strerror or exc}"}


def tasks_of(s: dict[str, Any]) -> list[Task]:
    if not s["ranges"]:
        return [Task(s["path"], s["format"], s["hash"], weight=s["size"])]
    return [
        Task(s["path"], s["format"], s["hash"], start=a, end=b, first_lineno=ln, weight=b - a)
        for a, b, ln in s["ranges"]
    ]


def _survey(spark: Any, paths: list[Path]) -> list[dict[str, Any]]:
    names = [str(p) for p in paths]
    # An RDD over the file list, one file per partition: plain Python workers, no pandas needed.
    surveyed = spark.sparkContext.parallelize(names, len(names)).map(survey_file).collect()
    for s in surveyed:  # fail like the local engine: on a bad file, before any write
        if "error" in s and (len(names) == 1 or not Path(s["path"]).is_file()):
            raise InputError(s["error"], hint=s.get("hint"))
    return list(surveyed)


def _groups(tasks: list[Task], slots: int) -> list[list[int]]:
    """Task indexes dealt into at most `slots` groups of about equal bytes, biggest first (each
    to the lightest group so far). One Worker per group writes its parts at the flush limits,
    as a local worker process does: one Worker per range wrote one small part per range and day
    (408 per table on the 1 GB bench capture, against 60 locally)."""
    groups: list[list[int]] = [[] for _ in range(max(1, min(slots, len(tasks))))]
    loads = [0] * len(groups)
    for i in sorted(range(len(tasks)), key=lambda i: -tasks[i].weight):
        lightest = loads.index(min(loads))
        groups[lightest].append(i)
        loads[lightest] += tasks[i].weight
    return groups


def _run_tasks(
    spark: Any, tasks: list[Task], root: str, options: Options
) -> tuple[list[Counts], set[int]]:
    """The tasks as Spark tasks, a Worker each per group (`_groups`, two per core): counts in
    `tasks` order, and the --providers entries some record matched (for the warning about the
    others)."""

    def run_group(index: int, groups: Iterator[list[tuple[int, Task]]]) -> Iterator[Any]:
        worker = Worker(root, options, index)
        done = [(i, worker.run(task)) for group in groups for i, task in group]
        worker.finish()
        matched = sorted(worker.matched_rules)
        return iter([(i, counts, matched) for i, counts in done])

    groups = _groups(tasks, 2 * spark.sparkContext.defaultParallelism)
    rdd = spark.sparkContext.parallelize(
        [[(i, tasks[i]) for i in group] for group in groups], len(groups)
    )
    results = rdd.mapPartitionsWithIndex(run_group).collect()
    counts = {i: c for i, c, _ in results}
    matched = {rule for _, _, rules in results for rule in rules}
    return [counts[i] for i in range(len(tasks))], matched


def ingest(
    spark: Any,
    paths: list[Path],
    warehouse: Warehouse,
    *,
    force: bool = False,
    keep_content: bool = True,
    providers_file: Path | None = None,
    progress: ProgressFn | None = None,
    max_record_bytes: int = MAX_RECORD_BYTES,
) -> IngestResult:
    """`pipeline.ingest.ingest` on Spark: the same arguments (a session instead of a worker
    count), the same warehouse, the same result."""
    if not paths:
        raise InputError("no input files", hint="cacheaudit ingest CAPTURE.jsonl [MORE ...]")
    refuse_streams(paths)  # before the lock, which creates the warehouse, as the local engine
    if providers_file is not None:
        providers.load_user_rules(providers_file)  # fail fast on a bad map, before any work
    if max_record_bytes < 1:
        raise UsageError("--max-record-bytes must be at least 1")
    options = Options(
        keep_content,
        str(providers_file) if providers_file else None,
        max_record_bytes=max_record_bytes,
    )
    with warehouse.lock():
        warehouse.remove_orphans()  # parts of an ingest that crashed before its manifest
        result = IngestResult()
        pending: dict[str, FileResult] = {}
        known = warehouse.manifest_index()
        unreadable: dict[str, FileResult] = {}
        tasks: list[Task] = []
        for s in _survey(spark, paths):
            if "error" in s:  # a file of the batch that is not traffic: one reject, as locally
                error = InputError(s["error"], hint=s.get("hint"))
                digest, fr = record_unrecognised(warehouse, known, Path(s["path"]), error, force)
                result.files.append(fr)
                if fr.status == "ingested":
                    unreadable[digest] = fr
                continue
            path, digest = Path(s["path"]), s["hash"]
            fr = claim(warehouse, known, pending, path, s["format"], digest, s["size"], force)
            result.files.append(fr)
            if fr.status == "unchanged":
                continue
            pending[digest] = fr
            tasks.extend(with_stem(tasks_of(s), fr.stem))
        matched: set[int] = set()
        if tasks:
            all_counts, matched = _run_tasks(spark, tasks, str(warehouse.root), options)
            for task, counts in zip(tasks, all_counts, strict=True):
                fr = pending[task.source_hash]
                fr.records += counts[0]
                fr.accepted += counts[1]
                fr.rejected += counts[2]
                fr.skipped += counts[3]
        total = sum(fr.size_bytes for fr in pending.values())
        if progress and total:
            progress(total, total)
        drop_duplicates(warehouse, pending)
        write_manifests(warehouse, pending | unreadable)
    if providers_file is not None:
        warn_unmatched_rules(providers_file, matched, result)
    return result


def ingest_on(master: str, paths: list[Path], warehouse: Warehouse, **kwargs: Any) -> IngestResult:
    """`ingest` in a Spark session on `master`, stopped afterwards (the CLI's entry point)."""
    from pipeline.engines.spark_session import get_session

    spark = get_session(master, app_name="cacheaudit ingest")
    try:
        return ingest(spark, paths, warehouse, **kwargs)
    finally:
        spark.stop()
