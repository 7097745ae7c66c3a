"""Holding Ctrl-C back for a few statements (imports of native modules, a queue's put).

SIGINT is blocked in this thread for the block's duration and delivered when it ends. The mask
is read first and changed inside the `try`, so a Ctrl-C that is already pending when the block
starts (its KeyboardInterrupt raised right after the call that blocks SIGINT) cannot leave
SIGINT blocked for good: a process left that way ignores every later Ctrl-C, and so do the
processes it starts, which inherit the mask."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator


@contextlib.contextmanager
def held() -> Iterator[None]:
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
