"""`cacheaudit forget`: the rows of the files named leave every table, the stored views and
every byte of the warehouse; the other files' rows stay as they were."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
from conftest import run_cli
from test_ingest_support import chat_line, chat_usage

from pipeline import sql
from pipeline.errors import ExitCode
from pipeline.warehouse import Warehouse

START = datetime(2026, 11, 16, 9, tzinfo=UTC)
MARKER = "zebra-marker-9173"  # prompt text only file b holds


def _conversation(session: str, system: list[str], first: int) -> bytes:
    """One conversation of len(system) turns, turn i sent with system prompt system[i]."""
    lines, history = [], [{"role": "user", "content": "Summarise the report. " * 40}]
    for i, prompt in enumerate(system):
        body = {"model": "gpt-4.1-mini", "messages": [{"role": "system", "content": prompt}]}
        body["messages"] += history
        at = START + timedelta(minutes=first + i)
        lines.append(chat_line(at, f"{session}-{i}", body, chat_usage(1200, 0), session_id=session))
        history = [*history, {"role": "assistant", "content": "Done."},
                   {"role": "user", "content": f"And part {i + 2}?"}]  # fmt: skip
    return b"".join(lines)


def _every_byte(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


def _compacted_request_ids(wh: Path) -> set[str]:
    """The request ids in `build`'s compacted copies of requests and segments (compressed in
    Parquet: their bytes do not show the ids)."""
    return {
        rid
        for path in (wh / "derived" / "compact").rglob("*.parquet")
        for rid in pq.read_table(path, columns=["request_id"]).column(0).to_pylist()
    }


def _warehouse(tmp_path: Path) -> tuple[Path, Path, Path]:
    steady = "You are a careful analyst. " * 60
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_bytes(_conversation("a", [steady, steady, steady], 0))
    # b's second turn changes its system prompt: a break whose excerpts quote MARKER
    b.write_bytes(_conversation("b", [steady, steady + MARKER + " now.", steady], 10))
    wh = tmp_path / "wh"
    assert run_cli("ingest", str(a), str(b), "-w", str(wh), "--workers", "1").returncode == 0
    assert run_cli("build", "-w", str(wh)).returncode == 0
    return a, b, wh


def test_forgetting_a_file_removes_its_rows_from_every_table_and_keeps_the_others(
    tmp_path: Path,
) -> None:
    a, b, wh = _warehouse(tmp_path)
    before = sql.connect(Warehouse(wh))
    kept = before.execute(
        "SELECT * FROM requests WHERE source = $s ORDER BY request_id", {"s": str(a)}
    ).fetchall()
    breaks_of_a = before.execute(
        "SELECT request_id, cause FROM cache_breaks WHERE request_id LIKE 'a-%' ORDER BY 1"
    ).fetchall()
    assert len(kept) == 3
    assert before.execute("SELECT count(*) FROM cache_breaks WHERE cause = 'system_changed'"
                      " AND request_id LIKE 'b-%'").fetchone() == (2,)  # fmt: skip
    before.close()
    assert MARKER.encode() in _every_byte(wh / "derived")  # the stored breaks quote it

    done = run_cli("forget", str(b), "-w", str(wh))
    assert done.returncode == 0, done.stderr
    assert f"{b}: forgot 3 requests and 0 rejects (1 ingest of it)" in done.stderr

    con = sql.connect(Warehouse(wh))
    assert con.execute("SELECT * FROM requests ORDER BY request_id").fetchall() == kept
    assert con.execute(
        "SELECT DISTINCT split_part(request_id, '-', 1) FROM segments"
    ).fetchall() == [("a",)]
    assert con.execute("SELECT source FROM sources").fetchall() == [(str(a),)]
    assert con.execute(
        "SELECT count(*) FROM cache_breaks WHERE request_id LIKE 'b-%'"
    ).fetchone() == (0,)
    assert (
        con.execute("SELECT request_id, cause FROM cache_breaks ORDER BY 1").fetchall()
        == breaks_of_a
    )
    assert MARKER.encode() not in _every_byte(wh)  # parts, stored views, the DuckDB file


def test_a_forgotten_file_ingested_again_comes_back_whole(tmp_path: Path) -> None:
    _, b, wh = _warehouse(tmp_path)
    assert run_cli("forget", str(b), "-w", str(wh)).returncode == 0
    assert run_cli("ingest", str(b), "-w", str(wh)).returncode == 0  # not "unchanged"
    con = sql.connect(Warehouse(wh))
    assert con.execute("SELECT count(*) FROM requests WHERE source = $s", {
        "s": str(b)}).fetchone() == (3,)  # fmt: skip


def test_a_path_that_is_no_source_removes_nothing_and_says_so(tmp_path: Path) -> None:
    a, b, wh = _warehouse(tmp_path)
    manifests = sorted((wh / "sources").glob("*.parquet"))
    done = run_cli("forget", str(b), str(tmp_path / "never.jsonl"), "-w", str(wh))
    assert done.returncode == ExitCode.NOT_FOUND
    assert done.stderr.splitlines()[0] == f"error: not a source of {wh}: {tmp_path / 'never.jsonl'}"
    assert sorted((wh / "sources").glob("*.parquet")) == manifests  # b was not forgotten either
    missing = run_cli("forget", str(a), "-w", str(tmp_path / "nowhere"))
    assert missing.returncode == ExitCode.NOT_FOUND and "no warehouse" in missing.stderr


def test_the_compacted_copy_of_a_forgotten_files_day_goes_with_it(tmp_path: Path) -> None:
    # eight hourly files of one day: `build` keeps one compacted copy of the day's requests
    files = []
    for hour in range(8):
        path = tmp_path / f"hour-{hour}.jsonl"
        path.write_bytes(_conversation(f"h{hour}x{MARKER}", ["You are terse."], hour * 60))
        files.append(path)
    wh = tmp_path / "wh"
    assert run_cli("ingest", *map(str, files), "-w", str(wh), "--workers", "1").returncode == 0
    assert run_cli("build", "-w", str(wh)).returncode == 0
    forgotten = f"h3x{MARKER}-0"
    assert forgotten in _compacted_request_ids(wh)
    assert run_cli("forget", str(files[3]), "-w", str(wh)).returncode == 0
    assert forgotten not in _compacted_request_ids(wh)
    con = sql.connect(Warehouse(wh))
    assert con.execute("SELECT count(*) FROM requests").fetchone() == (7,)


def test_forgetting_a_folder_forgets_every_file_ingested_from_inside_it(tmp_path: Path) -> None:
    steady = "You are a careful analyst. " * 60
    inside = [tmp_path / "capture" / "a.jsonl", tmp_path / "capture" / "day2" / "b.jsonl"]
    # a folder whose name starts like the forgotten one's is not inside it
    beside = tmp_path / "capture2" / "c.jsonl"
    for i, path in enumerate([*inside, beside]):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_conversation(path.stem, [steady, steady], 10 * i))
    with inside[0].open("ab") as fh:
        fh.write(b"not a record\n")  # a reject, forgotten with its file
    wh = tmp_path / "wh"
    ingested = run_cli("ingest", str(tmp_path / "capture"), str(beside), "-w", str(wh))
    assert ingested.returncode == 0, ingested.stderr
    for path in inside:  # the folder need not exist any more
        path.unlink()
    (tmp_path / "capture" / "day2").rmdir()
    (tmp_path / "capture").rmdir()
    done = run_cli("forget", str(tmp_path / "capture"), "-w", str(wh))
    assert done.returncode == 0, done.stderr
    assert "forgot 2 requests" in done.stderr and done.stderr.count("forgot") == 2
    assert "forgot 2 requests and 1 reject (1 ingest of it)" in done.stderr  # not "1 rejects"
    assert "forgot 2 requests and 0 rejects (1 ingest of it)" in done.stderr
    con = sql.connect(Warehouse(wh))
    assert con.execute("SELECT DISTINCT session_id FROM requests").fetchall() == [("c",)]
