"""`make bench`: run every benchmark module that exists, print a combined summary and write
bench/out/results.json.

Each module runs as its own process (`python bench/<name>.py`), one after the other (the
machine's cores are the thing being measured). Contract for a module: exit 0 when it ran; write
its figures as JSON to the path in the BENCH_JSON environment variable (optional; its last
output lines are kept otherwise). A module that is not there is reported as "not present", not
as a failure. Extra arguments go to every module unchanged only with `--`, e.g.
`python bench/run.py ingest -- --size-mb 200` runs just the ingest benchmark, smaller.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
OUT = BENCH / "out"
MODULES = ("ingest", "views", "proxy", "report", "history", "sources", "spark")


def run_module(name: str, extra: list[str]) -> dict[str, Any]:
    script = BENCH / f"{name}.py"
    if not script.exists():
        return {"module": name, "status": "not present"}
    out_json = OUT / f"{name}.json"
    out_json.unlink(missing_ok=True)
    env = {**os.environ, "BENCH_JSON": str(out_json), "PYTHONUNBUFFERED": "1"}
    print(f"== bench/{name}.py", flush=True)
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(script), *extra], env=env, stdout=subprocess.PIPE, text=True
    )
    wall = time.perf_counter() - start
    print(proc.stdout, end="", flush=True)
    result: dict[str, Any] = {
        "module": name,
        "status": "ok" if proc.returncode == 0 else f"failed (exit {proc.returncode})",
        "wall_s": round(wall, 2),
    }
    if out_json.exists():
        try:
            result["results"] = json.loads(out_json.read_text())
        except json.JSONDecodeError:
            result["results"] = None
    else:
        result["output_tail"] = proc.stdout.strip().splitlines()[-15:]
    return result


def main(argv: list[str]) -> int:
    extra: list[str] = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1 :]
        argv = argv[: argv.index("--")]
    names = argv or list(MODULES)
    OUT.mkdir(parents=True, exist_ok=True)
    results = [run_module(name, extra) for name in names]
    (OUT / "results.json").write_text(json.dumps({"modules": results}, indent=2, default=str))
    print("\n== summary")
    for r in results:
        wall = f" in {r['wall_s']:.0f} s" if "wall_s" in r else ""
        print(f"  {r['module']:8s} {r['status']}{wall}")
    print(f"  figures: {OUT / 'results.json'}")
    return 0 if all(r["status"] in ("ok", "not present") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
