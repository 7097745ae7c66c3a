"""Ingest throughput and peak memory on >= 1 GB of generated agent traffic, in every format.

    python bench/ingest.py [--size-mb 1024] [--formats jsonl,har,otlp,zst,gz] [--json OUT]

The traffic (bench/formats.py) is generated once and cached under bench/out/. For each format
the same exchanges are ingested with `cacheaudit ingest` into a fresh warehouse, as a user would
run it, and timed with the peak memory of the whole process tree (bench/measure.py says exactly
what is measured).

Baseline (the target: ingest within 2x of the time needed just to parse every line and
every request body once with the fastest JSON parser): every line of the capture JSONL parsed,
plus its request body, with each parser at hand (orjson, and msgspec when installed: it comes
with the dev extras); the one needing the least CPU is the baseline. Ingest uses every core, so
the fair baseline is the same parse spread over the same cores (`baseline_parallel`: the file
cut into one byte range per core, one process each); the single-process time is reported too.
Every format carries the same traffic, so every format is judged against the same baseline:
decompressing a gzip/zstd file or scanning a HAR document is part of the work ingest has to do.

Floor (the work no ingest can skip: the parse, each response's events, each segment's bytes and
hashes, those hashes in Parquet; measured on one core): each format's CPU is also reported
against it (target FLOOR_CPU_TARGET), and the SMALL_MB capture is ingested in every format and
its wall time compared with its own floor (target FLOOR_WALL_TARGET): start-up counts there.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import itertools
import json
import mmap
import os
import resource
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import zstandard
from xxhash import xxh3_64_intdigest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from formats import make_capture, to_har, to_otlp
from measure import cpu_seconds, run_measured

OUT = Path(__file__).resolve().parent / "out"
GENERATOR_VERSION = 1  # bump when formats.py changes what it writes
TARGET_RATIO = 2.0
TARGET_PEAK_MB = 1024.0
# Against the floor (the work no ingest can skip, measured on one core): ingest's CPU within
# FLOOR_CPU_TARGET of it for every format, and a SMALL_MB capture ingested within
# FLOOR_WALL_TARGET of its floor's time (start-up counts: hourly files make small inputs common).
FLOOR_CPU_TARGET = 2.0
FLOOR_WALL_TARGET = 1.5
SMALL_MB = 64
FORMATS = ("jsonl", "har", "otlp", "zst", "gz")


# --- inputs -------------------------------------------------------------------------------


def _stamp_ok(path: Path, stamp: dict[str, Any]) -> bool:
    meta = path.with_name(path.name + ".meta.json")
    return path.exists() and meta.exists() and json.loads(meta.read_text()) == stamp


def _write_stamp(path: Path, stamp: dict[str, Any]) -> None:
    path.with_name(path.name + ".meta.json").write_text(json.dumps(stamp))


def inputs(size_mb: int, formats: list[str]) -> dict[str, Path]:
    """The capture in each wanted format, generated (or reused from bench/out/)."""
    OUT.mkdir(parents=True, exist_ok=True)
    base = OUT / f"capture-{size_mb}mb.jsonl"
    stamp = {"generator": GENERATOR_VERSION, "size_mb": size_mb}
    if not _stamp_ok(base, stamp):
        t = time.perf_counter()
        print(f"generating {base.name} ...", file=sys.stderr, flush=True)
        make_capture(base, size_mb * 1024 * 1024)
        _write_stamp(base, stamp)
        print(f"  {time.perf_counter() - t:.0f} s", file=sys.stderr)
    derived = {
        "jsonl": (base, None),
        "har": (base.with_suffix(".har"), lambda src, dst: to_har(src, dst)),
        "otlp": (base.with_suffix(".otlp.jsonl"), lambda src, dst: to_otlp(src, dst)),
        "zst": (base.with_suffix(".jsonl.zst"), _zstd),
        "gz": (base.with_suffix(".jsonl.gz"), _gzip),
    }
    out: dict[str, Path] = {}
    for fmt in formats:
        path, make = derived[fmt]
        if make is not None and not _stamp_ok(path, stamp):
            print(f"writing {path.name} ...", file=sys.stderr, flush=True)
            make(base, path)
            _write_stamp(path, stamp)
        out[fmt] = path
    return out


def _zstd(src: Path, dst: Path) -> None:
    cctx = zstandard.ZstdCompressor(level=3, threads=-1)
    with src.open("rb") as fin, dst.open("wb") as fout:
        cctx.copy_stream(fin, fout)


def _gzip(src: Path, dst: Path) -> None:
    with src.open("rb") as fin, gzip.open(dst, "wb", compresslevel=1) as fout:
        shutil.copyfileobj(fin, fout, 16 * 1024 * 1024)


# --- baseline -----------------------------------------------------------------------------


def _loads(parser: str) -> Any:
    if parser == "msgspec":
        import msgspec

        return msgspec.json.Decoder().decode
    return orjson.loads


def parsers() -> list[str]:
    """The JSON parsers the baseline tries: the fastest of them is the baseline."""
    try:
        import msgspec  # noqa: F401
    except ImportError:
        return ["orjson"]
    return ["orjson", "msgspec"]


def _parse_range(
    path: str, start: int, end: int, body_attr: str | None, parser: str = "orjson"
) -> int:
    """Parse every line in [start, end) and its request body; returns lines parsed.

    Lines are sliced out of a read-only mapping of the file with find (memchr), the fastest
    way to get them (a third less CPU than buffered readline on lines of tens of KB), so the
    baseline is the parse itself, not a slow way of reading."""
    loads = _loads(parser)
    n = 0
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
        pos = start
        while pos < end:
            nl = data.find(b"\n", pos, end)
            stop = end if nl < 0 else nl + 1
            obj = loads(data[pos:stop])
            pos = stop
            if body_attr is None:
                loads(obj["request"]["body"])
            else:  # OTLP: the prompt travels as a JSON string attribute of each span
                for rs in obj["resourceSpans"]:
                    for ss in rs["scopeSpans"]:
                        for span in ss["spans"]:
                            for attr in span["attributes"]:
                                if attr["key"] == body_attr:
                                    loads(attr["value"]["stringValue"])
            n += 1
    return n


def _ranges(path: Path, parts: int) -> list[tuple[int, int]]:
    size = path.stat().st_size
    cuts = [0]
    with path.open("rb") as fh:
        for i in range(1, parts):
            fh.seek(size * i // parts)
            fh.readline()
            cuts.append(min(fh.tell(), size))
    cuts.append(size)
    return [(a, b) for a, b in itertools.pairwise(cuts) if b > a]


def _warm(path: Path) -> None:
    """Read the file once so every timed run finds it in the page cache: the first run over a
    cold 1 GB file spends most of its time (and a kernel CPU second) faulting pages in."""
    with path.open("rb", buffering=0) as fh:
        while fh.read(1 << 24):
            pass


def baseline(path: Path, cores: int, body_attr: str | None = None) -> dict[str, Any]:
    """The parse with every parser at hand; each figure is the best any parser reached (the
    fastest parser is the baseline, and on a noisy machine each measure keeps its best)."""
    load = os.getloadavg()[0]
    _warm(path)
    runs = {parser: _baseline_with(path, cores, body_attr, parser) for parser in parsers()}
    best = {key: min(run[key] for run in runs.values()) for key in next(iter(runs.values()))}
    return {
        "baseline_parser": min(runs, key=lambda p: runs[p]["baseline_cpu_s"]),
        **best,
        "baseline_by_parser": runs,
        "baseline_load_avg_1m_before": load,
    }


def _baseline_with(path: Path, cores: int, body_attr: str | None, parser: str) -> dict[str, float]:
    cpu0 = cpu_seconds(resource.getrusage(resource.RUSAGE_SELF))
    t = time.perf_counter()
    _parse_range(str(path), 0, path.stat().st_size, body_attr, parser)
    single = time.perf_counter() - t
    cpu_single = cpu_seconds(resource.getrusage(resource.RUSAGE_SELF)) - cpu0
    ranges = _ranges(path, cores)
    children0 = cpu_seconds(resource.getrusage(resource.RUSAGE_CHILDREN))
    t = time.perf_counter()
    with ProcessPoolExecutor(max_workers=cores) as pool:
        jobs = [pool.submit(_parse_range, str(path), a, b, body_attr, parser) for a, b in ranges]
        for job in jobs:
            job.result()
    parallel = time.perf_counter() - t
    cpu_parallel = cpu_seconds(resource.getrusage(resource.RUSAGE_CHILDREN)) - children0
    return {
        "baseline_single_s": single,
        "baseline_parallel_s": parallel,
        # The cheaper of the two measurements is the honest baseline (both do the same work).
        "baseline_cpu_s": min(cpu_single, cpu_parallel),
        "baseline_single_cpu_s": cpu_single,
        "baseline_parallel_cpu_s": cpu_parallel,
    }


# --- floor: the parsing ingest cannot skip -----------------------------------------------

# The prompt segments of a request body, as ingest splits them (tools, system, each message).
_SEGMENT_KEYS = ("tools", "system", "systemInstruction", "messages", "contents", "input")
# A segment's hash is seeded with its place (normalise.identity_seed): one seed per key is the
# least of that work (ingest looks each segment's kind and role up).
_PLACE_SEEDS = {key: xxh3_64_intdigest(key.encode()) for key in _SEGMENT_KEYS}


def _event_decoder() -> Any:
    """The cheapest way we found to read a stream's events: one msgspec decode of all of them
    as one array, into a struct that keeps the fields usage and timings need and skips the rest
    in C (0.14 CPU s per 200 MB of this traffic, against 0.19 for one orjson call per array and
    0.28 for one orjson call per event). Without msgspec, the orjson array."""
    try:
        import msgspec
    except ImportError:
        return orjson.loads
    # Built at run time (msgspec is a dev extra); `from __future__ import annotations` would
    # leave the fields as strings naming classes local to this function, so the types are
    # given as objects through defstruct.
    delta = msgspec.defstruct(
        "Delta", [("content", str | None, None), ("reasoning_content", str | None, None)]
    )
    choice = msgspec.defstruct(
        "Choice", [("delta", delta | None, None), ("finish_reason", str | None, None)]
    )
    event = msgspec.defstruct(
        "Event",
        [
            ("model", str | None, None),
            ("choices", list[choice], msgspec.field(default_factory=list)),  # type: ignore[valid-type]
            ("usage", dict[str, Any] | None, None),
        ],
    )
    return msgspec.json.Decoder(list[event]).decode  # type: ignore[valid-type]


def _floor_range(path: str, start: int, end: int) -> tuple[dict[str, float], dict[str, int]]:
    """CPU seconds of the work every ingest must do, whatever its design, split by part: the
    baseline's parse (each line and its request body); each response's events; each prompt
    segment's compact bytes, its xxh3-128 seeded with its place in the prompt, and the chained
    prefix hash (the hash of the exact bytes sent, as order-preserving compact JSON, and a
    chained prefix hash per position); and writing those hashes and lengths to Parquet, the
    least of the `segments` table. No logic, no request rows, no content, no dedupe. Also
    returns how many records, response bodies and segments it handled, so a test can hold it
    to ingest's work."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import xxhash

    decode_events = _event_decoder()
    digest = xxhash.xxh3_128_digest
    dumps = orjson.dumps
    spent = {"baseline": 0.0, "events": 0.0, "segments": 0.0, "parquet": 0.0}
    counts = {"records": 0, "responses": 0, "segments": 0}
    clock = time.process_time
    hashes: list[bytes] = []
    prefixes: list[bytes] = []
    sizes: list[int] = []
    sink = pa.BufferOutputStream()
    schema = pa.schema(
        [("segment_hash", pa.binary(16)), ("prefix_hash", pa.binary(16)), ("bytes", pa.int32())]
    )
    with (
        open(path, "rb") as fh,
        mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data,
        pq.ParquetWriter(sink, schema, compression="zstd") as writer,
    ):
        pos = start
        while pos < end:
            t0 = clock()
            nl = data.find(b"\n", pos, end)
            stop = end if nl < 0 else nl + 1
            record = orjson.loads(data[pos:stop])
            pos = stop
            body = orjson.loads(record["request"]["body"])
            t1 = clock()
            written = len(hashes)
            prefix = bytes(16)
            for key in _SEGMENT_KEYS:
                part = body.get(key)
                seed = _PLACE_SEEDS[key]
                for segment in part if isinstance(part, list) else (part,) if part else ():
                    raw = dumps(segment)
                    seg = digest(raw, seed)
                    prefix = digest(prefix + seg)
                    hashes.append(seg)
                    prefixes.append(prefix)
                    sizes.append(len(raw))
            t2 = clock()
            text = record["response"].get("body") or ""
            if text.startswith("data: "):
                events = text.rstrip().removesuffix("data: [DONE]").rstrip()[len("data: ") :]
                decode_events("[" + events.replace("\n\ndata: ", ",") + "]")
            elif text:
                orjson.loads(text)
            t3 = clock()
            counts["records"] += 1
            counts["responses"] += bool(text)
            counts["segments"] += len(hashes) - written
            if len(hashes) >= 200_000 or pos >= end:
                writer.write_table(pa.table([hashes, prefixes, sizes], schema=schema))
                hashes, prefixes, sizes = [], [], []
            t4 = clock()
            spent["baseline"] += t1 - t0
            spent["segments"] += t2 - t1
            spent["events"] += t3 - t2
            spent["parquet"] += t4 - t3
    return spent, counts


