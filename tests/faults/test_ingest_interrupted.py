"""Ctrl-C at any moment of an ingest (while the CLI imports, while workers start, while they
work, while the manifest is written) ends it with one line, "interrupted", and exit 130; readers
then see all of the file's rows or none, and the next ingest lands exactly all of them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_ingest_support import capture_record, line

from pipeline import sql
from pipeline.ingest import ingest
from pipeline.warehouse import Warehouse

RECORDS = 16_000  # ~24 MB: split between two workers, about a second of work


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("interrupted") / "big.jsonl"
    with path.open("wb") as fh:
        for t in range(RECORDS):
            record = capture_record(t, record_id=f"r{t}")
            record["hints"]["tags"] = ["x" * 1000]  # bulk: not part of any count
            fh.write(line(record))
    return path


@pytest.fixture(scope="module")
def interpreter_start() -> float:
    """Seconds a bare interpreter takes to start here: a Ctrl-C before our code runs is
    Python's own to handle (a traceback from its site imports), so each moment is counted from
    then."""
    began = time.monotonic()
    subprocess.run([sys.executable, "-c", "pass"], check=True, timeout=60)
    return time.monotonic() - began


def _visible_rows(wh: Path) -> int:
    if not wh.exists():
        return 0
    ((count,),) = sql.connect(Warehouse(wh)).sql("select count(*) from requests").fetchall()
    return int(count)


# Moments after the interpreter started: the CLI's imports, the fork server and workers starting
# (where a Ctrl-C crashed 3 times in 14 with "can only join a started process"), the work.
DELAYS = [0.0, 0.05, 0.15, 0.25, 0.35, 0.5, 0.8]


def _before_our_code(returncode: int, stderr: str) -> bool:
    """Whether the Ctrl-C landed while Python was still locating the package (a traceback of
    the interpreter's own frames only, e.g. runpy's import of the parent package): outside
    anything our code can catch, so the moment is tried again a little later."""
    frames = [ln for ln in stderr.splitlines() if ln.lstrip().startswith("File ")]
    return (
        returncode == -signal.SIGINT
        and stderr.rstrip().endswith("KeyboardInterrupt")
        and all("<frozen" in ln for ln in frames)
    )


def _interrupt(args: list[str], env: dict[str, str], after: float) -> tuple[int, str]:
    # Its own process group, signalled as a whole: what a terminal does on Ctrl-C.
    proc = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
        # SIGINT's default action, as at a terminal: a test run started in the background of
        # a shell inherits it ignored, and every Ctrl-C here would then pass unseen.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    time.sleep(after)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err.decode()


@pytest.mark.parametrize("delay", DELAYS)
def test_ctrl_c_at_any_moment_is_one_line_exit_130_and_all_or_nothing(
    capture: Path, interpreter_start: float, tmp_path: Path, delay: float
) -> None:
    wh = tmp_path / "wh"
    args = [sys.executable, "-m", "pipeline", "ingest", str(capture), "--warehouse", str(wh)]
    env = {**os.environ, "TZ": "UTC"}
    for _ in range(10):  # a loaded machine can start the interpreter later than measured
        returncode, stderr = _interrupt([*args, "--workers", "2"], env, interpreter_start + delay)
        if not _before_our_code(returncode, stderr):
            break
        delay += 0.02
    else:
        pytest.fail(f"every Ctrl-C landed before the package was found: {stderr}")
    if returncode == 0:  # it finished before the signal came
        assert "total: 16000 records" in stderr
    elif "total: 16000 records" in stderr:
        # It came after the ingest had landed, while the DuckDB file was being refreshed:
        # the counts already printed, then the one line.
        assert returncode == 130 and stderr.endswith("\ninterrupted\n"), stderr
        assert _visible_rows(wh) == RECORDS
    else:
        assert (returncode, stderr) == (130, "interrupted\n"), stderr
    assert _visible_rows(wh) in (0, RECORDS)
    # The next ingest lands the file exactly once, whatever the interrupted one left.
    result = ingest([capture], Warehouse(wh), workers=2)
    assert _visible_rows(wh) == RECORDS
    assert result.total("records") in (0, RECORDS)


class _RecordingQueue:
    """A task queue whose put records whether Ctrl-C was held back, and can receive one."""

    def __init__(self, ctrl_c_inside: bool) -> None:
        self.ctrl_c_inside = ctrl_c_inside
        self.items: list[object] = []
        self.held_back: list[bool] = []

    def put(self, item: object, timeout: float | None = None) -> None:
        self.held_back.append(signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []))
        if self.ctrl_c_inside:
            os.kill(os.getpid(), signal.SIGINT)  # as a user's Ctrl-C in the middle of it
        self.items.append(item)


def test_a_task_is_queued_with_ctrl_c_held_back_until_the_put_is_done() -> None:
    from pipeline import ingest_pool

    q = _RecordingQueue(ctrl_c_inside=False)
    ingest_pool._put_without_ctrl_c(q, "task", timeout=0.2)
    assert q.items == ["task"] and q.held_back == [True]
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # restored


def test_a_ctrl_c_during_a_put_interrupts_the_ingest_after_the_put_has_finished() -> None:
    # Raised inside the queue's put, it could leave the queue's lock held, and the exit-time
    # finaliser then waited for it forever: the ingest said "interrupted" and never exited
    from pipeline import ingest_pool

    q = _RecordingQueue(ctrl_c_inside=True)
    # Python's own Ctrl-C handler, whatever an earlier test of the session left in place
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            ingest_pool._put_without_ctrl_c(q, "task", timeout=0.2)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert q.items == ["task"]  # the put ran to its end before the interrupt
