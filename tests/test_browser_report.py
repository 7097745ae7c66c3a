"""The weekly page in a real browser: headless Chromium, network off, page opened from disk.

Asserts no console or script errors, no network attempt, and that every chart drew an svg of a
non-trivial size. Skips (with the reason) only when no Chromium is installed; the Makefile's
test set-up installs Debian's `chromium`.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from test_report_support import EVIL, ROWS, write_requests

from pipeline.ingest import ingest
from pipeline.reports import browser
from pipeline.reports.weekly import WeekSelection, generate_weekly
from pipeline.warehouse import Warehouse

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        browser.find_chromium() is None,
        reason="chromium is not installed (apt-get install -y chromium)",
    ),
]
NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def demo_page(tmp_path_factory) -> Path:
    from pipeline.demo import write_demo

    root = tmp_path_factory.mktemp("demo")
    write_demo(root / "capture.jsonl", seed=7, sessions=8)
    wh = Warehouse(root / "wh")
    ingest([root / "capture.jsonl"], wh, workers=1)
    generate_weekly(wh, root / "out", WeekSelection(week="2026-W47"), now=NOW)
    return root / "out" / "2026-W47.html"


def chart_ids(page: Path) -> list[str]:
    return re.findall(r'<div class="chart" id="(chart-[a-z0-9-]+)"></div>', page.read_text())


def test_every_chart_of_the_demo_week_renders_offline_without_errors(demo_page: Path) -> None:
    status = browser.render_status(demo_page)
    assert status["errors"] == []
    assert status["blocked"] == []
    assert status["resources"] == 0  # not one network request, even a failed one
    expected = chart_ids(demo_page)
    assert len(expected) >= 3
    drawn = {c["id"]: c for c in status["charts"]}
    assert sorted(drawn) == sorted(expected)
    for chart in drawn.values():
        assert chart["ok"], chart
        assert chart["width"] > 200 and chart["height"] > 150, chart


def test_the_demo_week_screenshot_is_a_real_image(demo_page: Path, tmp_path: Path) -> None:
    png = browser.screenshot(demo_page, tmp_path / "week.png")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 50_000  # charts and text, not a blank page


def test_a_script_tag_in_a_model_name_stays_text_in_the_browser(tmp_path: Path) -> None:
    wh = write_requests(tmp_path / "wh", ROWS)
    generate_weekly(wh, tmp_path / "out", WeekSelection(week="2026-W48"), now=NOW)
    page = tmp_path / "out" / "2026-W48.html"
    status = browser.render_status(page)
    assert status["errors"] == []  # the probe records any alert() call as an error
    dom = browser.dump_dom(page)
    assert dom.count("<script") == 4  # probe, specs, bundle, embed: nothing injected
    escaped = "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;"
    assert f"openai · {escaped}" in dom  # as text in the models table and the chart legend
    assert EVIL not in dom
