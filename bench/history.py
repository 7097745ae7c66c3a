"""Benchmark: a weekly report and a build as history grows.

    .venv/bin/python bench/history.py                       # 100,000 requests a week, 1 vs 20 weeks
    .venv/bin/python bench/history.py --per-week 500000 --weeks 20 --keep /tmp/hist

Synthetic warehouses (bench/views.py's generator: agent conversations with growing histories,
~30 segments a request): one holding a single week of N requests, one holding the same kind of
week 20 times over (distinct conversations, one source per week), and, for the build, one of a
tenth of those weeks (2 of 20: 1M requests against 10M at --per-week 500000). Each is built
(`cacheaudit build`), then `report weekly --week` renders its last week (not in the tenth)
twice in a row; the faster run counts (both are printed): right after a large build the files
the report reads may have been evicted from the page cache.
Every step runs as its own process, so each peak memory is that step's alone. Printed, and
written to BENCH_JSON: the seconds and peak memory of each step, the report's ratio between one
week and all (target: within 1.2x, under 1.5 GB) and the build's time per request between a
tenth and all (target: within 1.5x).

Then one new day (a seventh of a week's requests, a source of its own) is written into the
largest warehouse and `build` timed again: request_prefix computes that day and the horizon
after it, conversation_links and cache_breaks the days from it on (all stored by day). The
same day is built alone in a warehouse of its own for comparison (target: within 2x). The
day's source is removed afterwards, so a kept warehouse stays as generated.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from views import make_warehouse  # noqa: E402

FIRST_MONDAY = date(2026, 7, 13)


def _week_start(i: int) -> date:
    return FIRST_MONDAY + timedelta(weeks=i)


def make_history(root: Path, per_week: int, weeks: int, last: int) -> int:
    """Weeks `last - weeks + 1 .. last` of `per_week` requests each; returns the requests."""
    total = 0
    conversations = per_week // 20 + 64  # room for each week's conversation numbers
    for i in range(last - weeks + 1, last + 1):
        # a week's conversations start within its first six days: their turns stay in it
        n, _ = make_warehouse(
            root,
            per_week,
            start=_week_start(i).isoformat(),
            days=6,
            first=i * conversations,
            key=f"{i + 1:016x}",
        )
        total += n
    return total


def _requests(root: Path) -> int:
    import pyarrow.parquet as pq

    return sum(pq.read_metadata(p).num_rows for p in (root / "requests").rglob("*.parquet"))


class Failed(Exception):
    """A measured command exited non-zero; its message is the command's last error line."""


def timed(args: list[str], *, with_stderr: bool = False) -> Any:
    """Seconds and peak resident memory (MB) of one cacheaudit command in its own process (and
    its stderr `with_stderr`)."""
    # The peak is the process's VmHWM: ru_maxrss survives exec, so a child would report the
    # bench's own peak (the generator's) whenever that is higher.
    code = (
        "import runpy, sys\n"
        "sys.argv = ['cacheaudit', *sys.argv[1:]]\n"
        "try:\n"
        "    runpy.run_module('pipeline', run_name='__main__')\n"
        "finally:\n"
        "    with open('/proc/self/status') as fh:\n"
        "        kb = [int(ln.split()[1]) for ln in fh if ln.startswith('VmHWM:')]\n"
        "    print(f'PEAK_MB {kb[0] / 1024:.0f}', file=sys.stderr)\n"
    )
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True
    )
    took = time.perf_counter() - start
    if proc.returncode != 0:
        errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
        raise Failed(errors[-1] if errors else proc.stderr[-500:])
    peak = [ln for ln in proc.stderr.splitlines() if ln.startswith("PEAK_MB ")]
    peak_mb = float(peak[-1].split()[1]) if peak else float("nan")
    return (took, peak_mb, proc.stderr) if with_stderr else (took, peak_mb)


def measure(root: Path, week: str, out: Path, *, report: bool = True) -> dict[str, Any]:
    """Build, then the week's report. A build that fails (out of memory at 10M requests on
    2 cores and 24 GB) is recorded, and the report is timed computing its own views."""
    result: dict[str, Any] = {}
    try:
        result["build_s"], result["build_peak_mb"] = timed(["build", "-w", str(root)])
    except Failed as exc:
        result["build_failed"] = str(exc)
    if not report:
        return result
    # Twice, the faster run counting: the first report after a 10M-request build found the
    # files it reads evicted from the page cache by the build (10.5 s, then 7.0 s, against
    # 7.6 and 6.9 s for one week), which measured the bench's order, not the history.
    runs = [
        timed(["report", "weekly", "-w", str(root), "--week", week, "--out", str(out)])
        for _ in range(2)
    ]
    result["report_runs_s"] = [round(seconds, 2) for seconds, _peak in runs]
    result["report_s"] = min(seconds for seconds, _peak in runs)
    result["report_peak_mb"] = max(peak for _seconds, peak in runs)
    return result


NEW_DAY_KEY = f"{0xDA7:016x}"


def _view_seconds(stderr: str) -> dict[str, float]:
    """Seconds per view from build's stderr (`request_prefix: 1,070,120 rows in 11.5 s ...`)."""
    out = {}
    for line in stderr.splitlines():
        match = re.match(r"^(\w+): [\d,]+ rows? in ([\d.]+) s", line)
        if match:
            out[match.group(1)] = float(match.group(2))
    return out


def _remove_source(root: Path, key: str) -> None:
    for path in [*root.glob(f"*/{key}*.parquet"), *root.glob(f"*/day=*/{key}*.parquet")]:
        path.unlink()


