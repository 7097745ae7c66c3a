"""A whole-history read prices its requests a run of days at a time (computed whole, 10M
requests spilled far past the memory cap): the table it builds holds exactly the rows, in the
order, of request_costs priced in one piece."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from fixtures.cassettes import undated_cassette

from pipeline import priced_by_days
from pipeline import sql as sqlmod
from pipeline.demo import write_demo
from pipeline.ingest import ingest
from pipeline.materialise import build
from pipeline.warehouse import Warehouse


@pytest.fixture(scope="module")
def wh(tmp_path_factory: pytest.TempPathFactory) -> Warehouse:
    root = tmp_path_factory.mktemp("priced")
    capture = root / "capture.jsonl"
    write_demo(capture, seed=7, sessions=24)
    warehouse = Warehouse(root / "warehouse")
    ingest([capture, undated_cassette(root / "undated.json")], warehouse, workers=1)
    build(warehouse)
    return warehouse


def _rows(con: Any) -> list[tuple[Any, ...]]:
    return con.execute("SELECT * FROM request_costs").fetchall()


def test_request_costs_priced_a_few_days_at_a_time_equal_those_priced_at_once(
    wh: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[int] = []
    real = priced_by_days.day_runs

    def counting(*args: Any, **kwargs: Any) -> Any:
        found = real(*args, **kwargs)
        runs.append(len(found))
        return found

    monkeypatch.setattr(sqlmod, "day_runs", counting)
    shown: list[list[Path]] = []  # the parts `requests` showed, each time they were set
    register = sqlmod._register_raw

    def registering(con: Any, table: str, files: list[Path]) -> None:
        if table == "requests":
            shown.append(sorted(files))
        register(con, table, files)

    monkeypatch.setattr(sqlmod, "_register_raw", registering)
    monkeypatch.setattr(priced_by_days, "CHUNK_REQUESTS", 150)
    by_runs = sqlmod.connect(wh, only=["request_costs"])
    # the demo's week in runs of up to 150 requests (a day holds more: a run each), then the
    # undated request alone
    assert runs and runs[0] >= 5
    # priced run by run: each run showed its own parts, between the session's first and last
    # look at all of them
    assert len(shown) == runs[0] + 2 and shown[0] == shown[-1]
    assert sorted(p for run in shown[1:-1] for p in run) == shown[0]
    whole = sqlmod.connect(wh)  # every view: request_costs a plain view, priced in one piece
    expected = _rows(whole)
    assert len(expected) > 1000 and any(r[1] is None for r in expected)  # started_at
    assert _rows(by_runs) == expected
    # the session reads every request again afterwards, and every stored day of the prefixes
    for table in ("requests", "request_prefix"):
        count = f"SELECT count(*) FROM {table}"
        assert by_runs.execute(count).fetchall() == whole.execute(count).fetchall()


def test_runs_are_whole_days_in_day_order_with_the_undated_parts_last(wh: Warehouse) -> None:
    files = wh.snapshot(("requests",))["requests"]
    con = sqlmod.connect(wh, only=["requests"])
    runs = priced_by_days.day_runs(con, files, limit=150)
    days = [d for d, _ in runs]
    assert days[-1] is None and None not in days[:-1]
    dated = [d for d in days if d is not None]
    assert all(a.last < b.first for a, b in itertools.pairwise(dated))
    assert sorted(p for _, parts in runs for p in parts) == sorted(files)
    assert len(priced_by_days.day_runs(con, files, limit=10**9)) == 2  # the week, the undated
