"""The weekly page in a real browser: headless Chromium, network off, page opened from disk.

Asserts no console or script errors, no network attempt, and that every chart drew an svg of a
non-trivial size; then where the marks landed (bars on their day, points on the bars' centres,
a line broken over days without data) and that conversation links open their pages. Skips (with
the reason) only when no Chromium is installed; the Makefile's test set-up installs Debian's
`chromium`.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from test_report_support import EVIL, ROWS, request, write_requests

from pipeline.ingest import ingest
from pipeline.reports import browser
from pipeline.reports.section import conversation_page
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


# --- where things land on the rendered charts (Vega's scenegraph, read back from the page) ---

DAYS_W48 = ["Mon 23 Nov", "Tue 24 Nov", "Wed 25 Nov", "Thu 26 Nov", "Fri 27 Nov", "Sat 28 Nov",
            "Sun 29 Nov"]  # fmt: skip


@pytest.fixture(scope="module")
def gap_pages(tmp_path_factory) -> dict[str, Path]:
    """Week 2026-W48 with data on Monday, Wednesday and Sunday only (hit ratios 13%, 97%, 7%),
    and week 2026-W49 with one day of data."""
    root = tmp_path_factory.mktemp("gaps")
    rows = [
        request("r1", "2026-11-23T10:00:00", "deepseek", "deepseek-v4-flash", 10_000, 1_300),
        request("r2", "2026-11-25T10:00:00", "deepseek", "deepseek-v4-flash", 10_000, 9_700),
        request("r3", "2026-11-29T10:00:00", "deepseek", "deepseek-v4-flash", 10_000, 700),
        request("r4", "2026-12-01T10:00:00", "deepseek", "deepseek-v4-flash", 10_000, 5_000),
    ]
    wh = write_requests(root / "wh", rows)
    generate_weekly(wh, root / "out", WeekSelection(all_weeks=True), now=NOW)
    return {"W48": root / "out" / "2026-W48.html", "W49": root / "out" / "2026-W49.html"}


def drawn_marks(page: Path, chart: str) -> dict[str, list[dict]]:
    """The chart's marks by type (rect: bars, line, symbol: points, text: axis labels)."""
    status = browser.render_status(page)
    assert status["errors"] == []
    (found,) = [c for c in status["charts"] if c["id"] == chart]
    by_type: dict[str, list[dict]] = {}
    for mark in found["marks"]:
        key = "label" if mark["role"] == "axis-label" else mark["type"]
        by_type.setdefault(key, []).append(mark)
    return by_type


def day_ticks(marks: dict[str, list[dict]]) -> dict[str, float]:
    """x of each day label on the x axis."""
    return {
        item["text"]: item["x"]
        for mark in marks["label"]
        for item in mark["items"]
        if item["text"][:3] in ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
    }


def at_ticks(xs: list[float], ticks: list[float]) -> bool:
    """Whether the positions are the ticks' (in order), to a pixel: labels sit half a pixel off
    the scale's position."""
    return len(xs) == len(ticks) and all(abs(x - t) <= 1 for x, t in zip(xs, ticks, strict=True))


def test_cost_bars_sit_on_their_day_tick_and_the_dashed_points_on_their_centres(
    gap_pages: dict[str, Path],
) -> None:
    marks = drawn_marks(gap_pages["W48"], "chart-cost-split")
    ticks = day_ticks(marks)
    assert list(ticks) == DAYS_W48  # the week's seven days, none after Sunday
    spacing = ticks["Tue 24 Nov"] - ticks["Mon 23 Nov"]
    bars = [i for m in marks["rect"] for i in m["items"] if i["height"]]
    centres = sorted({round(b["x"] + b["width"] / 2, 1) for b in bars})
    assert at_ticks(centres, [ticks[d] for d in ("Mon 23 Nov", "Wed 25 Nov", "Sun 29 Nov")])
    assert all(b["width"] < spacing for b in bars)  # a bar stays within its day
    points = [i for m in marks["symbol"] for i in m["items"]]
    assert at_ticks(sorted(p["x"] for p in points), centres)


def test_a_week_with_one_day_draws_one_narrow_bar_and_a_point_on_it(
    gap_pages: dict[str, Path],
) -> None:
    marks = drawn_marks(gap_pages["W49"], "chart-cost-split")
    ticks = day_ticks(marks)
    assert len(ticks) == 7
    spacing = ticks["Wed 02 Dec"] - ticks["Tue 01 Dec"]
    bars = [i for m in marks["rect"] for i in m["items"] if i["height"]]
    centres = sorted({round(b["x"] + b["width"] / 2, 1) for b in bars})
    assert at_ticks(centres, [ticks["Tue 01 Dec"]])
    assert all(b["width"] < spacing for b in bars)
    (point,) = [i for m in marks["symbol"] for i in m["items"]]
    assert at_ticks([point["x"]], centres)


