"""Ingest where the surroundings go wrong: a stream instead of a file, an interrupted first
ingest while another waits for the lock, a killed ingest's workers, a capture ingested from two
working directories, a byte order mark."""

from __future__ import annotations

import fcntl
import gzip
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from test_ingest_support import capture_record, line, run, table

from pipeline.errors import InputError
from pipeline.warehouse import Warehouse

ROOT = Path(__file__).resolve().parent.parent


def _capture(path: Path, n: int, first: int = 0) -> Path:
    path.write_bytes(b"".join(line(capture_record(i, record_id=f"r{i}")) for i in range(first, n)))
    return path


def _cli(
    *args: str, stdin: bytes = b"", cwd: Path | None = None
) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "TZ": "UTC", "PYTHONPATH": str(ROOT)}
    env.pop("CACHEAUDIT_WAREHOUSE", None)
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args],
        input=stdin,
        capture_output=True,
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )


# --- a pipe is not a file --------------------------------------------------------------


def test_a_pipe_is_refused_with_a_hint_and_no_warehouse_is_made(tmp_path: Path) -> None:
    data = _capture(tmp_path / "a.jsonl", 3).read_bytes()
    wh = tmp_path / "wh"
    result = _cli("ingest", "/dev/stdin", "-w", str(wh), stdin=data)
    err = result.stderr.decode()
    assert result.returncode == InputError.exit_code, err
    assert err.splitlines()[0] == (
        "error: /dev/stdin is not a regular file (a pipe or a device): ingest needs a file it"
        " can read more than once"
    )
    assert err.splitlines()[1].startswith("hint: write the stream to a file first")
    assert not wh.exists()  # no manifest entry that would make every later pipe "unchanged"


def test_a_pipe_in_a_batch_fails_the_batch_before_anything_is_written(tmp_path: Path) -> None:
    good = _capture(tmp_path / "a.jsonl", 3)
    wh = tmp_path / "wh"
    result = _cli("ingest", str(good), "/dev/stdin", "-w", str(wh), stdin=good.read_bytes())
    assert result.returncode == InputError.exit_code
    assert "not a regular file" in result.stderr.decode()
    assert not wh.exists()


# --- an interrupted first ingest while another waits -----------------------------------


def test_a_failed_first_ingest_cleans_up_under_the_lock_and_keeps_the_lock_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    capture = _capture(tmp_path / "c.jsonl", 3)
    wh = tmp_path / "wh"
    lock = wh / ".ingest.lock"
    opened, done = threading.Event(), threading.Event()
    seen: dict[str, object] = {}

    def waiter() -> None:  # another ingest, blocked on the lock the failing one holds
        with lock.open("a") as fh:
            opened.set()
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            done.wait(30)  # look once the failed ingest has returned, clean-up and all
            seen["lock is the file it waited on"] = (
                lock.exists() and os.stat(lock).st_ino == os.fstat(fh.fileno()).st_ino
            )
            seen["entries"] = sorted(p.name for p in wh.iterdir())
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)

    thread = threading.Thread(target=waiter)
    write_manifest = Warehouse.write_manifest

    def interrupted(self: Warehouse, row: dict[str, object], stem: str) -> None:
        thread.start()
        opened.wait(30)
        assert list((wh / "requests").rglob("*.parquet"))  # parts landed
        raise RuntimeError("interrupted before the manifest")  # as Ctrl-C there

    monkeypatch.setattr(Warehouse, "write_manifest", interrupted)
    with pytest.raises(RuntimeError):
        run([capture], wh)
    done.set()
    thread.join(30)
    assert seen == {"lock is the file it waited on": True, "entries": [".ingest.lock"]}
    assert not Warehouse(wh).exists()  # `sql` does not answer zeros from it
    monkeypatch.setattr(Warehouse, "write_manifest", write_manifest)
    result = run([capture], wh)  # the next ingest (the one that waited) works
    assert result.files[0].accepted == 3
    assert len(table(wh, "requests")) == 3


def test_an_ingest_that_waited_on_a_failed_first_one_still_lands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = _capture(tmp_path / "a.jsonl", 3), _capture(tmp_path / "b.jsonl", 6, 3)
    wh = tmp_path / "wh"
    outcome: dict[str, object] = {}
    write_manifest = Warehouse.write_manifest
    calls = []

    def second_ingest() -> None:
        try:
            outcome["accepted"] = run([second], wh).files[0].accepted
        except Exception as exc:  # reported by the assertion below
            outcome["error"] = repr(exc)

    thread = threading.Thread(target=second_ingest)

    def interrupted_once(self: Warehouse, row: dict[str, object], stem: str) -> None:
        if not calls:
            calls.append(row)
            thread.start()
            time.sleep(0.5)  # the second ingest is waiting on the lock now
            raise RuntimeError("interrupted before the manifest")
        write_manifest(self, row, stem)

    monkeypatch.setattr(Warehouse, "write_manifest", interrupted_once)
    with pytest.raises(RuntimeError):
        run([first], wh)
    thread.join(60)
    assert outcome == {"accepted": 3}
    assert sorted(r["request_id"] for r in table(wh, "requests")) == ["r3", "r4", "r5"]
    assert (wh / ".ingest.lock").exists()


