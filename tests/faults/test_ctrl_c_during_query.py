"""A Ctrl-C while DuckDB runs a query ends the command with "interrupted" and exit 130.

DuckDB takes the KeyboardInterrupt itself, stops the query and raises
RuntimeError("Query interrupted") instead: without a mapping of its own, every command reading
the warehouse (sql, summary, build, report, and the end of an ingest) called a Ctrl-C "a bug"
with exit 70."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest
from test_ingest_support import capture_record, line

from pipeline import cli, sql
from pipeline.ingest import ingest
from pipeline.sql_catalog import Query
from pipeline.sql_run import statement_errors
from pipeline.warehouse import Warehouse

# ~6 s here. DuckDB alone sometimes noticed a Ctrl-C only when the query ended (3 of 8
# in-process tries; pipeline/ctrl_c.py's watcher stops it now, test_ctrl_c_stops_queries.py),
# and raised the same error then, so a short query keeps this test quick either way.
LONG_QUERY = "select count(*) from range(2000000000) t(a) where a % 7 = 3"


def exit_of_main(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], app: Callable[[], None]
) -> tuple[object, str]:
    """(exit code, stderr) of the CLI's `main` when the command it runs is `app`."""
    monkeypatch.setattr(cli, "app", app)
    monkeypatch.setattr(cli, "_said", [])  # "interrupted" is said once per process
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    return exit_.value.code, capsys.readouterr().err


def _ctrl_c_as_at_a_terminal() -> None:
    """In the child: SIGINT's default action, as a command typed at a terminal has. A test run
    started in the background of a shell inherits SIGINT ignored, and Python keeps it so."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
def test_a_ctrl_c_during_a_query_is_one_line_and_exit_130(tmp_path: Path) -> None:
    capture = tmp_path / "c.jsonl"
    capture.write_bytes(line(capture_record(0, record_id="r0")))
    wh = tmp_path / "wh"
    ingest([capture], Warehouse(wh))
    command = [sys.executable, "-m", "pipeline", "sql", "--warehouse", str(wh)]
    subprocess.run([*command, "select 1"], check=True, capture_output=True, timeout=120)  # built
    proc = subprocess.Popen(
        [*command, LONG_QUERY],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=_ctrl_c_as_at_a_terminal,
    )
    # Well into the query: past the ~0.4 CPU s of start-up, DuckDB's threads counting
    deadline = time.monotonic() + 60
    while _cpu_seconds(proc.pid) < 1.5 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the query ended before the Ctrl-C"
    os.killpg(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert (proc.returncode, stderr.decode()) == (130, "interrupted\n")


def test_duckdbs_own_interrupt_is_a_ctrl_c_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted_query() -> None:
        con = duckdb.connect()
        threading.Timer(0.2, con.interrupt).start()
        con.execute(LONG_QUERY).fetchall()

    assert exit_of_main(monkeypatch, capsys, interrupted_query) == (130, "interrupted\n")


def test_an_interrupt_is_not_told_as_an_error_of_the_statement() -> None:
    # where rows are read, DuckDB's errors about a statement become the user's (exit 1)
    con = duckdb.connect()
    threading.Timer(0.2, con.interrupt).start()
    with pytest.raises(duckdb.InterruptException), statement_errors():
        con.execute(LONG_QUERY).fetchall()


def test_an_interrupt_inside_a_step_that_tells_duckdb_errors_its_way_is_a_ctrl_c(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # a period read computes a heavy view as a table: its DuckDB errors name the query file
    def interrupted_step() -> None:
        con = duckdb.connect()
        threading.Timer(0.2, con.interrupt).start()
        sql.compute_once(con, Query("long", tmp_path / "long.sql", LONG_QUERY, ()))

    assert exit_of_main(monkeypatch, capsys, interrupted_step) == (130, "interrupted\n")


def test_another_runtime_error_is_still_reported_as_a_bug(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fail() -> None:
        raise RuntimeError("Query interrupted, but not by DuckDB's words")

    code, err = exit_of_main(monkeypatch, capsys, fail)
    assert code == 70
    assert "internal error: RuntimeError" in err
