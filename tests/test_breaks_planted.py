"""The demo generator's planted cache breakers are recovered by cache_breaks: every planted
(request, cause) is reported, and nothing else is."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline import derived, materialise, sql
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


def test_a_change_planted_on_a_refused_turn_is_also_planted_on_the_next_processed_turn(
    tmp_path: Path,
) -> None:
    # seed 11 rate-limits two ops-agent turns that reorder the tools: the refused turn wrote no
    # cache, so the next turn is compared with the last processed one and breaks too; the
    # generator once let the refused prompt warm its cache model and listed only that turn
    capture = tmp_path / "capture.jsonl"
    write_demo(capture, seed=11, sessions=20)
    wh = Warehouse(tmp_path / "wh")
    ingest([capture], wh)
    planted = tmp_path / "capture.planted.csv"
    assert planted_precision_recall(wh, planted) == {"precision": 1.0, "recall": 1.0}
    # the case is exercised: a refused turn's planted change is planted again on the next turn
    con = sql.connect(wh, only=["requests"])
    con.execute("CREATE TEMP TABLE planted AS SELECT * FROM read_csv(?)", [str(planted)])
    carried = con.execute(
        "SELECT count(*) FROM planted AS p JOIN requests AS r USING (request_id) "
        "JOIN requests AS n ON n.session_id = r.session_id AND n.started_at > r.started_at "
        "JOIN planted AS q ON q.request_id = n.request_id AND q.cause = p.cause "
        "WHERE r.status_code = 429 AND p.cause = 'tools_changed' AND NOT EXISTS ("
        "  SELECT 1 FROM requests AS m WHERE m.session_id = r.session_id"
        "  AND m.started_at > r.started_at AND m.started_at < n.started_at)"
    ).fetchone()
    assert carried is not None and carried[0] >= 2


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
    first = materialise.build(wh)
    assert {r.name for r in first if r.rebuilt} == set(derived.MATERIALISED)
    assert not any(r.rebuilt for r in materialise.build(wh))
    con = sql.connect(wh)
    text = con.execute("SELECT sql FROM duckdb_views() WHERE view_name = 'cache_breaks'").fetchone()
    assert text is not None and "read_parquet" in text[0]
