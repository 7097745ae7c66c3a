"""The ingest benchmark's floor (the work no ingest can skip) is held to ingest's own work: it
hashes exactly the prompt segments ingest stores and reads every response ingest reads, so the
floor is neither padded (which would excuse a slow ingest) nor thinned (which would hide how
close to it ingest is)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import duckdb
import pytest

from pipeline.demo import write_demo
from pipeline.ingest import ingest
from pipeline.warehouse import Warehouse


def _load_bench() -> ModuleType:
    """bench/ingest.py by its path: `ingest` is not a name to put on sys.path's top level."""
    path = Path(__file__).resolve().parents[1] / "bench" / "ingest.py"
    spec = importlib.util.spec_from_file_location("bench_ingest", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench_ingest = _load_bench()


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("floor") / "demo.jsonl"
    write_demo(path, sessions=3)
    return path


def test_floor_hashes_the_segments_ingest_stores(capture: Path, tmp_path: Path) -> None:
    ingest([capture], Warehouse(tmp_path / "wh"), workers=1)
    [(stored,)] = duckdb.sql(
        "SELECT count(*) FROM read_parquet($f)",
        params={"f": str(tmp_path / "wh" / "segments" / "**" / "*.parquet")},
    ).fetchall()
    _, counts = bench_ingest._floor_range(str(capture), 0, capture.stat().st_size)
    assert counts["segments"] == stored > 0


def test_floor_reads_every_record_and_response(capture: Path) -> None:
    lines = capture.read_bytes().splitlines()
    spent, counts = bench_ingest._floor_range(str(capture), 0, capture.stat().st_size)
    assert counts["records"] == len(lines)
    # Every exchange of the demo has a response body (an answer, a stream, or a 429's error).
    assert counts["responses"] == len(lines)
    assert set(spent) == {"baseline", "events", "segments", "parquet"}
    assert all(seconds >= 0 for seconds in spent.values())
