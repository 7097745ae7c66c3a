"""Peak memory of ingesting a large directory of VCR cassettes.

The demo traffic (`pipeline.demo.write_demo`, several seeds) is rewritten as vcrpy YAML
cassettes, one per session (a multi-turn agent run, as a test suite records one per test), in
vcrpy's shape: request `{method, uri, headers: {name: [value]}, body}`, response `{status:
{code, message}, headers, body: {string}}`, the response's `Date` header from the record's
start. Every other cassette keeps its response bodies gzip-compressed as `!!binary` with
`Content-Encoding: gzip`, as vcrpy does without `decode_compressed_response`. Then
`cacheaudit ingest DIR` runs under `bench.measure` and the peak memory of its whole process
tree is printed.

    .venv/bin/python bench/cassettes.py --mb 220 [--workers 2] [--dir /tmp/cassettes]
"""

from __future__ import annotations

import argparse
import gzip
import sys
import tempfile
from collections import defaultdict
from datetime import datetime
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import orjson
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.measure import run_measured
from pipeline.demo import write_demo

try:
    _Dumper: Any = yaml.CSafeDumper
except AttributeError:  # pragma: no cover
    _Dumper = yaml.SafeDumper


def _interaction(record: dict[str, Any], compress: bool) -> dict[str, Any]:
    request, response = record["request"], record["response"]
    started = datetime.fromisoformat(record["started_at"].replace("Z", "+00:00"))
    headers: dict[str, list[str]] = defaultdict(list)
    for name, value in response["headers"]:
        headers[name].append(value)
    headers["Date"] = [format_datetime(started, usegmt=True)]
    body: Any = response["body"]
    if compress:
        body = gzip.compress(body.encode(), compresslevel=1)
        headers["Content-Encoding"] = ["gzip"]
    return {
        "request": {
            "method": request["method"],
            "uri": request["url"],
            "headers": {name: [value] for name, value in request["headers"]},
            "body": request["body"],
        },
        "response": {
            "status": {"code": response["status"], "message": "OK"},
            "headers": dict(headers),
            "body": {"string": body},
        },
    }


def make_cassettes(out: Path, target_bytes: int) -> tuple[int, int]:
    """Write cassettes into `out` until they hold `target_bytes`; (files, bytes)."""
    out.mkdir(parents=True, exist_ok=True)
    files = total = 0
    seed = 1
    with tempfile.TemporaryDirectory() as tmp:
        while total < target_bytes:
            capture = Path(tmp) / f"demo-{seed}.jsonl"
            write_demo(capture, seed=seed, sessions=24)
            sessions: dict[str, list[dict[str, Any]]] = defaultdict(list)
            with capture.open("rb") as fh:
                for line in fh:
                    record = orjson.loads(line)
                    if record.get("response") and record["response"].get("body") is not None:
                        sessions[record["hints"].get("session_id") or "none"].append(record)
            for session, records in sessions.items():
                cassette = {
                    "interactions": [_interaction(r, files % 2 == 1) for r in records],
                    "version": 1,
                }
                path = out / f"seed{seed:03d}" / f"test_{session}.yaml"
                path.parent.mkdir(exist_ok=True)
                path.write_text(yaml.dump(cassette, Dumper=_Dumper))
                files += 1
                total += path.stat().st_size
                if total >= target_bytes:
                    break
            seed += 1
    return files, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=220, help="size of the cassette directory")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--dir", type=Path, default=None, help="keep the cassettes here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.dir or Path(tmp) / "cassettes"
        files, size = make_cassettes(root, args.mb * 1024 * 1024)
        largest = max(p.stat().st_size for p in root.rglob("*.yaml"))
        print(f"{files} cassettes, {size / 2**20:.0f} MB, largest {largest / 2**20:.1f} MB")
        # The ingest itself (reading, normalising, writing parts), then the whole CLI command,
        # which also rewrites the warehouse's DuckDB file after the ingest.
        code = (
            "import sys; from pathlib import Path; from pipeline.ingest import ingest;"
            " from pipeline.warehouse import Warehouse;"
            " files = sorted(Path(sys.argv[1]).rglob('*.yaml'));"
            " r = ingest(files, Warehouse(Path(sys.argv[2])), workers=int(sys.argv[3]));"
            " print(f'accepted: {r.total(\"accepted\")}', file=sys.stderr)"
        )
        runs = {
            "ingest (library)": [sys.executable, "-c", code, str(root), str(Path(tmp) / "wh1")],
            "cacheaudit ingest (CLI)": [
                *(sys.executable, "-m", "pipeline", "ingest", str(root)),
                *("-w", str(Path(tmp) / "wh2"), "--workers"),
            ],
        }
        for name, cmd in runs.items():
            m = run_measured([*cmd, str(args.workers)])
            print(
                f"{name}: {m.wall:.1f} s wall, {m.cpu_s:.1f} CPU s, peak PSS of the process"
                f" tree {m.peak_pss_mb:.0f} MB, largest single process"
                f" {m.max_rss_single_mb:.0f} MB (sum of high-water marks {m.hwm_sum_mb:.0f} MB),"
                f" exit {m.returncode}"
            )
            print("  " + next(x for x in m.stderr.splitlines() if x.startswith(("total", "acc"))))


if __name__ == "__main__":
    main()
