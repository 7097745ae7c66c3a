"""The demo generator's planted cache breakers are recovered by cache_breaks: every planted
(request, cause) is reported, and nothing else is."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline import sql
from pipeline.demo import write_demo
from pipeline.diagnose import planted_precision_recall
from pipeline.ingest import ingest
from pipeline.warehouse import Warehouse


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Warehouse, Path]:
    root = tmp_path_factory.mktemp("demo")
    capture = root / "capture.jsonl"
    write_demo(capture)
    wh = Warehouse(root / "wh")
    ingest([capture], wh)
    return wh, root / "capture.planted.csv"


def test_cache_breaks_recovers_every_planted_breaker_with_its_cause_and_nothing_more(
    demo: tuple[Warehouse, Path],
) -> None:
    wh, planted = demo
    scores = planted_precision_recall(wh, planted)
    assert scores == {"precision": 1.0, "recall": 1.0}


def test_the_timestamp_breaker_is_classed_as_a_timestamp_in_the_system_prompt(
    demo: tuple[Warehouse, Path],
) -> None:
    wh, _ = demo
    rows = (
        sql.connect(wh, only=["cache_breaks"])
        .execute(
            "SELECT DISTINCT changed_kind, change_class FROM cache_breaks "
            "WHERE agent = 'research-agent' AND cause = 'system_changed'"
        )
        .fetchall()
    )
    assert rows == [("system", "timestamp")]


def test_the_reordered_tools_are_classed_as_reordered(demo: tuple[Warehouse, Path]) -> None:
    wh, _ = demo
    rows = (
        sql.connect(wh, only=["cache_breaks"])
        .execute(
            "SELECT DISTINCT changed_kind, change_class FROM cache_breaks "
            "WHERE cause = 'tools_changed'"
        )
        .fetchall()
    )
    assert rows == [("tool", "reordered")]


def test_diagnose_built_views_are_reused_until_an_input_changes(
    demo: tuple[Warehouse, Path],
) -> None:
    wh, _ = demo
    first = sql.build(wh)
    assert {r.name for r in first if r.rebuilt} == set(sql.MATERIALISED)
    assert not any(r.rebuilt for r in sql.build(wh))
    con = sql.connect(wh)
    text = con.execute("SELECT sql FROM duckdb_views() WHERE view_name = 'cache_breaks'").fetchone()
    assert text is not None and "read_parquet" in text[0]
