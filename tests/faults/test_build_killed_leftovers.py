"""A build killed while it wrote a view (SIGKILL, SIGTERM, the OOM killer: none of its clean-up
runs) left the half-written view in `derived/` for good: nothing removed it, and on a large
warehouse it is as large as the stored view. The next build removes the work of builds that are
gone, and only theirs: builds run side by side.

Found by killing `cacheaudit build` at random moments: `derived/.conversation_links.parquet.
<pid>.tmp` was still there after the build ran again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import run_cli
from test_forget import _warehouse


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_the_next_build_removes_what_a_killed_build_left_and_keeps_a_running_ones(
    tmp_path: Path,
) -> None:
    _, _, wh = _warehouse(tmp_path)  # built: the next build has nothing to compute
    derived = wh / "derived"
    dead, running = _dead_pid(), os.getppid()
    killed = [
        derived / f".request_prefix.parquet.{dead}.tmp",
        derived / f".request_prefix.parquet.{dead}.tmp.work",
        derived / f".conversation_links.parquet.{dead}.tmp",
    ]
    for folder in killed:
        (folder / "2026-11-16").mkdir(parents=True)
        (folder / "2026-11-16" / "part.parquet").write_bytes(b"PAR1")
    (derived / f".cache_breaks.parquet.{dead}.tmp").write_bytes(b"PAR1")
    (derived / f"cache_breaks.stamp.{dead}.tmp").write_text("{}")
    alive = derived / f".request_prefix.parquet.{running}.tmp"
    (alive / "2026-11-16").mkdir(parents=True)

    done = run_cli("build", "-w", str(wh))
    assert done.returncode == 0, done.stderr

    assert sorted(p.name for p in derived.iterdir() if ".tmp" in p.name) == [alive.name]


def test_the_next_ingest_removes_the_database_file_a_killed_ingest_was_writing(
    tmp_path: Path,
) -> None:
    a, _, wh = _warehouse(tmp_path)
    dead, running = _dead_pid(), os.getppid()
    killed = [wh / f".cacheaudit.duckdb.{dead}.tmp", wh / f".cacheaudit.duckdb.{dead}.tmp.wal"]
    alive = wh / f".cacheaudit.duckdb.{running}.tmp"
    for path in [*killed, alive]:
        path.write_bytes(b"x" * 1000)

    done = run_cli("ingest", str(a), "-w", str(wh))  # unchanged: it rewrites the file only
    assert done.returncode == 0, done.stderr

    assert sorted(p.name for p in wh.iterdir() if p.name.endswith((".tmp", ".wal"))) == [alive.name]
