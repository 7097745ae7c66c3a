"""The demo end to end: every planted cache breaker shows up, by cause, in the weekly pages."""

from __future__ import annotations

import csv
import json
import re
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pipeline.demo import write_demo
from pipeline.ingest import ingest
from pipeline.reports.conversation import generate_conversation
from pipeline.reports.weekly import WeekSelection, generate_weekly
from pipeline.warehouse import Warehouse

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> tuple[Warehouse, Path, Path]:
    root = tmp_path_factory.mktemp("demo")
    write_demo(root / "capture.jsonl", seed=7, sessions=8)
    wh = Warehouse(root / "wh")
    ingest([root / "capture.jsonl"], wh, workers=1)
    generate_weekly(wh, root / "out", WeekSelection(all_weeks=True), now=NOW)
    return wh, root / "out", root / "capture.planted.csv"


def planted_rows(planted: Path) -> list[dict[str, str]]:
    with planted.open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def chart_data(page: Path, chart: str) -> list[dict]:
    html = page.read_text(encoding="utf-8")
    raw = re.search(r'id="chart-specs">(.*?)</script>', html, re.S)
    assert raw
    spec = json.loads(raw.group(1)).get(f"chart-{chart}")
    return [] if spec is None else [r for rows in spec["datasets"].values() for r in rows]


def test_the_weekly_pages_show_every_planted_breaker_by_cause(demo) -> None:
    _wh, out, planted = demo
    expected = Counter(row["cause"] for row in planted_rows(planted))
    shown: Counter[str] = Counter()
    pages = sorted(out.glob("2026-W*.html"))
    assert [p.name for p in pages] == ["2026-W47.html", "2026-W48.html"]
    for page in pages:
        for row in chart_data(page, "breaks"):
            shown[row["cause"]] += row["breaks"]
    assert shown == expected


def test_a_conversation_page_lists_its_turns_with_cause_and_excerpt(demo) -> None:
    wh, out, planted = demo
    lines = planted_rows(planted)
    # The first conversation whose system prompt carries a timestamp (research-agent).
    conversation = next(p["session_id"] for p in lines if p["cause"] == "system_changed")
    page = generate_conversation(wh, out, conversation, now=NOW)
    html = page.read_text(encoding="utf-8")
    assert f"<h1>Conversation {conversation}</h1>" in html
    assert "<td>system_changed</td><td>timestamp</td>" in html
    turns = chart_data(page, "conversation-turns")
    assert {r["conversation_id"] for r in turns} == {conversation}