def _floor_without_gc(path: Path) -> tuple[dict[str, float], dict[str, int]]:
    """The floor with the garbage collector off: its passes over the objects the parts create
    are not work ingest must do (they cost 15% here, most of it landing in the parse), and a
    floor must not be padded."""
    gc.disable()
    try:
        return _floor_range(str(path), 0, path.stat().st_size)
    finally:
        gc.enable()


def floor(path: Path, baseline_cpu_s: float) -> dict[str, Any]:
    """How close to the baseline any ingest can get: the work it cannot skip, measured with the
    fastest technique we found for each part, against the baseline's CPU. Ingest must also read
    usage from every response and hash and store every prompt segment, so a floor at the target
    ratio leaves nothing for the rest of ingest by this design or any other built on these
    libraries."""
    spent, counts = _floor_without_gc(path)
    total = sum(spent.values())
    return {
        "floor_cpu_s": total,
        "floor_parts_cpu_s": spent,
        "floor_counts": counts,
        "floor_ratio_to_baseline_cpu": total / baseline_cpu_s,
        # The same, against the baseline's part of this very run (same parser, same moment):
        # the ratio least moved by other load on the machine.
        "floor_ratio_to_own_parse": total / spent["baseline"],
        # The share of the target left for everything else ingest does: dialect logic,
        # redaction, timings, request rows, prompt content, dedupe.
        "target_cpu_s_left_after_floor": TARGET_RATIO * baseline_cpu_s - total,
    }


