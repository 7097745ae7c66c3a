"""A killed ingest leaves its scratch in one folder of the temporary directory named for its
pid (spill files of decompressed lines, multiprocessing's socket folder: no loose `pymp-*`),
and the next ingest removes the folders of ingests that are gone, and only those."""

from __future__ import annotations

import gzip
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_ingest_support import capture_record, line, run

from pipeline.ingest_pool import SCRATCH_PREFIX, remove_stale_scratch


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "pass"], check=True)
    assert done.returncode == 0
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_only_scratch_folders_of_processes_that_are_gone_are_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = tmp_path / f"{SCRATCH_PREFIX}{_dead_pid()}-abc123"
    (dead / "spill-x").mkdir(parents=True)
    (dead / "spill-x" / "00000001.block").write_bytes(b"x" * 1000)
    alive = tmp_path / f"{SCRATCH_PREFIX}{os.getppid()}-def456"  # pytest's parent: running
    alive.mkdir()
    legacy_new = tmp_path / f"{SCRATCH_PREFIX}k2j3h4g5"  # no pid, recent: another version's
    legacy_new.mkdir()
    legacy_old = tmp_path / f"{SCRATCH_PREFIX}a1b2c3d4"
    legacy_old.mkdir()
    two_days_ago = time.time() - 2 * 24 * 3600
    os.utime(legacy_old, (two_days_ago, two_days_ago))
    other = tmp_path / "pymp-zzz"  # some other program's multiprocessing folder
    other.mkdir()

    capture = tmp_path / "c.jsonl"
    capture.write_bytes(line(capture_record(1, record_id="r1")))
    run([capture], tmp_path / "wh")  # removes them under the warehouse lock

    assert not dead.exists() and not legacy_old.exists()
    assert alive.exists() and legacy_new.exists() and other.exists()
    assert remove_stale_scratch() == 0  # nothing left to remove


@pytest.fixture
def short_tmpdir() -> Iterator[Path]:
    """A temporary directory with a short path: the fork server's socket lives in it, and a
    Unix socket's path has at most 107 bytes (a pytest tmp_path is longer than that allows)."""
    folder = Path(tempfile.mkdtemp(prefix="ca-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_killed_compressed_ingest_leaves_one_folder_that_the_next_ingest_removes(
    tmp_path: Path, short_tmpdir: Path
) -> None:
    scratch = short_tmpdir
    rng = random.Random(7)
    # Words that do not compress much, so that the file is worth two workers (and spills).
    records = []
    for t in range(1500):
        record = capture_record(t, record_id=f"r{t}")
        record["hints"]["tags"] = [" ".join(f"{rng.getrandbits(40):x}" for _ in range(400))]
        records.append(line(record))
    capture = tmp_path / "c.jsonl.gz"
    capture.write_bytes(gzip.compress(b"".join(records), compresslevel=1))
    assert capture.stat().st_size * 8 > 8 * 1024 * 1024  # parallel: decompressed and spilled
    env = {**os.environ, "TMPDIR": str(scratch)}
    args = [sys.executable, "-m", "pipeline", "ingest", str(capture), "--warehouse"]
    proc = subprocess.Popen(
        [*args, str(tmp_path / "wh"), "--workers", "2"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while not list(scratch.glob("*/spill-*")) and time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail("the ingest ended before it spilled a block")
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)  # the whole group: no exit handler runs
    proc.wait(timeout=30)
    left = [p.name for p in scratch.iterdir()]
    assert left and all(name.startswith(f"{SCRATCH_PREFIX}{proc.pid}-") for name in left)

    done = subprocess.run(
        [*args, str(tmp_path / "wh2"), "--workers", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert list(scratch.iterdir()) == []  # the killed one's removed, its own gone at exit


def test_a_write_that_fails_on_a_full_disk_leaves_no_temporary_file_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    import pyarrow.parquet as pq

    from pipeline import warehouse

    written = pq.write_table

    def full_disk(table: object, sink: object, **kwargs: object) -> None:
        written(table, sink, **kwargs)  # type: ignore[arg-type]
        raise OSError(errno.ENOSPC, "No space left on device")

    wh = tmp_path / "wh"
    first = tmp_path / "first.jsonl"
    first.write_bytes(line(capture_record(1, record_id="r1")))
    run([first], wh)  # a warehouse with data: a failed ingest leaves its tables in place
    monkeypatch.setattr(warehouse.pq, "write_table", full_disk)
    capture = tmp_path / "c.jsonl"
    capture.write_bytes(line(capture_record(2, record_id="r2")))
    with pytest.raises(OSError, match="No space left"):
        run([capture], wh)
    assert [p for p in wh.rglob("*") if p.name.endswith(".tmp")] == []
