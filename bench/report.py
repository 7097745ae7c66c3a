"""Benchmark: the weekly report over a week of N synthetic requests (default 1,000,000).

    .venv/bin/python bench/report.py                    # 1,000,000 requests in 2026-W48
    .venv/bin/python bench/report.py --requests 100000 --keep /tmp/wh

The warehouse is written directly with pyarrow (no capture, no ingest): random providers,
models, prompt lengths, cache reads, 1% of requests without usage, streamed or not, with timing.
Then it times `report weekly --week 2026-W48` and prints seconds and the page size: every chart
is aggregated in SQL, so the page stays small whatever the row count.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipeline import schema  # noqa: E402
from pipeline.reports import bundle  # noqa: E402
from pipeline.reports.weekly import WeekSelection, generate_weekly  # noqa: E402
from pipeline.warehouse import Warehouse  # noqa: E402

KEY = "1" * 16
MONDAY = datetime(2026, 11, 23, tzinfo=UTC)
MODELS = [
    ("deepseek", "deepseek-chat"),
    ("deepseek", "deepseek-reasoner"),
    ("openai", "gpt-4.1-2025-04-14"),
    ("openai", "gpt-4.1-mini-2025-04-14"),
]


def _floor_int(values: pa.Array) -> pa.Array:
    return pc.cast(pc.floor(values), pa.int64())


def synthetic_requests(n: int) -> pa.Table:
    def rnd() -> pa.Array:
        return pc.random(n)

    week_us = 7 * 86_400 * 1_000_000
    start_us = int(MONDAY.timestamp() * 1_000_000)
    started = pc.cast(
        pc.add(_floor_int(pc.multiply(rnd(), week_us)), start_us), pa.timestamp("us", tz="UTC")
    )
    pick = _floor_int(pc.multiply(rnd(), len(MODELS)))
    provider = pc.take(pa.array([p for p, _ in MODELS]), pick)
    model = pc.take(pa.array([m for _, m in MODELS]), pick)
    input_tokens = pc.add(_floor_int(pc.multiply(pc.power(rnd(), 2), 60_000)), 300)
    share = pc.if_else(pc.less(rnd(), 0.25), 0.0, rnd())
    read = _floor_int(pc.multiply(input_tokens, share))
    missing = pc.less(rnd(), 0.01)
    null_int = pa.scalar(None, pa.int64())
    input_tokens = pc.if_else(missing, null_int, input_tokens)
    read = pc.if_else(missing, null_int, read)
    output = pc.if_else(missing, null_int, _floor_int(pc.multiply(rnd(), 800)))
    stream = pc.less(rnd(), 0.6)
    ttft = pc.add(pc.multiply(pc.subtract(1.0, share), 1500.0), pc.multiply(rnd(), 600.0))
    ttft = pc.if_else(stream, ttft, pc.add(ttft, 2500.0))
    columns = {
        "request_id": pa.array([f"b{i}" for i in range(n)]),
        "started_at": started,
        "day": pc.cast(started, pa.date32()),
        "provider": provider,
        "api": pa.repeat(pa.scalar("chat_completions"), n),
        "model": model,
        "stream": stream,
        "status_code": pa.repeat(pa.scalar(200, pa.int32()), n),
        "outcome": pc.if_else(missing, "interrupted", "ok"),
        "usage_status": pc.if_else(missing, "missing", "reported"),
        "input_tokens": input_tokens,
        "cache_read_tokens": read,
        "uncached_input_tokens": pc.subtract(input_tokens, read),
        "output_tokens": output,
        "ttft_ms": ttft,
        "source": pa.repeat(pa.scalar("bench.jsonl"), n),
        "source_index": pa.array(range(n), pa.int64()),
    }
    arrow = schema.load("requests").arrow(with_partition=True)
    return pa.table({f.name: columns.get(f.name, pa.nulls(n, f.type)) for f in arrow}, schema=arrow)


def write_warehouse(root: Path, n: int) -> Warehouse:
    wh = Warehouse(root)
    wh.ensure()
    ds.write_dataset(
        synthetic_requests(n),
        root / "requests",
        format="parquet",
        partitioning=ds.partitioning(pa.schema([("day", pa.date32())]), flavor="hive"),
        basename_template=f"{KEY}-{{i}}.parquet",
        existing_data_behavior="overwrite_or_ignore",
    )
    wh.write_manifest(
        {
            "source": "bench.jsonl",
            "source_hash": KEY * 2,
            "format": "capture_jsonl",
            "size_bytes": 0,
            "records": n,
            "accepted": n,
            "rejected": 0,
            "skipped": 0,
            "ingested_at": datetime.now(UTC),
            "cacheaudit_version": "bench",
        }
    )
    return wh


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--keep", type=Path, help="write the warehouse here and keep it")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="cacheaudit-bench-report-"))
    try:
        t0 = time.perf_counter()
        wh = write_warehouse(root / "wh", args.requests)
        built = time.perf_counter() - t0
        bundle.javascript()  # warm the on-disk bundle cache: not part of the report's time
        t1 = time.perf_counter()
        result = generate_weekly(wh, root / "out", WeekSelection(week="2026-W48"))
        seconds = time.perf_counter() - t1
        page = result.written[0]
        size = page.stat().st_size
        print(f"synthetic warehouse: {args.requests:,} requests written in {built:.1f} s")
        print(f"report weekly 2026-W48: {seconds:.2f} s, page {size:,} bytes ({page})")
        print(f"  of which the inlined Vega bundle: {len(bundle.javascript()):,} bytes")
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
