"""A reading command (report, summary, sql...) spills to `$TMPDIR/cacheaudit-spill-<pid>`;
killed (SIGKILL, the OOM killer), it runs no clean-up and the folder stayed for good. A later
read removes the spill folders of processes that are gone, and only those: a folder whose pid
is alive (its own command, a reused pid, another user's process) and another user's folder
stay."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import run_cli
from test_build_killed_leftovers import _dead_pid

from pipeline import dead_work
from pipeline.warehouse import Warehouse


def _spill_folder(tmp: Path, pid: int) -> Path:
    folder = tmp / f"cacheaudit-spill-{pid}"
    folder.mkdir()
    (folder / "duckdb_temp_storage-0.tmp").write_bytes(b"x" * 1000)
    return folder


def test_a_reading_command_removes_the_spill_folder_of_a_killed_one_and_keeps_live_ones(
    tmp_path: Path,
) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    wh = tmp_path / "wh"
    Warehouse(wh).ensure()
    dead = _spill_folder(tmp, _dead_pid())
    running = _spill_folder(tmp, os.getpid())
    init = _spill_folder(tmp, 1)  # alive, and another user's process unless tests run as root
    unrelated = tmp / f"cacheaudit-spill-{dead.name.rsplit('-', 1)[1]}-notes"
    unrelated.mkdir()

    done = run_cli("summary", "-w", str(wh), env={"TMPDIR": str(tmp)})
    assert done.returncode == 0, done.stderr

    assert not dead.exists()
    assert running.exists() and init.exists() and unrelated.exists()


def test_the_spill_folder_of_a_gone_process_owned_by_another_user_is_left(
    tmp_path: Path,
) -> None:
    if os.getuid() != 0:
        pytest.skip("making a folder another user's needs root")
    dead = _spill_folder(tmp_path, _dead_pid())
    os.chown(dead, 65534, 65534)  # nobody's

    assert dead_work.remove_dead_work(tmp_path, dead_work.SPILL_FOLDER, own_only=True) == 0
    assert dead.exists()

    os.chown(dead, os.getuid(), os.getgid())
    assert dead_work.remove_dead_work(tmp_path, dead_work.SPILL_FOLDER, own_only=True) == 1
    assert not dead.exists()
