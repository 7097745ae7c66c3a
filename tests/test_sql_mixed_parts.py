"""Parts with different columns (a warehouse older versions wrote to) are read by name, the
missing columns NULL; parts that all agree are read without DuckDB's union by name, which
re-reads every part's footer each time a view over them is bound."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_cli
from test_ingest_vcr import _one_call_cassette

from pipeline import raw_parts, schema, warehouse_db
from pipeline.errors import WarehouseError
from pipeline.raw_parts import read_options, same_columns
from pipeline.warehouse import Warehouse


def _duckdb_only(monkeypatch: pytest.MonkeyPatch) -> duckdb.DuckDBPyConnection:
    """A connection for `same_columns`, with the footer-at-a-time fallback disabled: the
    DuckDB query itself must answer."""

    def fail(_files: list[Path]) -> None:
        raise AssertionError("the DuckDB read of the footers failed")

    monkeypatch.setattr(raw_parts, "_footer_columns", fail)
    return duckdb.connect()


def _ingest_two(tmp_path: Path) -> Path:
    for n in (1, 2):
        (tmp_path / f"c{n}.yaml").write_text(_one_call_cassette(n))
    wh = tmp_path / "wh"
    done = run_cli("ingest", str(tmp_path / "c1.yaml"), str(tmp_path / "c2.yaml"), "-w", str(wh))
    assert done.returncode == 0, done.stderr
    return wh


def test_parts_that_agree_are_read_without_union_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wh = _ingest_two(tmp_path)
    parts = sorted((wh / "requests").rglob("*.parquet"))
    assert len(parts) == 2 and same_columns(parts)
    assert "union_by_name" not in read_options(schema.load("requests"), parts)
    # the footers read by DuckDB, as commands do
    assert same_columns(parts, _duckdb_only(monkeypatch))


def test_a_part_without_a_newer_column_reads_it_as_null_beside_one_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wh = _ingest_two(tmp_path)
    old, new = sorted((wh / "requests").rglob("*.parquet"))
    table = pq.read_table(old)
    pq.write_table(table.drop_columns(["simulated", "reported_cost"]), old)  # an older writer
    parts = [old, new]
    assert not same_columns(parts)
    assert "union_by_name = true" in read_options(schema.load("requests"), parts)
    with monkeypatch.context() as patch:
        assert not same_columns(parts, _duckdb_only(patch))
    sql = (
        "select input_tokens, simulated, reported_cost is null as no_cost from requests"
        " order by input_tokens"
    )
    got = run_cli("sql", "-w", str(wh), "--format", "json", sql)
    assert got.returncode == 0, got.stderr
    rows = json.loads(got.stdout)
    # _one_call_cassette(n) reports 10 + n prompt tokens; the old part lost `simulated`
    assert [r["input_tokens"] for r in rows] == [11, 12]
    by_tokens = {r["input_tokens"]: r for r in rows}
    old_tokens = pq.read_table(old, columns=["input_tokens"])[0][0].as_py()
    assert by_tokens[old_tokens]["simulated"] is None
    assert by_tokens[23 - old_tokens]["simulated"] is False
    # the DuckDB file any client opens reads them the same way
    warehouse_db.write(Warehouse(wh))
    with duckdb.connect(str(wh / "cacheaudit.duckdb"), read_only=True) as con:
        assert con.sql("select count(*), count(simulated) from raw_requests").fetchall() == [(2, 1)]


def test_the_columns_read_once_in_a_process_are_read_again_when_a_part_changes(
    tmp_path: Path,
) -> None:
    wh = _ingest_two(tmp_path)
    old, new = sorted((wh / "requests").rglob("*.parquet"))
    spec = schema.load("requests")
    assert "union_by_name" not in read_options(spec, [old, new])
    # an older writer's part put in its place, as ingest replaces files: by renaming
    table = pq.read_table(old)
    written = old.with_suffix(".tmp")
    pq.write_table(table.drop_columns(["simulated"]), written)
    written.replace(old)
    assert "union_by_name = true" in read_options(spec, [old, new])


def test_a_part_whose_column_changed_type_is_told_apart_by_either_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wh = _ingest_two(tmp_path)
    old, new = sorted((wh / "requests").rglob("*.parquet"))
    table = pq.read_table(old)
    i = table.schema.get_field_index("input_tokens")
    pq.write_table(table.set_column(i, "input_tokens", table[i].cast(pa.float64())), old)
    assert not same_columns([old, new])
    assert not same_columns([old, new], _duckdb_only(monkeypatch))


def test_an_unreadable_part_is_named_whichever_reader_looks(tmp_path: Path) -> None:
    wh = _ingest_two(tmp_path)
    old, new = sorted((wh / "requests").rglob("*.parquet"))
    old.write_bytes(b"not parquet")
    for con in (None, duckdb.connect()):
        with pytest.raises(WarehouseError, match=re.escape(str(old))):
            same_columns([old, new], con)


def test_parts_hold_their_day_and_are_read_without_hive_partitioning(tmp_path: Path) -> None:
    wh = _ingest_two(tmp_path)
    parts = sorted((wh / "requests").rglob("*.parquet"))
    for part in parts:
        [(day,)] = {(v,) for v in pq.read_table(part, columns=["day"])[0].to_pylist()}
        assert part.parent.name == f"day={day.isoformat()}"
    assert read_options(schema.load("requests"), parts) == "hive_partitioning = false"


def test_a_part_written_before_the_day_was_stored_takes_it_from_its_folder(
    tmp_path: Path,
) -> None:
    wh = _ingest_two(tmp_path)
    old, new = sorted((wh / "requests").rglob("*.parquet"))
    pq.write_table(pq.read_table(old).drop_columns(["day"]), old)  # as older versions wrote
    assert "hive_partitioning = true" in read_options(schema.load("requests"), [old, new])
    sql = "select day::VARCHAR as day, count(*) as n from requests group by all order by day"
    got = run_cli("sql", "-w", str(wh), "--format", "json", sql)
    assert got.returncode == 0, got.stderr
    folders = sorted({p.parent.name.removeprefix("day=") for p in (old, new)})
    assert [r["day"] for r in json.loads(got.stdout)] == folders
