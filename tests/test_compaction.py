"""`build` copies each day that many small sources split into many parts into one file, and
reading sessions read those days from the copy while it holds the day's current parts
(pipeline/compaction.py)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from pipeline import compaction, materialise, sql
from pipeline.demo import write_demo
from pipeline.ingest import ingest
from pipeline.period import day_of
from pipeline.warehouse import REPLACED_GRACE_S, TABLES, Warehouse

SOURCES = 10  # every day of the demo gets a part from each: more than compaction.MIN_PARTS
TABLES_READ = ("raw_requests", "raw_segments")


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A warehouse of SOURCES captures taking turns at the demo's lines (as a proxy rotating
    its file does), with one more capture held back; never built."""
    root = tmp_path_factory.mktemp("sources")
    write_demo(root / "demo.jsonl", seed=7, sessions=24)
    lines = (root / "demo.jsonl").read_bytes().splitlines(keepends=True)
    files = []
    for n in range(SOURCES + 1):
        path = root / f"capture-{n:02}.jsonl"
        path.write_bytes(b"".join(lines[n :: SOURCES + 1]))
        files.append(path)
    ingest(files[:SOURCES], Warehouse(root / "wh"), workers=1)
    return root / "wh", files[SOURCES]


@pytest.fixture
def wh(ingested: tuple[Path, Path], tmp_path: Path) -> Warehouse:
    shutil.copytree(ingested[0], tmp_path / "wh")
    return Warehouse(tmp_path / "wh")


def _rows(wh: Warehouse) -> dict[str, list[tuple[object, ...]]]:
    con = sql.connect(wh, only=["headline"])
    out = {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in TABLES_READ}
    out["headline"] = con.execute("SELECT * FROM headline").fetchall()
    return out


def _read_copies(wh: Warehouse, table: str) -> list[Path]:
    read = compaction.substitute(wh, wh.snapshot(TABLES))[table]
    return [p for p in read if compaction.COMPACT_DIR.as_posix() in p.as_posix()]


def test_a_build_copies_each_day_of_many_parts_into_one_file_and_reads_give_the_same_rows(
    wh: Warehouse,
) -> None:
    before = _rows(wh)
    parts_per_day: dict[object, int] = {}
    for part in wh.snapshot(["requests"])["requests"]:
        parts_per_day[day_of(part)] = parts_per_day.get(day_of(part), 0) + 1
    many = {d for d, n in parts_per_day.items() if n >= compaction.MIN_PARTS}
    assert many
    assert _read_copies(wh, "requests") == []

    materialise.build(wh)

    for table in compaction.COMPACTED_TABLES:
        copies = _read_copies(wh, table)
        assert {day_of(c) for c in copies} == many
        read = compaction.substitute(wh, wh.snapshot(TABLES))[table]
        # a copied day is read from its copy only, never also from its parts
        assert not [p for p in read if p not in copies and day_of(p) in many]
    assert _rows(wh) == before


def test_an_ingest_into_a_copied_day_is_read_at_once_and_the_next_build_copies_it_again(
    wh: Warehouse, ingested: tuple[Path, Path]
) -> None:
    materialise.build(wh)
    first = _read_copies(wh, "requests")
    long_ago = time.time() - 10 * REPLACED_GRACE_S
    for path in first:  # written long ago: their grace counts from when they are superseded
        os.utime(path, (long_ago, long_ago))
    ingest([ingested[1]], wh, workers=1)  # its rows fall on every day
    assert _read_copies(wh, "requests") == []  # each day's parts changed: read from the parts
    count = sql.connect(wh).execute("SELECT count(*) FROM raw_requests").fetchone()
    assert count == (len((ingested[1].parent / "demo.jsonl").read_bytes().splitlines()),)
    expected = _rows(wh)

    materialise.build(wh)
    second = set(_read_copies(wh, "requests"))
    assert second and not second & set(first)
    assert _rows(wh) == expected
    # the superseded copies stay for readers that listed them, until the grace is over
    assert all(p.exists() for p in first)
    materialise.build(wh, force=True)
    assert all(p.exists() for p in first)
    markers = [p.with_name(p.name + compaction.SUPERSEDED) for p in first]
    grace_over = time.time() - REPLACED_GRACE_S - 1
    for marker in markers:
        os.utime(marker, (grace_over, grace_over))
    materialise.build(wh, force=True)
    assert not any(p.exists() for p in first + markers)
    assert all(p.exists() for p in second)


