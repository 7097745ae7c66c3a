"""Golden captures, one per cause (tests/fixtures/breaks/, built by its build.py): the last
request of each is reported with the cause, position, byte offset and class worked out by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pipeline import sql
from pipeline.ingest import ingest
from pipeline.warehouse import Warehouse

BREAKS = Path(__file__).resolve().parent / "fixtures" / "breaks"
EXPECTED: dict[str, dict[str, Any]] = {
    k: v for k, v in json.loads((BREAKS / "expected.json").read_text()).items() if k[0] != "_"
}


@pytest.fixture(scope="module")
def breaks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """cache_breaks rows by request id, each capture in its own warehouse."""
    out: dict[str, dict[str, Any]] = {}
    for cause in EXPECTED:
        wh = Warehouse(tmp_path_factory.mktemp(cause) / "wh")
        ingest([BREAKS / f"{cause}.jsonl"], wh, workers=1)
        rel = sql.connect(wh, only=["cache_breaks"]).sql("SELECT * FROM cache_breaks")
        for row in rel.fetchall():
            item = dict(zip(rel.columns, row, strict=True))
            out[item["request_id"]] = item
    return out


@pytest.mark.parametrize("cause", sorted(EXPECTED))
def test_each_golden_capture_reports_its_cause_where_and_what_it_cost(
    breaks: dict[str, dict[str, Any]], cause: str
) -> None:
    want = EXPECTED[cause]
    got = breaks[want["request_id"]]
    assert got["cause"] == want["cause"]
    for key in ("changed_position", "change_offset", "change_class", "tokens_lost"):
        if key in want:
            assert got[key] == want[key], key
    if "excerpt_contains" in want:
        assert want["excerpt_contains"] in got["excerpt"]


def test_a_golden_capture_reports_only_its_own_break_beyond_the_cold_start(
    breaks: dict[str, dict[str, Any]],
) -> None:
    first_turns = {r for r, b in breaks.items() if b["turn"] == 1}
    assert {b["cause"] for r, b in breaks.items() if r in first_turns} == {"cold_start"}
    assert len(breaks) == len(first_turns) + len(EXPECTED) - 1  # cold_start has one request