def test_the_hit_ratio_line_breaks_over_days_without_data(gap_pages: dict[str, Path]) -> None:
    marks = drawn_marks(gap_pages["W48"], "chart-hit-ratio")
    ticks = day_ticks(marks)
    assert list(ticks) == DAYS_W48
    (line,) = marks["line"]
    by_day = {
        day: item["defined"]
        for item in line["items"]
        for day, x in ticks.items()
        if abs(item["x"] - x) < 1
    }
    # drawn only where a day has data: no segment joins Monday to Wednesday to Sunday
    assert by_day == {d: d in ("Mon 23 Nov", "Wed 25 Nov", "Sun 29 Nov") for d in DAYS_W48}
    points = sorted((i["x"], i["y"]) for m in marks["symbol"] for i in m["items"])
    assert at_ticks(
        [x for x, _ in points], [ticks[d] for d in ("Mon 23 Nov", "Wed 25 Nov", "Sun 29 Nov")]
    )
    # 13% -> 97% -> 7%: y grows downwards, so Wednesday's point is the highest
    assert points[1][1] < points[0][1] < points[2][1]


def test_conversation_ids_link_to_their_pages_which_open_offline(demo_page: Path) -> None:
    dom = browser.dump_dom(demo_page)
    top = dom[dom.index("Top conversations by tokens lost") :]
    top = top[: top.index("</table>")]
    links = re.findall(r'<td><a href="([^"]+)">([^<]+)</a></td>', top)
    assert links, "no conversation link in the top conversations table"
    for href, conversation_id in links:
        # relative: beside the weekly page, the page of that week's read
        assert href == conversation_page(conversation_id, "2026-W47")
    # every conversation link of the page (top breaks, hygiene examples) opens a written page
    hrefs = set(re.findall(r'<a href="(conversation-[^"]+)">', dom))
    assert len(hrefs) >= len(links)
    assert all((demo_page.parent / href).is_file() for href in hrefs)
    hygiene = dom[dom.index("Prefix hygiene findings") :]
    assert re.search(r'<td><a href="conversation-[^"]+">[^<]+</a></td>', hygiene)
    page = demo_page.parent / links[0][0]
    status = browser.render_status(page)
    assert (status["errors"], status["resources"]) == ([], 0)
    assert all(chart["ok"] for chart in status["charts"])
    text = browser.dump_dom(page)
    assert "expected read is what the provider's rules allow to be read from the prompt" in text
    assert "the prefix the previous turn had built" in text


@pytest.fixture(scope="module")
def hex_week(tmp_path_factory) -> Path:
    """The week of tests/fixtures/breaks/system_changed.jsonl (a cold start, then one
    system_changed break) named as `capture run` without session hints names it: the
    conversation and each request by 32 hex digits."""
    import json

    root = tmp_path_factory.mktemp("hex")
    source = Path(__file__).parent / "fixtures" / "breaks" / "system_changed.jsonl"
    lines = []
    for n, line in enumerate(source.read_text(encoding="utf-8").splitlines()):
        record = json.loads(line)
        record["id"] = f"{n + 1:032x}"
        record["hints"] = {"session_id": "e38e3678d7594f36aa0cb839a487edc5", "tags": []}
        lines.append(json.dumps(record))
    capture = root / "capture.jsonl"
    capture.write_text("\n".join(lines) + "\n", encoding="utf-8")
    wh = Warehouse(root / "wh")
    ingest([capture], wh, workers=1)
    generate_weekly(wh, root / "out", WeekSelection(week="2026-W47"), now=NOW)
    page = root / "out" / "2026-W47.html"
    assert "e38e3678d7594f36aa0cb839a487edc5" in page.read_text(encoding="utf-8")
    return page


def test_a_week_of_long_unbroken_ids_fits_the_window_without_a_sideways_scroll(
    hex_week: Path,
) -> None:
    # the ids did not wrap in the "What to fix" and top-conversations tables, so the table ran
    # past its section and the page scrolled sideways, the fix column one word per line
    status = browser.render_status(hex_week, width=1200)
    assert status["errors"] == []
    assert status["page_width"] <= 1200


def test_a_cause_of_one_request_is_labelled_1_request_not_1_requests(hex_week: Path) -> None:
    marks = drawn_marks(hex_week, "chart-breaks")
    labels = sorted(i["text"] for m in marks["text"] for i in m["items"] if i["text"])
    # one cold start (sys-1) and one system_changed break (sys-2)
    assert labels == ["1 request", "1 request"]
