"""Where `sql` and friends write: --out paths a user gets wrong are one-line errors (never
"this is a bug"), a reader that stops early (`| head`) is not a failure for any command, and a
table that cuts long values says so."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from test_ingest_support import chat_line, chat_usage

T0 = datetime(2026, 11, 2, 10, tzinfo=UTC)


def test_sql_out_creates_missing_parent_directories(tmp_path: Path, cli: Any) -> None:
    (tmp_path / "wh").mkdir()
    target = tmp_path / "new" / "deeper" / "o.csv"
    out = cli("sql", "-w", str(tmp_path / "wh"), "select 1 as a", "--format", "csv",
              "--out", str(target))  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert target.read_text() == "a\n1\n"


def test_an_unwritable_out_path_is_a_usage_error_naming_the_path(tmp_path: Path, cli: Any) -> None:
    (tmp_path / "wh").mkdir()
    blocker = tmp_path / "file"
    blocker.write_text("")
    for fmt in ("csv", "parquet"):
        target = blocker / f"o.{fmt}"  # a path under a regular file cannot exist
        out = cli("sql", "-w", str(tmp_path / "wh"), "select 1 as a", "--format", fmt,
                  "--out", str(target))  # fmt: skip
        assert out.returncode == 2, out.stderr
        assert f"cannot write {target}" in out.stderr
        assert "bug" not in out.stderr


def test_path_errors_elsewhere_name_the_path_instead_of_blaming_the_tool(
    tmp_path: Path, cli: Any
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    out = cli("demo", "--out", str(blocker / "capture.jsonl"))
    assert out.returncode == 2
    assert out.stderr.startswith(f"error: cannot use {blocker}")
    assert "internal error" not in out.stderr and "Traceback" not in out.stderr


def test_a_reader_that_stops_early_is_not_a_failure(tmp_path: Path) -> None:
    (tmp_path / "wh").mkdir()
    env = {**os.environ, "TZ": "UTC"}
    env.pop("CACHEAUDIT_WAREHOUSE", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "sql", "-w", str(tmp_path / "wh"),
         "select range from range(300000)", "--format", "csv"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline() == b"range\n"
    proc.stdout.close()  # like `| head -1`
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0, err
    assert err == b""


@pytest.mark.parametrize(
    "args", [["views", "-w", "{wh}"], ["prices", "list"], ["summary", "-w", "{wh}"]]
)
def test_any_command_into_a_reader_that_has_already_stopped_is_not_a_failure(
    tmp_path: Path, args: list[str]
) -> None:
    wh = tmp_path / "wh"
    if "summary" in args:  # summary needs requests to print
        capture = tmp_path / "c.jsonl"
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
        capture.write_bytes(chat_line(T0, "r1", body, chat_usage(20, 0)))
        for step in (["ingest", str(capture)], ["build"]):  # built: summary has nothing to say
            subprocess.run([sys.executable, "-m", "pipeline", *step, "-w", str(wh)],
                           check=True, capture_output=True)  # fmt: skip
    else:
        wh.mkdir()
    env = {**os.environ, "TZ": "UTC"}
    env.pop("CACHEAUDIT_WAREHOUSE", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", *(a.format(wh=wh) for a in args)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # closed before the command writes anything: its first write fails
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0, err
    assert err == b""


def test_a_table_marks_cut_values_and_says_how_to_see_them_whole(tmp_path: Path, cli: Any) -> None:
    (tmp_path / "wh").mkdir()
    out = cli("sql", "-w", str(tmp_path / "wh"), "select repeat('x', 100) as v, 'short' as s")
    assert out.returncode == 0, out.stderr
    row = out.stdout.splitlines()[2]
    assert row.startswith("x" * 47 + "…") and row.endswith("short")
    assert "1 value(s) longer than 48 characters cut" in out.stderr
