"""Holding Ctrl-C back for a few statements (imports of native modules, a queue's put).

SIGINT is blocked in this thread for the block's duration and delivered when it ends. The mask
is read first and changed inside the `try`, so a Ctrl-C that is already pending when the block
starts (its KeyboardInterrupt raised right after the call that blocks SIGINT) cannot leave
SIGINT blocked for good: a process left that way ignores every later Ctrl-C, and so do the
processes it starts, which inherit the mask.

A mask is per thread, and a Ctrl-C from a terminal is sent to the process: the kernel gives it
to any thread that does not block it (pyarrow's and DuckDB's pools, started from the main
thread, do not), and Python then raises KeyboardInterrupt in the main thread at its next
instruction, inside the block. So in the main thread the block also puts a handler in place
that only notes the signal, and the signal is raised again once the block is over.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def held() -> Iterator[None]:
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    noted: list[int] = []
    handler: Any = None  # the Python handler in place before the block, when it was replaced
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        if threading.current_thread() is threading.main_thread():
            current = signal.getsignal(signal.SIGINT)
            if current is not None:  # None: a handler not set from Python, left as it is
                handler = signal.signal(signal.SIGINT, lambda signum, _frame: noted.append(signum))
        yield
    finally:
        # The mask first: a Ctrl-C it held back is noted, not raised, and cannot be raised
        # between the two steps with the mask still blocking SIGINT.
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        if handler is not None:
            signal.signal(signal.SIGINT, handler)  # notes any signal still waiting, first
        if noted:
            signal.raise_signal(signal.SIGINT)  # to this thread: the usual handler takes it