def new_day(root: Path, work: Path, per_week: int, last: int) -> dict[str, Any]:
    """`build` after one new day written into the built warehouse `root`, and that day's build
    alone in a warehouse of its own."""
    day = _week_start(last + 1)
    per_day = per_week // 7
    first = (last + 1) * (per_week // 20 + 64)
    alone = work / "new_day_alone"
    shutil.rmtree(alone, ignore_errors=True)
    try:
        make_warehouse(root, per_day, start=day.isoformat(), days=1, first=first, key=NEW_DAY_KEY)
        took, peak, stderr = timed(["build", "-w", str(root)], with_stderr=True)
        make_warehouse(alone, per_day, start=day.isoformat(), days=1, first=first, key=NEW_DAY_KEY)
        alone_s, alone_peak, alone_err = timed(["build", "-w", str(alone)], with_stderr=True)
    finally:
        _remove_source(root, NEW_DAY_KEY)
        shutil.rmtree(alone, ignore_errors=True)
    return {
        "day": day.isoformat(),
        "day_requests": per_day,
        "build_s": took,
        "build_peak_mb": peak,
        "views_s": _view_seconds(stderr),
        "alone_build_s": alone_s,
        "alone_peak_mb": alone_peak,
        "alone_views_s": _view_seconds(alone_err),
        "ratio": round(took / alone_s, 3),
    }


def _line(r: dict[str, Any], week: str) -> str:
    build = (
        f"build FAILED ({r['build_failed']})"
        if "build_failed" in r
        else f"build {r['build_s']:.1f} s (peak {r['build_peak_mb']:,.0f} MB)"
    )
    if "report_s" not in r:
        return build
    return (
        f"{build}, report --week {week} {r['report_s']:.1f} s (runs "
        + ", ".join(f"{s:.1f}" for s in r.get("report_runs_s", [r["report_s"]]))
        + f" s; peak {r['report_peak_mb']:,.0f} MB)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-week", type=int, default=100_000)
    parser.add_argument("--weeks", type=int, default=20)
    parser.add_argument("--keep", type=Path, help="write the warehouses here and keep them")
    parser.add_argument(
        "--generate-only", action="store_true", help="write the warehouses (with --keep), no timing"
    )
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="cacheaudit-history-"))
    last = args.weeks - 1
    monday = _week_start(last)
    week = f"{monday.isocalendar()[0]}-W{monday.isocalendar()[1]:02d}"
    results: dict[str, dict[str, Any]] = {}
    try:
        # The build's time per request is compared across a tenth of the history and all of
        # it (the target: 10M requests within 1.5x of 1M); the report across 1 week and all.
        base = max(1, args.weeks // 10)
        sizes = [("one_week", 1)] + ([(f"{base}_weeks", base)] if base > 1 else [])
        for label, weeks in [*sizes, (f"{args.weeks}_weeks", args.weeks)]:
            root = work / label
            if not (root / "sources").is_dir():
                shutil.rmtree(root, ignore_errors=True)
                t0 = time.perf_counter()
                n = make_history(root, args.per_week, weeks, last)
                print(f"{label}: {n:,} requests written in {time.perf_counter() - t0:.0f} s")
            if args.generate_only:
                continue
            shutil.rmtree(root / "derived", ignore_errors=True)
            shutil.rmtree(work / f"{label}-out", ignore_errors=True)
            only_built = base > 1 and weeks == base  # its report would tell nothing new
            results[label] = measure(root, week, work / f"{label}-out", report=not only_built)
            results[label]["requests"] = _requests(root)
            print(f"{label}: {_line(results[label], week)}")
        if args.generate_only:
            return
        one, many = results["one_week"], results[f"{args.weeks}_weeks"]
        small = results[sizes[-1][0]]
        mode = "stored views"
        if "build_failed" in many and "build_failed" not in one:
            # compare like with like: the one-week report computing its own views too
            shutil.rmtree(work / "one_week" / "derived", ignore_errors=True)
            one["report_s"], one["report_peak_mb"] = timed(
                ["report", "weekly", "-w", str(work / "one_week"), "--week", week,
                 "--out", str(work / "one_week-out")]
            )  # fmt: skip
            mode = "views computed by the report (the big build failed)"
            print(f"one_week, without a build: report {one['report_s']:.1f} s")
        summary: dict[str, Any] = {
            "per_week": args.per_week,
            "weeks": args.weeks,
            "report_mode": mode,
            "report_ratio": round(many["report_s"] / one["report_s"], 3),
            "report_peak_mb": round(max(one["report_peak_mb"], many["report_peak_mb"])),
            "build_base_weeks": base,
            "build_per_request_ratio": (
                round(
                    (many["build_s"] / many["requests"]) / (small["build_s"] / small["requests"]),
                    3,
                )
                if "build_s" in many and "build_s" in small
                else None
            ),
            "runs": results,
        }
        if "build_s" in many:
            summary["new_day"] = new_day(work / f"{args.weeks}_weeks", work, args.per_week, last)
        per_request = summary["build_per_request_ratio"]
        print(
            f"report of one week ({mode}): {summary['report_ratio']:.2f}x with {args.weeks} "
            f"weeks of history (target <= 1.2x), peak {summary['report_peak_mb']:,} MB "
            f"(target < 1,536); build per request, {args.weeks} vs {base} week(s): "
            + (f"{per_request:.2f}x" if per_request is not None else "n/a (a build failed)")
            + " (target <= 1.5x)"
        )
        if "new_day" in summary:
            d = summary["new_day"]
            print(
                f"build after one new day ({d['day_requests']:,} requests): {d['build_s']:.1f} s "
                f"(views {d['views_s']}), that day alone {d['alone_build_s']:.1f} s: "
                f"{d['ratio']:.2f}x (target <= 2x)"
            )
        if os.environ.get("BENCH_JSON"):
            Path(os.environ["BENCH_JSON"]).write_text(json.dumps(summary, indent=1))
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
