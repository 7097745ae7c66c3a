"""Spark local[2] against DuckDB on the same ~1 GB capture: ingest, then the derived views.

    python bench/spark.py [--size-mb 1024] [--master local[2]] [--json OUT]

Both engines run the same steps in a fresh process each (timed with the whole process tree's
peak memory by bench/measure.py): ingest the capture into an empty warehouse, then build the
materialised views (`cacheaudit build`: request_prefix, conversation_links, cache_breaks and what
they read). The Spark figures include starting the session (a JVM): that is what a user waits for.
The ratio is Spark time / DuckDB time; on one machine Spark is expected to be slower (JVM start,
Python<->JVM hand-offs, a shuffle where DuckDB shares memory). docs/cluster.md explains why it
still scales out. The two warehouses are then compared on headline numbers and row counts.

The capture is bench/out/capture-1024mb.jsonl when bench/ingest.py has generated it (reused),
else it is generated here with bench/formats.py, or pipeline.demo as a fallback.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import run_measured

OUT = Path(__file__).resolve().parent / "out"

DUCKDB_STEP = """
import sys, time
from pathlib import Path
from pipeline.warehouse import Warehouse
wh = Warehouse(Path(sys.argv[2]))
t = time.perf_counter()
if sys.argv[1] == "ingest":
    from pipeline.ingest import ingest
    r = ingest([Path(sys.argv[3])], wh)
    print("records", r.total("records"))
else:
    from pipeline import derived, materialise, sql
    for b in materialise.build(wh):
        print("built", b.name, b.rows)
print("work_s", time.perf_counter() - t)
"""

SPARK_STEP = """
import sys, time
from pathlib import Path
from pipeline.warehouse import Warehouse
from pipeline.engines.spark_session import get_session
t0 = time.perf_counter()
spark = get_session(sys.argv[4], app_name="cacheaudit bench")
print("session_s", time.perf_counter() - t0)
wh = Warehouse(Path(sys.argv[2]))
t = time.perf_counter()
if sys.argv[1] == "ingest":
    from pipeline.engines.spark_ingest import ingest
    r = ingest(spark, [Path(sys.argv[3])], wh)
    print("records", r.total("records"))
else:
    from pipeline.engines.spark_sql import build_derived
    for b in build_derived(spark, wh):
        print("built", b.name, b.rows)
print("work_s", time.perf_counter() - t)
spark.stop()
"""


def capture(size_mb: int) -> Path:
    cached = OUT / f"capture-{size_mb}mb.jsonl"
    if cached.exists():
        return cached
    OUT.mkdir(parents=True, exist_ok=True)
    try:
        from formats import make_capture

        make_capture(cached, size_mb * 1_000_000)
    except ImportError:  # bench/formats.py belongs to the ingest benchmark; fall back
        from pipeline.demo import write_demo

        write_demo(cached, seed=1, sessions=max(4, size_mb * 3))
    return cached


def step(code: str, *args: str) -> dict[str, Any]:
    m = run_measured([sys.executable, "-c", code, *args])
    if m.returncode != 0:
        raise SystemExit(f"step {args[0]} failed:\n{m.stderr[-3000:]}")
    figures: dict[str, Any] = {
        "wall_s": round(m.wall, 2),
        "cpu_s": round(m.cpu_s, 2),
        "peak_pss_mb": round(m.peak_pss_mb, 1),
    }
    for line in m.stdout.splitlines():
        key, _, value = line.partition(" ")
        if key in ("session_s", "work_s"):
            figures[key] = round(float(value), 2)
        elif key == "records":
            figures["records"] = int(value)
    return figures


def compare(duck_root: Path, spark_root: Path) -> dict[str, Any]:
    """Headline numbers and derived row counts from both warehouses, read by DuckDB."""
    from pipeline import derived, sql
    from pipeline.warehouse import Warehouse

    out: dict[str, Any] = {}
    for label, root in (("duckdb", duck_root), ("spark", spark_root)):
        con = sql.connect(Warehouse(root))
        head = con.sql("SELECT requests, input_tokens, cache_read_tokens FROM headline")
        rows = {"headline": list(head.fetchall()[0])}
        for name in derived.MATERIALISED:
            path = derived.derived_path(Warehouse(root), name)
            pattern = str(path / "**" / "*.parquet") if path.is_dir() else str(path)
            count = con.sql("SELECT count(*) FROM read_parquet($p)", params={"p": pattern})
            rows[name] = count.fetchall()[0][0]
        out[label] = rows
    out["same"] = out["duckdb"] == out["spark"]
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--json", type=Path, default=os.environ.get("BENCH_JSON"))
    args = ap.parse_args(argv)
    try:
        import pyspark  # noqa: F401
    except ImportError:
        print('spark benchmark skipped: pyspark is not installed (pip install -e ".[spark]")')
        return 0
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        print("spark benchmark skipped: no Java runtime")
        return 0
    src = capture(args.size_mb)
    size_mb = src.stat().st_size / 1e6
    print(f"capture: {src} ({size_mb:.0f} MB), spark master {args.master}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="cacheaudit-bench-spark-", dir=OUT))
    try:
        duck, spark = work / "duckdb", work / "spark"
        result: dict[str, Any] = {
            "benchmark": "spark",
            "cores": os.cpu_count(),
            "capture_mb": round(size_mb, 1),
            "master": args.master,
            "load_avg_1m_before": os.getloadavg()[0],
        }
        for phase in ("ingest", "build"):
            d = step(DUCKDB_STEP, phase, str(duck), str(src))
            s = step(SPARK_STEP, phase, str(spark), str(src), args.master)
            result[phase] = {"duckdb": d, "spark": s, "ratio": round(s["wall_s"] / d["wall_s"], 2)}
            print(
                f"{phase:7s} duckdb {d['wall_s']:7.1f} s   spark {s['wall_s']:7.1f} s"
                f" (session {s.get('session_s', 0):.1f} s)   ratio {result[phase]['ratio']:.2f}x"
                f"   peak memory {d['peak_pss_mb']:.0f} / {s['peak_pss_mb']:.0f} MB",
                flush=True,
            )
        total_d = result["ingest"]["duckdb"]["wall_s"] + result["build"]["duckdb"]["wall_s"]
        total_s = result["ingest"]["spark"]["wall_s"] + result["build"]["spark"]["wall_s"]
        result["total"] = {
            "duckdb_s": round(total_d, 2),
            "spark_s": round(total_s, 2),
            "ratio": round(total_s / total_d, 2),
        }
        result["same_numbers"] = compare(duck, spark)
        print(
            f"total   duckdb {total_d:7.1f} s   spark {total_s:7.1f} s"
            f"   ratio {result['total']['ratio']:.2f}x (Spark local[2] / DuckDB)"
        )
        print(f"same headline numbers and derived row counts: {result['same_numbers']['same']}")
        result["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=2, default=str))
        return 0 if result["same_numbers"]["same"] else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
