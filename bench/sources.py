"""Benchmark: a warehouse of many small sources (a proxy rotating its capture every hour).

    .venv/bin/python bench/sources.py [--size-mb 256] [--keep /tmp/sources]

The demo traffic of bench/formats.py (bench/ingest.py's capture when there is one, else
generated once and cached under bench/out/) is split into 24 files a day, as a proxy rotating
its capture every hour in front of agents working all day would leave them, and ingested into
one warehouse, one source per file. Then, each command in its own process: `build` (the first,
which also copies each day held in many parts into one file: pipeline/compaction.py),
`build --force`, `summary`, `summary --by day --since` (the last 7 days), `report weekly
--week` (the week before the last day) and an ingest of 3 new records into a copy of the
warehouse. The reading commands and the small ingest run again with the copies removed (the
stored views stay current: they do not depend on the copies), which is how every day was read
before the copies existed. Printed, and written to BENCH_JSON: seconds and peak memory of each
step, and each step's time without the copies against with them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import zlib
from collections import defaultdict
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from formats import make_capture  # noqa: E402
from history import timed  # noqa: E402

OUT = ROOT / "bench" / "out"
FILES_PER_DAY = 24


def hourly_files(size_mb: int) -> tuple[list[Path], Path]:
    """The capture split into FILES_PER_DAY files a day (cached): the files in order, and 3
    held-back records."""
    capture = OUT / f"capture-{size_mb}mb.jsonl"  # bench/ingest.py's, when it made one
    if not capture.exists():
        capture = OUT / f"sources-{size_mb}mb.jsonl"
    if not capture.exists():
        print(f"generating {capture.name} ...", file=sys.stderr, flush=True)
        make_capture(capture, size_mb * 1024 * 1024)
    folder = OUT / f"sources-{size_mb}mb-split"
    held = OUT / f"sources-{size_mb}mb-three.jsonl"
    if not (folder / "done").exists():
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        # The demo's sessions run at a few hours of each day; a proxy rotating hourly in front
        # of agents working all day leaves FILES_PER_DAY files a day, a session's requests
        # spread over them (its account, not its file, is its cache scope).
        files: dict[tuple[str, int], list[bytes]] = defaultdict(list)
        with capture.open("rb") as fh:
            lines = fh.readlines()
        held.write_bytes(b"".join(lines[-3:]))
        for line in lines[:-3]:
            record = orjson.loads(line)
            slot = zlib.crc32(record["id"].encode()) % FILES_PER_DAY
            files[(record["started_at"][:10], slot)].append(line)
        for (day, slot), group in files.items():
            (folder / f"capture-{day}-{slot:02}.jsonl").write_bytes(b"".join(group))
        (folder / "done").touch()
    return sorted(folder.glob("capture-*.jsonl")), held


def _last_days(wh: Path) -> tuple[date, date]:
    days = sorted(date.fromisoformat(p.name[4:]) for p in (wh / "requests").glob("day=2*"))
    return days[0], days[-1]


def reads(wh: Path, work: Path, held: Path, since: date, week: str) -> dict[str, float]:
    """Seconds of each reading command, and of a 3-record ingest into a copy of `wh`."""
    out: dict[str, float] = {}
    out["summary_s"], out["summary_peak_mb"] = timed(["summary", "-w", str(wh)])
    out["summary_by_day_s"], _ = timed(
        ["summary", "--by", "day", "--since", since.isoformat(), "-w", str(wh)]
    )
    report_out = work / "report"
    shutil.rmtree(report_out, ignore_errors=True)
    out["report_s"], out["report_peak_mb"] = timed(
        ["report", "weekly", "--week", week, "-w", str(wh), "--out", str(report_out)]
    )
    copy = work / "ingest-copy"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(wh, copy)
    out["ingest_3_s"], _ = timed(["ingest", str(held), "-w", str(copy)])
    shutil.rmtree(copy)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=256)
    parser.add_argument("--keep", type=Path, help="write the warehouse here and keep it")
    args = parser.parse_args()
    files, held = hourly_files(args.size_mb)
    work = args.keep or Path(tempfile.mkdtemp(prefix="cacheaudit-sources-"))
    wh = work / "wh"
    shutil.rmtree(wh, ignore_errors=True)
    try:
        # one source per file, as when each is ingested on arrival; one command is faster
        ingest_s, _ = timed(["ingest", *map(str, files), "-w", str(wh)])
        print(f"{len(files)} files ingested in {ingest_s:.0f} s", flush=True)
        first, last = _last_days(wh)
        iso = max(first, last - timedelta(days=7)).isocalendar()  # a whole week, if any
        week = f"{iso[0]}-W{iso[1]:02d}"
        since = max(first, last - timedelta(days=6))
        result: dict[str, Any] = {
            "sources": len(files),
            "requests": sum(
                pq.read_metadata(p).num_rows for p in (wh / "requests").rglob("*.parquet")
            ),
            "size_mb": args.size_mb,
            "week": week,
        }
        result["first_build_s"], result["first_build_peak_mb"] = timed(["build", "-w", str(wh)])
        result["build_force_s"], _ = timed(["build", "--force", "-w", str(wh)])
        copies = sorted((wh / "derived" / "compact").rglob("*.parquet"))
        result["copies"] = len(copies)
        result["copies_mb"] = round(sum(p.stat().st_size for p in copies) / 1024**2, 1)
        result["parts_mb"] = round(
            sum(p.stat().st_size for t in ("requests", "segments")
                for p in (wh / t).rglob("*.parquet")) / 1024**2, 1
        )  # fmt: skip
        with_copies = reads(wh, work, held, since, week)
        shutil.rmtree(wh / "derived" / "compact", ignore_errors=True)
        without = reads(wh, work, held, since, week)
        result["with_copies"], result["parts_only"] = with_copies, without
        result["parts_only_over_copies"] = {
            k: round(without[k] / with_copies[k], 2) for k in with_copies if k.endswith("_s")
        }
        print(json.dumps(result, indent=1))
        if os.environ.get("BENCH_JSON"):
            Path(os.environ["BENCH_JSON"]).write_text(json.dumps(result, indent=1))
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