# --- ingest -------------------------------------------------------------------------------


def _cacheaudit() -> list[str]:
    exe = Path(sys.executable).with_name("cacheaudit")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "pipeline"]


def _counts(stderr: str) -> dict[str, int]:
    """The CLI's closing line: `total: N records = A accepted + R rejected + S skipped`."""
    for line in stderr.splitlines():
        if line.startswith("total:"):
            words = line.replace("=", " ").replace("+", " ").split()
            nums = [int(w) for w in words if w.isdigit()]
            if len(nums) >= 4:
                return dict(zip(("records", "accepted", "rejected", "skipped"), nums, strict=False))
    return {}


def bench_ingest(fmt: str, path: Path, workdir: Path, traffic_bytes: int) -> dict[str, Any]:
    """Ingest one file; MB/s counts the traffic (the capture JSONL's size), so a compressed
    file is not credited with its small size on disk."""
    wh = workdir / f"wh-{fmt}"
    shutil.rmtree(wh, ignore_errors=True)
    env = {**os.environ, "TZ": "UTC"}
    env.pop("CACHEAUDIT_WAREHOUSE", None)
    load = os.getloadavg()[0]  # other work on the machine skews every figure: keep it on record
    _warm(path)  # as for the baseline: the parse is timed, not the disk
    m = run_measured([*_cacheaudit(), "ingest", str(path), "--warehouse", str(wh)], env=env)
    size = path.stat().st_size
    counts = _counts(m.stderr)
    result: dict[str, Any] = {
        "format": fmt,
        "file": path.name,
        "file_mb": size / 1e6,
        "traffic_mb": traffic_bytes / 1e6,
        "ok": m.returncode == 0,
        "wall_s": m.wall,
        "cpu_s": m.cpu_s,
        "mb_per_s": traffic_bytes / 1e6 / m.wall,
        "requests_per_s": counts.get("accepted", 0) / m.wall,
        "peak_pss_mb": m.peak_pss_mb,
        "peak_rss_sum_mb": m.peak_rss_sum_mb,
        "hwm_sum_mb": m.hwm_sum_mb,
        "meets_memory_target_on_hwm_bound": m.hwm_sum_mb < TARGET_PEAK_MB,
        "max_rss_single_mb": m.max_rss_single_mb,
        "load_avg_1m_before": load,
        **counts,
    }
    if m.returncode != 0:
        result["error"] = (m.stderr.strip().splitlines() or ["(no output)"])[-1]
    if counts.get("rejected"):
        result["top_reject_reasons"] = _reject_reasons(wh)
    shutil.rmtree(wh, ignore_errors=True)
    return result