def test_a_warehouse_of_few_sources_gets_no_copies(tmp_path: Path) -> None:
    write_demo(tmp_path / "demo.jsonl", seed=7, sessions=4)
    wh = Warehouse(tmp_path / "wh")
    ingest([tmp_path / "demo.jsonl"], wh, workers=1)
    materialise.build(wh)
    assert not (wh.root / compaction.COMPACT_DIR).exists()


def test_the_duckdb_file_reads_the_copies_and_sees_the_same_rows(wh: Warehouse) -> None:
    import duckdb

    from pipeline import warehouse_db

    expected = _rows(wh)
    materialise.build(wh)
    assert warehouse_db.refresh(wh).startswith("DuckDB clients")
    with duckdb.connect(str(wh.root / warehouse_db.DB_NAME), read_only=True) as con:
        for table in TABLES_READ:
            ((text,),) = con.execute(
                "SELECT sql FROM duckdb_views() WHERE view_name = ?", [table]
            ).fetchall()
            assert compaction.COMPACT_DIR.as_posix() in text
            rows = con.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall()
            assert rows == expected[table]


def test_records_already_in_a_copied_day_are_found_duplicate_through_the_copy(
    wh: Warehouse,
    ingested: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    materialise.build(wh)
    before = _rows(wh)
    found: list[Path] = []
    copy_of = compaction.copy_of

    def spied(wh: Warehouse, table: str, parts: list[Path]) -> Path | None:
        copy = copy_of(wh, table, parts)
        found.extend([copy] if copy is not None else [])
        return copy

    monkeypatch.setattr(compaction, "copy_of", spied)
    # the records of an ingested capture in other bytes (its lines reversed): a new source
    ingested_capture = ingested[0].parent / "capture-00.jsonl"
    again = tmp_path / "again.jsonl"
    again.write_bytes(b"".join(reversed(ingested_capture.read_bytes().splitlines(keepends=True))))
    result = ingest([again], wh, workers=1)
    assert result.total("duplicates") == result.total("records") > 0
    assert found  # the ids already ingested were read from the days' copies
    assert _rows(wh) == before


def test_a_capture_replacing_its_earlier_version_is_not_checked_against_a_copy_holding_it(
    wh: Warehouse, ingested: tuple[Path, Path], tmp_path: Path
) -> None:
    """A --force re-ingest: its old rows are in the copies, but they are its own old version."""
    materialise.build(wh)
    before = _rows(wh)
    result = ingest([ingested[0].parent / "capture-03.jsonl"], wh, workers=1, force=True)
    assert result.total("duplicates") == 0
    assert result.total("accepted") == result.total("records") > 0
    assert _rows(wh) == before


def test_a_damaged_copy_is_named_with_how_to_recover_and_reads_go_on_without_it(
    wh: Warehouse,
) -> None:
    from pipeline.errors import WarehouseError

    expected = _rows(wh)
    materialise.build(wh)
    damaged = _read_copies(wh, "requests")[0]
    damaged.write_bytes(b"not parquet")
    with pytest.raises(WarehouseError, match="not a readable Parquet part") as caught:
        sql.connect(wh, only=["headline"])
    assert caught.value.hint is not None and caught.value.hint.startswith("delete it")
    damaged.unlink()
    assert _rows(wh) == expected


def test_a_marker_whose_copy_was_removed_by_hand_goes_at_the_next_build(
    wh: Warehouse, ingested: tuple[Path, Path]
) -> None:
    materialise.build(wh)
    first = _read_copies(wh, "requests")
    ingest([ingested[1]], wh, workers=1)
    materialise.build(wh)  # supersedes the first copies: markers beside them
    markers = [p.with_name(p.name + compaction.SUPERSEDED) for p in first]
    assert all(m.exists() for m in markers)
    for path in first:
        path.unlink()
    materialise.build(wh, force=True)
    assert not any(m.exists() for m in markers)
