"""Starting ingest's fork server from the command line, before the CLI's own imports.

The decision is tested here with the start recorded, not done: which command lines start it.
Then the start itself, in a fresh interpreter: the server runs with Ctrl-C blocked. That an
early-started server serves the ingest, and that a Ctrl-C at any moment of it exits with 130,
is tested end to end in tests/faults/test_ingest_interrupted.py (its capture is past
PARALLEL_MIN_BYTES, run through `python -m pipeline ingest`).
"""

from __future__ import annotations

import gzip
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import fork_server
from pipeline.engines import ENGINE_ENV

BIG = fork_server.PARALLEL_MIN_BYTES + 1


@pytest.fixture
def starts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The recorded starts of the fork server (none is really started)."""
    calls: list[int] = []
    monkeypatch.setattr(fork_server, "start", lambda: calls.append(1))
    monkeypatch.setattr(fork_server.os, "cpu_count", lambda: 2)
    monkeypatch.delenv(ENGINE_ENV, raising=False)
    return calls


def _file(path: Path, size: int, head: bytes = b"{") -> Path:
    """A file of `size` bytes (sparse: only its size and first bytes are read)."""
    with path.open("wb") as fh:
        fh.write(head)
        fh.truncate(size)
    return path


def test_an_ingest_naming_enough_input_for_workers_starts_the_fork_server(
    tmp_path: Path, starts: list[int]
) -> None:
    big = _file(tmp_path / "big.jsonl", BIG)
    assert fork_server.start_for_command_line(["ingest", str(big), "--warehouse", "wh"])
    assert starts == [1]


def test_a_small_ingest_one_worker_spark_or_help_does_not_start_it(
    tmp_path: Path, starts: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    small = _file(tmp_path / "small.jsonl", BIG // 2)
    big = _file(tmp_path / "big.jsonl", BIG)
    for args in (
        ["ingest", str(small)],
        ["ingest", str(big), "--workers", "1"],
        ["ingest", str(big), "--workers=1"],
        ["ingest", str(big), "--engine", "spark"],
        ["ingest", str(big), "--help"],
        ["build", str(big)],
        ["--version", "ingest", str(big)],
        ["ingest"],
    ):
        assert not fork_server.start_for_command_line(args), args
    monkeypatch.setenv(ENGINE_ENV, "spark")
    assert not fork_server.start_for_command_line(["ingest", str(big)])
    assert starts == []


def test_an_option_value_is_not_taken_for_an_input(tmp_path: Path, starts: list[int]) -> None:
    small = _file(tmp_path / "small.jsonl", 10)
    big = _file(tmp_path / "providers.toml", BIG)
    for args in (
        ["ingest", str(small), "--providers", str(big)],
        ["ingest", f"--providers={big}", str(small)],
        ["ingest", "-w", str(big), str(small)],
        ["ingest", "--max-record-bytes", str(big), str(small)],
    ):
        assert not fork_server.start_for_command_line(args), args
    assert starts == []


def test_a_compressed_capture_counts_as_the_traffic_it_holds(
    tmp_path: Path, starts: list[int]
) -> None:
    size = BIG // fork_server.COMPRESSION_GUESS + 1  # past the threshold only once multiplied
    plain = _file(tmp_path / "plain.jsonl", size)
    packed = _file(tmp_path / "packed.jsonl.gz", size, gzip.compress(b"{}")[:4])
    assert not fork_server.start_for_command_line(["ingest", str(plain)])
    assert fork_server.start_for_command_line(["ingest", str(packed)])
    assert starts == [1]


def test_a_directory_counts_only_its_capture_like_files(tmp_path: Path, starts: list[int]) -> None:
    folder = tmp_path / "captures"
    (folder / "hourly").mkdir(parents=True)
    _file(folder / "notes.txt", BIG)
    assert not fork_server.start_for_command_line(["ingest", str(folder)])
    _file(folder / "hourly" / "10.jsonl", BIG)
    assert fork_server.start_for_command_line(["ingest", str(folder)])
    assert starts == [1]


def test_a_command_line_the_cli_will_refuse_only_skips_the_early_start(
    tmp_path: Path, starts: list[int]
) -> None:
    big = _file(tmp_path / "big.jsonl", BIG)
    assert not fork_server.start_for_command_line(["ingest", str(big), "--workers", "many"])
    assert not fork_server.start_for_command_line(["ingest", str(tmp_path / "missing.jsonl")])
    assert starts == []


def test_the_ingest_uses_as_many_workers_as_the_early_start_assumed(tmp_path: Path) -> None:
    small = _file(tmp_path / "small.jsonl", BIG // 2)
    big = _file(tmp_path / "big.jsonl", BIG)
    assert fork_server.worker_count([small], 4) == 1
    assert fork_server.worker_count([small, small, small], 4) == 4  # together past it
    assert fork_server.worker_count([big], 1) == 1
    assert fork_server.worker_count([big], 3) == 3
    assert fork_server.worker_count([small], 4, min_bytes=0) == 4


_MASK_OF_THE_SERVER = """
import multiprocessing.forkserver as mp_forkserver
from pipeline import fork_server
fork_server.start()
pid = mp_forkserver._forkserver._forkserver_pid
status = open(f"/proc/{pid}/status").read()
print(int(status.split("SigBlk:")[1].split()[0], 16))
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc (Linux)")
def test_the_fork_server_starts_with_ctrl_c_blocked_though_the_resource_tracker_unblocks_it() -> (
    None
):
    # A fresh interpreter: in this one the resource tracker may run already, which hides the
    # unblocking that starting it does.
    out = subprocess.run(
        [sys.executable, "-c", _MASK_OF_THE_SERVER], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    blocked = int(out.stdout.strip())
    assert blocked & (1 << (signal.SIGINT - 1)), f"SigBlk {blocked:#x}"
