"""pipeline.ctrl_c.held blocks SIGINT for a few statements and always unblocks it: a process
left with SIGINT blocked ignores every later Ctrl-C, and so do the processes it starts."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import pytest

from pipeline import ctrl_c


def _blocked() -> bool:
    return signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])


def test_sigint_is_blocked_inside_and_unblocked_after() -> None:
    with ctrl_c.held():
        assert _blocked()
    assert not _blocked()


def test_a_ctrl_c_raised_as_sigint_is_blocked_leaves_it_unblocked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a Ctrl-C pending before the block is raised right after the call that blocks SIGINT
    real = signal.pthread_sigmask

    def block_then_interrupt(how: int, mask: Any) -> Any:
        previous = real(how, mask)
        if how == signal.SIG_BLOCK and signal.SIGINT in mask:
            raise KeyboardInterrupt
        return previous

    monkeypatch.setattr(signal, "pthread_sigmask", block_then_interrupt)
    with pytest.raises(KeyboardInterrupt), ctrl_c.held():
        pass
    monkeypatch.undo()
    assert not _blocked()


def test_a_ctrl_c_another_thread_receives_inside_the_block_is_raised_after_it() -> None:
    # A terminal's Ctrl-C goes to the process, and the kernel gives it to a thread that does
    # not block SIGINT (here the sleeper; in an ingest, pyarrow's or DuckDB's threads): Python
    # then raises it in the main thread at once, inside the block, unless the block holds it.
    sleeper = threading.Thread(target=time.sleep, args=(2,), daemon=True)
    sleeper.start()
    steps: list[str] = []
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt), ctrl_c.held():
            os.kill(os.getpid(), signal.SIGINT)
            deadline = time.monotonic() + 0.3  # Python code long enough for it to be handled
            while time.monotonic() < deadline:
                pass
            steps.append("block ran to its end")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert steps == ["block ran to its end"]
    assert not _blocked()
    assert signal.getsignal(signal.SIGINT) is previous