def _reject_reasons(wh: Path) -> list[list[Any]]:
    """The commonest reject reasons, so a failing run says why (e.g. a dialect mid-edit)."""
    import duckdb

    files = [str(p) for p in (wh / "rejects").glob("*.parquet")]
    if not files:
        return []
    rows = duckdb.sql(
        "SELECT left(reason, 160) AS r, count(*) AS n FROM read_parquet($f) GROUP BY r "
        "ORDER BY n DESC LIMIT 3",
        params={"f": files},
    ).fetchall()
    return [list(r) for r in rows]


def precompile() -> bool:
    """Byte-compile the package before timing, as an installed copy is and as any run after the
    first finds it: with PYTHONDONTWRITEBYTECODE set (as on CI and here), every ingest (and its
    fork server) would otherwise compile our sources again, ~0.2 s of CPU each, which is Python
    start-up, not ingest. Returns whether it succeeded (recorded with the figures)."""
    import compileall

    package = Path(__file__).resolve().parents[1] / "pipeline"
    return bool(compileall.compile_dir(str(package), quiet=2))


def warm_caches(jsonl: Path, workdir: Path) -> bool:
    """Ingest a few records once before timing, so the files cacheaudit keeps in its cache
    directory (the price library's rows, the copy a new warehouse's cacheaudit.duckdb starts
    from: ~3 s to write) exist, as for every run after a user's first. Otherwise the first
    format timed would carry that one-off cost and the others not. Returns whether it ran."""
    sample = workdir / "warm-up.jsonl"
    wh = workdir / "wh-warm-up"
    with jsonl.open("rb") as src:
        sample.write_bytes(b"".join(itertools.islice(src, 3)))
    shutil.rmtree(wh, ignore_errors=True)
    env = {**os.environ, "TZ": "UTC"}
    env.pop("CACHEAUDIT_WAREHOUSE", None)
    m = run_measured([*_cacheaudit(), "ingest", str(sample), "--warehouse", str(wh)], env=env)
    shutil.rmtree(wh, ignore_errors=True)
    sample.unlink()
    return m.returncode == 0


