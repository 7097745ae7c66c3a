"""A Ctrl-C stops a DuckDB query of a connection `ctrl_c.interruptible` registered, also where
DuckDB's own check cannot see it.

DuckDB looks for a Ctrl-C between the tasks of a query, and only in the main thread: a query
run from another thread never sees one, which makes the case deterministic here (in the main
thread it happens now and then, when the main thread waits on a long task). Without the
watcher each query below runs to its end, ~30 s."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Iterator

import duckdb
import pytest

from pipeline import ctrl_c

VERY_LONG_QUERY = "select count(*) from range(10000000000) t(a) where a % 7 = 3"
# The query stops at its next chunk once interrupted: well under this, where it takes ~30 s.
STOPS_WITHIN_S = 5.0


class _QueryThread(threading.Thread):
    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        super().__init__(daemon=True)
        self.con = con
        self.error: BaseException | None = None
        self.started_query = threading.Event()

    def run(self) -> None:
        try:
            self.started_query.set()
            self.con.execute(VERY_LONG_QUERY).fetchall()
        except BaseException as exc:  # what stopped it is the test's to check
            self.error = exc


@pytest.fixture
def query() -> Iterator[_QueryThread]:
    """A registered connection's very long query, running in a thread of its own."""
    con = ctrl_c.interruptible(duckdb.connect())
    thread = _QueryThread(con)
    thread.start()
    thread.started_query.wait()
    time.sleep(0.3)  # well into the query
    yield thread
    con.interrupt()  # a failed test must not leave it counting for the rest of the suite
    thread.join(60)


@pytest.fixture
def ctrl_c_handled() -> Iterator[None]:
    """Python's own Ctrl-C handler, as a command at a terminal has: a suite started in the
    background of a shell inherits SIGINT ignored, and an ignored signal wakes nobody."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_a_ctrl_c_stops_a_query_duckdb_itself_does_not_check(
    ctrl_c_handled: None, query: _QueryThread
) -> None:
    with pytest.raises(KeyboardInterrupt):  # Python's handler raises it in the main thread
        signal.raise_signal(signal.SIGINT)
        time.sleep(STOPS_WITHIN_S)
    query.join(STOPS_WITHIN_S)
    assert not query.is_alive(), "the query went on after the Ctrl-C"
    assert isinstance(query.error, duckdb.InterruptException)


def test_a_ctrl_c_inside_a_held_block_stops_the_query_once_the_block_ends(
    ctrl_c_handled: None, query: _QueryThread
) -> None:
    assert query.ident is not None
    with pytest.raises(KeyboardInterrupt):
        with ctrl_c.held():
            # the Ctrl-C reaches a thread that does not hold it back, as a terminal's may
            signal.pthread_kill(query.ident, signal.SIGINT)
            time.sleep(1.0)
            # asserted after the block: the Ctrl-C it raises would replace an AssertionError
            alive_inside = query.is_alive()
        time.sleep(STOPS_WITHIN_S)  # the block raises the Ctrl-C it held as it ends
    assert alive_inside, "the query was stopped inside the held block"
    query.join(STOPS_WITHIN_S)
    assert not query.is_alive(), "the query went on after the held Ctrl-C was raised"
    assert isinstance(query.error, duckdb.InterruptException)


def test_another_wakeup_descriptor_stays_in_place() -> None:
    # an asyncio loop's, say: Python wakes one descriptor only, and that one is theirs
    theirs, other_end = socket.socketpair()
    theirs.setblocking(False)
    previous = signal.set_wakeup_fd(theirs.fileno())
    try:
        ctrl_c.interruptible(duckdb.connect())
        assert signal.set_wakeup_fd(previous) == theirs.fileno()
    finally:
        theirs.close()
        other_end.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_child_does_not_wake_its_parents_watcher() -> None:
    ctrl_c.interruptible(duckdb.connect())
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os._exit(0 if signal.set_wakeup_fd(-1) == -1 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