# --- a killed ingest's workers ---------------------------------------------------------

_POOL_SCRIPT = """
import sys, time
from pipeline.ingest_pool import WorkerPool
from pipeline.ingest_worker import Options
pool = WorkerPool(sys.argv[1], Options(workers=2), 2)
pool.start()
pool.started.wait()
print("started", flush=True)
time.sleep(600)
"""


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return out


def _alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(pid)
    return alive


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc (Linux)")
def test_the_workers_of_a_killed_ingest_exit_and_take_the_fork_server_with_them(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    parent = subprocess.Popen(
        [sys.executable, "-c", _POOL_SCRIPT, str(tmp_path / "wh")],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    helpers: list[int] = []
    try:
        assert parent.stdout is not None and parent.stdout.readline() == b"started\n"
        helpers = _children(parent.pid)  # the fork server and the resource tracker
        workers = [w for h in helpers for w in _children(h)]
        assert len(workers) == 2, (helpers, workers)
        parent.send_signal(signal.SIGKILL)  # as `timeout -s KILL`, or the OOM killer
        parent.wait()
        deadline = time.monotonic() + 15
        while _alive(helpers + workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _alive(helpers + workers) == []
    finally:
        for pid in _alive(helpers + [w for h in helpers for w in _children(h)]):
            os.kill(pid, signal.SIGKILL)
        if parent.poll() is None:
            parent.kill()


# --- a capture ingested from two working directories ------------------------------------


def test_a_grown_capture_ingested_from_another_directory_replaces_its_earlier_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sub = tmp_path / "sub"
    sub.mkdir()
    whole = _capture(tmp_path / "whole.jsonl", 4).read_bytes()
    (sub / "t.jsonl").write_bytes(whole[:-40])  # the proxy is still writing the last record
    monkeypatch.chdir(sub)
    first = run([Path("t.jsonl")], tmp_path / "wh")
    assert (first.files[0].accepted, first.files[0].rejected) == (3, 1)
    (sub / "t.jsonl").write_bytes(whole)
    monkeypatch.chdir(tmp_path)
    second = run([Path("sub/t.jsonl")], tmp_path / "wh")
    assert len(second.files[0].superseded) == 1
    assert (second.files[0].accepted, second.files[0].skipped) == (4, 0)
    (manifest,) = table(tmp_path / "wh", "sources")
    assert manifest["source"] == "sub/t.jsonl"  # as typed
    assert manifest["source_path"] == str((sub / "t.jsonl").resolve())
    assert manifest["records"] == 4
    assert table(tmp_path / "wh", "rejects") == []  # the truncated last line is gone


def test_a_manifest_row_without_a_resolved_path_is_matched_by_the_path_as_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    capture = _capture(tmp_path / "c.jsonl", 1)
    run([Path("c.jsonl")], tmp_path / "wh")
    # as written before the resolved path was recorded
    (part,) = (tmp_path / "wh" / "sources").glob("*.parquet")
    old = pq.read_table(part)
    pq.write_table(old.drop_columns(["source_path"]), part)
    with capture.open("ab") as fh:
        fh.write(line(capture_record(1, record_id="r1")))
    result = run([Path("c.jsonl")], tmp_path / "wh")
    assert len(result.files[0].superseded) == 1
    assert sorted(r["request_id"] for r in table(tmp_path / "wh", "requests")) == ["r0", "r1"]


# --- a byte order mark -----------------------------------------------------------------


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "gzip"])
def test_a_capture_starting_with_a_byte_order_mark_keeps_its_first_record(
    tmp_path: Path, compressed: bool
) -> None:
    data = b"\xef\xbb\xbf" + _capture(tmp_path / "c.jsonl", 3).read_bytes()
    capture = tmp_path / ("bom.jsonl.gz" if compressed else "bom.jsonl")
    capture.write_bytes(gzip.compress(data) if compressed else data)
    result = run([capture], tmp_path / "wh")
    fr = result.files[0]
    assert (fr.format, fr.records, fr.accepted, fr.rejected) == ("capture_jsonl", 3, 3, 0)
    assert sorted(r["request_id"] for r in table(tmp_path / "wh", "requests")) == ["r0", "r1", "r2"]


def test_an_otlp_file_starting_with_a_byte_order_mark_keeps_the_spans_of_its_first_line(
    tmp_path: Path,
) -> None:
    spans = Path(__file__).parent / "fixtures" / "otlp" / "genai_spans.jsonl"
    plain = run([spans], tmp_path / "plain").files[0]
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + spans.read_bytes())
    got = run([bom], tmp_path / "wh").files[0]
    assert got.format == "otlp_json"
    assert (got.records, got.accepted, got.rejected) == (
        plain.records,
        plain.accepted,
        plain.rejected,
    )


def test_the_spark_engine_refuses_a_pipe_before_it_makes_a_warehouse(tmp_path: Path) -> None:
    from pipeline.engines import spark_ingest

    fifo = tmp_path / "stream.jsonl"
    os.mkfifo(fifo)
    wh = tmp_path / "wh"
    with pytest.raises(InputError, match="is not a regular file"):
        spark_ingest.ingest(None, [fifo], Warehouse(wh))  # refused before any Spark work
    assert not wh.exists()