def otlp_reader_present() -> bool:
    import importlib.util

    return importlib.util.find_spec("pipeline.sources.otlp") is not None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=int(os.environ.get("BENCH_SIZE_MB", 1024)))
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument(
        "--json", type=Path, default=Path(os.environ.get("BENCH_JSON", OUT / "ingest.json"))
    )
    args = ap.parse_args(argv)
    formats = [f for f in args.formats.split(",") if f]
    cores = os.cpu_count() or 1
    precompiled = precompile()
    paths = inputs(args.size_mb, formats)
    jsonl = inputs(args.size_mb, ["jsonl"])["jsonl"]
    base = baseline(jsonl, cores)
    print("measuring the parse floor ...", file=sys.stderr, flush=True)
    base.update(floor(jsonl, base["baseline_cpu_s"]))
    base["caches_warmed"] = warm_caches(jsonl, OUT)
    rows: list[dict[str, Any]] = []
    for fmt in formats:
        if fmt == "otlp" and not otlp_reader_present():
            rows.append(
                {
                    "format": fmt,
                    "file": paths[fmt].name,
                    "ok": None,
                    "error": "reader not present (pipeline/sources/otlp.py)",
                }
            )
            continue
        print(f"ingesting {fmt} ...", file=sys.stderr, flush=True)
        row = bench_ingest(fmt, paths[fmt], OUT, jsonl.stat().st_size)
        row["ratio_to_baseline"] = row["wall_s"] / base["baseline_parallel_s"]
        row["ratio_to_single_baseline"] = row["wall_s"] / base["baseline_single_s"]
        # CPU seconds against CPU seconds: the same comparison, less skewed by other load.
        row["cpu_ratio_to_baseline"] = row["cpu_s"] / base["baseline_cpu_s"]
        row["meets_time_target"] = row["ok"] and row["ratio_to_baseline"] <= TARGET_RATIO
        row["meets_memory_target"] = row["ok"] and row["peak_pss_mb"] < TARGET_PEAK_MB
        row["cpu_ratio_to_floor"] = row["cpu_s"] / base["floor_cpu_s"]
        row["meets_floor_cpu_target"] = row["ok"] and row["cpu_ratio_to_floor"] <= FLOOR_CPU_TARGET
        rows.append(row)
    small = small_files(formats) if args.size_mb != SMALL_MB else _small_rows(rows, base)
    report = {
        "benchmark": "ingest",
        "cores": cores,
        "size_mb_requested": args.size_mb,
        "capture_mb": jsonl.stat().st_size / 1e6,
        "bytecode_precompiled": precompiled,
        **base,
        "target_ratio": TARGET_RATIO,
        "target_peak_mb": TARGET_PEAK_MB,
        "floor_cpu_target": FLOOR_CPU_TARGET,
        "floor_wall_target": FLOOR_WALL_TARGET,
        "results": rows,
        "small_files": small,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2))
    print(summary(report))
    return 0 if all(r["ok"] is not False for r in rows + small) else 1


