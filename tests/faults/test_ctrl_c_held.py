"""pipeline.ctrl_c.held blocks SIGINT for a few statements and always unblocks it: a process
left with SIGINT blocked ignores every later Ctrl-C, and so do the processes it starts."""

from __future__ import annotations

import signal
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
