"""Clean-up after a query a Ctrl-C interrupted runs to its end.

When pipeline/ctrl_c.py's watcher interrupts a query, DuckDB raises InterruptException while the
Ctrl-C's KeyboardInterrupt is still due: Python raises it at the first function the clean-up
calls. These tests raise it there, as it happens, and check that nothing is left behind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest
from test_ctrl_c_during_query import exit_of_main

from pipeline import materialise, prefix_groups, sql


def _interrupted() -> None:
    raise duckdb.InterruptException("INTERRUPT Error: Interrupted!")


def test_a_half_built_view_is_removed_when_the_ctrl_c_is_raised_as_its_removal_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    half = tmp_path / ".request_prefix.parquet.1.tmp"
    (half / "2026-11-16").mkdir(parents=True)
    (half / "2026-11-16" / "part.parquet").write_bytes(b"PAR1")
    removals: list[Path] = []
    real_remove = materialise._remove

    def remove_after_ctrl_c(path: Path) -> None:
        removals.append(path)
        if len(removals) == 1:
            raise KeyboardInterrupt  # the Ctrl-C, raised as the first call after the query
        real_remove(path)

    monkeypatch.setattr(materialise, "_remove", remove_after_ctrl_c)

    def write() -> int:
        _interrupted()
        return 0

    with pytest.raises(KeyboardInterrupt):
        materialise._removed_on_failure(half, "building request_prefix", write)
    assert not half.exists()


def test_an_interrupted_build_step_is_not_reported_as_a_query_error(tmp_path: Path) -> None:
    with pytest.raises(duckdb.InterruptException):
        materialise._removed_on_failure(tmp_path / "gone", "building x", _interrupted)


def test_the_group_work_folder_goes_even_when_the_ctrl_c_is_raised_as_the_views_come_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def ctrl_c_due(*_args: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(sql, "create_query_view", ctrl_c_due)
    con = duckdb.connect()
    con.execute("CREATE VIEW prefix_requests AS SELECT 1 AS x")  # any first query fails below
    out = tmp_path / "request_prefix.parquet"
    with pytest.raises(KeyboardInterrupt):
        prefix_groups.write_in_groups(con, out, 2)
    assert not out.with_name(out.name + ".work").exists()


def test_a_ctrl_c_that_reaches_duckdb_through_a_python_callback_is_interrupted_not_an_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # DuckDB calling back into Python (the row count of a registered Arrow table) gets the
    # KeyboardInterrupt and reports it as its own error
    def callback_interrupted() -> None:
        raise duckdb.InvalidInputException(
            "Invalid Input Error: counting the rows of the object registered as"
            " 'price_rows_source' failed: KeyboardInterrupt:"
        )

    assert exit_of_main(monkeypatch, capsys, callback_interrupted) == (130, "interrupted\n")