def _small_rows(rows: list[dict[str, Any]], base: dict[str, Any]) -> list[dict[str, Any]]:
    """Each format's wall time against the one-core floor of the same capture."""
    out = []
    for r in rows:
        if not r.get("ok"):
            out.append({"format": r["format"], "ok": False, "error": r.get("error", "failed")})
            continue
        ratio = r["wall_s"] / base["floor_cpu_s"]
        out.append(
            {
                "format": r["format"],
                "ok": True,
                "file_mb": r["file_mb"],
                "wall_s": r["wall_s"],
                "cpu_s": r["cpu_s"],
                "floor_cpu_s": base["floor_cpu_s"],
                "wall_ratio_to_floor": ratio,
                "cpu_ratio_to_floor": r["cpu_s"] / base["floor_cpu_s"],
                "meets_floor_wall_target": ratio <= FLOOR_WALL_TARGET,
            }
        )
    return out


def small_files(formats: list[str]) -> list[dict[str, Any]]:
    """The SMALL_MB capture in every format, ingested as a user would, against its own floor."""
    print(f"measuring the {SMALL_MB} MB capture ...", file=sys.stderr, flush=True)
    paths = inputs(SMALL_MB, formats)
    jsonl = inputs(SMALL_MB, ["jsonl"])["jsonl"]
    spent, _counts = _floor_without_gc(jsonl)
    base = {"floor_cpu_s": sum(spent.values())}
    rows = []
    for fmt in formats:
        if fmt == "otlp" and not otlp_reader_present():
            continue
        rows.append(bench_ingest(fmt, paths[fmt], OUT, jsonl.stat().st_size))
    return _small_rows(rows, base)


