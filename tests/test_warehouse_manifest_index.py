"""The manifest of many sources is read in one DuckDB call, and reads as the files one by one
do: an hourly ingest into months of sources must not read each manifest file on its own."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_cli

from pipeline import ingest
from pipeline import warehouse as warehouse_module
from pipeline.warehouse import Warehouse

FIXTURES = Path(__file__).parent / "fixtures" / "breaks"


def _ingest_each(wh: Path) -> list[str]:
    files = sorted(str(p) for p in FIXTURES.glob("*.jsonl"))
    done = run_cli("ingest", *files, "--warehouse", str(wh), "--workers", "1")
    assert done.returncode == 0, done.stderr
    return files


def _without_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one-by-one read is the fallback when DuckDB fails: here it must not be needed."""

    def fail(*_args: object) -> None:
        raise AssertionError("the DuckDB read of the manifests failed")

    monkeypatch.setattr(Warehouse, "_manifest_rows_one_by_one", fail)


def test_many_manifests_read_at_once_equal_the_files_read_one_by_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = _ingest_each(tmp_path / "wh")
    wh = Warehouse(tmp_path / "wh")
    one_by_one = wh.manifest_index()
    monkeypatch.setattr(warehouse_module, "MANY_MANIFESTS", 2)
    _without_fallback(monkeypatch)
    at_once = wh.manifest_index()
    assert len(at_once) == len(files) > 2
    assert at_once == one_by_one
    assert {row["source"] for _stem, row in at_once.values()} == set(files)


def test_a_file_ingested_again_is_recognised_when_many_manifests_are_read_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wh = tmp_path / "wh"
    files = _ingest_each(wh)
    monkeypatch.setattr(warehouse_module, "MANY_MANIFESTS", 2)
    _without_fallback(monkeypatch)
    result = ingest.ingest([Path(files[0])], Warehouse(wh), workers=1)
    assert [fr.status for fr in result.files] == ["unchanged"]
