"""Ctrl-C: held back for a few statements (`held`), and stopping DuckDB queries (`interruptible`).

`held`: for imports of native modules and a queue's put. SIGINT is blocked in this thread for
the block's duration and delivered when it ends. The mask is read first and changed inside the
`try`, so a Ctrl-C that is already pending when the block starts (its KeyboardInterrupt raised
right after the call that blocks SIGINT) cannot leave SIGINT blocked for good: a process left
that way ignores every later Ctrl-C, and so do the processes it starts, which inherit the mask.

A mask is per thread, and a Ctrl-C from a terminal is sent to the process: the kernel gives it
to any thread that does not block it (pyarrow's and DuckDB's pools, started from the main
thread, do not), and Python then raises KeyboardInterrupt in the main thread at its next
instruction, inside the block. So in the main thread the block also puts a handler in place
that only notes the signal, and the signal is raised again once the block is over.

`interruptible`: DuckDB takes a Ctrl-C itself, but looks for it only between the tasks of a
query and only in the main thread (https://github.com/duckdb/duckdb/issues/10216,
https://github.com/duckdb/duckdb/issues/15925): a query whose main thread was waiting on a
long task went on to its end, then raised "Query interrupted" (2 of 16 tries of a 7 s query
here; a 64 s one ran to its end). So the signal also wakes a thread of ours
(`signal.set_wakeup_fd`). It gives DuckDB's own check GRACE_S first: that path takes the
Ctrl-C as Python's KeyboardInterrupt and stops the query with nothing left to raise, so the
clean-up code after it runs as it always did. A query still running then is interrupted: DuckDB
stops it at its next chunk with InterruptException, which the CLI reports as `interrupted`;
Python then raises the Ctrl-C's KeyboardInterrupt at the first function the clean-up calls, so
a clean-up of two steps puts the second in a `finally` of its own.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any, TypeVar

_Connection = TypeVar("_Connection")
# How long a Ctrl-C is left to DuckDB's own check before the watcher interrupts the queries.
GRACE_S = 1.0
# Connections a Ctrl-C interrupts: those of this process that `interruptible` was given.
_connections: weakref.WeakSet[Any] = weakref.WeakSet()
# The sockets the signal writes to and the watching thread reads from, once installed.
_wakeup: tuple[socket.socket, socket.socket] | None = None
# How many `held` blocks are open: a Ctrl-C taken inside one is raised again when it ends (and
# wakes the watcher again then), so the watcher leaves the connections alone meanwhile.
_held_depth = 0


@contextlib.contextmanager
def held() -> Iterator[None]:
    global _held_depth
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    noted: list[int] = []
    handler: Any = None  # the Python handler in place before the block, when it was replaced
    _held_depth += 1
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
        _held_depth -= 1
        if handler is not None:
            signal.signal(signal.SIGINT, handler)  # notes any signal still waiting, first
        if noted:
            signal.raise_signal(signal.SIGINT)  # to this thread: the usual handler takes it


def interruptible(con: _Connection) -> _Connection:
    """`con` (a DuckDB connection), registered to be interrupted by a Ctrl-C whatever its query
    is doing. Installs the watcher on the first call from the main thread; where another
    wakeup descriptor is in place (an asyncio loop's), that one stays and DuckDB's own check is
    all there is."""
    _connections.add(con)
    if threading.current_thread() is threading.main_thread():
        _install_watcher()
    return con


def _install_watcher() -> None:
    global _wakeup
    if _wakeup is None:
        reader, writer = socket.socketpair()
        writer.setblocking(False)  # the signal handler must never wait on a full socket
        threading.Thread(
            target=_interrupt_on_ctrl_c, args=(reader,), name="cacheaudit-ctrl-c", daemon=True
        ).start()
        _wakeup = (reader, writer)
    ours = _wakeup[1].fileno()
    # Python lets one descriptor be woken; set_wakeup_fd says which one was there.
    previous = signal.set_wakeup_fd(ours, warn_on_full_buffer=False)
    if previous not in (-1, ours):
        signal.set_wakeup_fd(previous)


def _interrupt_on_ctrl_c(reader: socket.socket) -> None:
    while data := reader.recv(64):
        if signal.SIGINT not in data or _held_depth:
            continue
        # the connections of this Ctrl-C: not one a program that went on afterwards opens later
        connections = _registered()
        time.sleep(GRACE_S)
        for con in connections:
            with contextlib.suppress(Exception):  # closed meanwhile: nothing to stop
                con.interrupt()


def _registered() -> list[Any]:
    while True:
        try:
            return list(_connections)
        except RuntimeError:  # the main thread registered one meanwhile ("changed size")
            continue


def _forget_in_child() -> None:
    """A forked child has no watcher thread: its signals must not wake its parent's, and a
    connection it opens installs a watcher of its own."""
    global _wakeup
    if _wakeup is None:
        return
    with contextlib.suppress(ValueError):  # the wakeup descriptor is the main thread's to set
        previous = signal.set_wakeup_fd(-1)
        if previous != _wakeup[1].fileno():
            signal.set_wakeup_fd(previous)
    for sock in _wakeup:
        sock.close()
    _wakeup = None
    _connections.clear()


os.register_at_fork(after_in_child=_forget_in_child)