def _floor_line(report: dict[str, Any]) -> str:
    parts = report["floor_parts_cpu_s"]
    return (
        f"  floor (work no ingest can skip: + each response's events {parts['events']:.2f} "
        f"+ each segment's bytes and hashes {parts['segments']:.2f} "
        f"+ those hashes in Parquet {parts['parquet']:.2f} CPU s): "
        f"{report['floor_cpu_s']:.2f} CPU s = {report['floor_ratio_to_baseline_cpu']:.2f}x the "
        f"baseline ({report['floor_ratio_to_own_parse']:.2f}x its own parse), leaving "
        f"{report['target_cpu_s_left_after_floor']:.2f} CPU s of the {report['target_ratio']:.0f}x "
        "target for dialect logic, redaction, request rows, content and dedupe"
    )


def summary(report: dict[str, Any]) -> str:
    lines = [
        f"ingest benchmark: {report['capture_mb']:.0f} MB capture, {report['cores']} cores",
        f"  baseline (every line + request body, the best of "
        f"{', '.join(report['baseline_by_parser'])} per figure): "
        f"{report['baseline_parallel_s']:.2f} s on {report['cores']} cores, "
        f"{report['baseline_single_s']:.2f} s on one ({report['baseline_cpu_s']:.2f} CPU s)",
        _floor_line(report),
        f"  {'format':7s} {'file MB':>8s} {'wall s':>7s} {'MB/s':>6s} {'req/s':>7s} "
        f"{'peak MB':>8s} {'hwm MB':>7s} {'x base':>7s} {'x cpu':>6s} {'x floor':>7s}  target",
    ]
    for r in report["results"]:
        if not r.get("ok"):
            lines.append(f"  {r['format']:7s} {r.get('error', 'failed')}")
            continue
        met = "met" if r["meets_time_target"] and r["meets_memory_target"] else "NOT met"
        met += ", floor " + ("met" if r["meets_floor_cpu_target"] else "NOT met")
        lines.append(
            f"  {r['format']:7s} {r['file_mb']:8.0f} {r['wall_s']:7.2f} {r['mb_per_s']:6.1f} "
            f"{r['requests_per_s']:7.0f} {r['peak_pss_mb']:8.0f} {r['hwm_sum_mb']:7.0f} "
            f"{r['ratio_to_baseline']:7.2f} {r['cpu_ratio_to_baseline']:6.2f} "
            f"{r['cpu_ratio_to_floor']:7.2f}  {met}"
        )
    lines.append(
        "  MB/s = capture-JSONL-equivalent MB / wall s; peak MB = peak PSS of the process tree "
        "(sampled every 0.25 s); hwm MB = sum of each process's own RSS high-water mark (an upper "
        "bound, no spike missed); "
        "x base = wall / baseline on all cores; x cpu = CPU s of the ingest tree / baseline CPU s; "
        f"x floor = CPU s / floor CPU s (target {report['floor_cpu_target']:.1f}x)"
    )
    for r in report.get("small_files", []):
        if not r["ok"]:
            lines.append(f"  {SMALL_MB} MB capture, {r['format']}: {r['error']}")
            continue
        met = "met" if r["meets_floor_wall_target"] else "NOT met"
        lines.append(
            f"  {SMALL_MB} MB capture ({r['file_mb']:.0f} MB file), {r['format']}: "
            f"{r['wall_s']:.2f} s wall = "
            f"{r['wall_ratio_to_floor']:.2f}x its floor's {r['floor_cpu_s']:.2f} s on one core, "
            f"CPU {r['cpu_ratio_to_floor']:.2f}x (target {report['floor_wall_target']:.1f}x "
            f"wall): {met}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
