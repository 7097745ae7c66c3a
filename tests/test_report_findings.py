"""The weekly page opens with its findings: the week's cache breaks grouped by what to fix,
with the money each lost and the fix. A golden file pins the section's HTML from fixed rows;
on the demo, each week's findings hold every break of that week once and their money sums to
the week's break money (worked out with separate SQL over break_costs)."""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from test_report_support import EVIL

from pipeline import sql as sqlmod
from pipeline.demo import write_demo
from pipeline.ingest import ingest
from pipeline.reports.data import WeekData
from pipeline.reports.sections import findings
from pipeline.reports.weekly import WeekSelection, generate_weekly
from pipeline.reports.weeks import IsoWeek
from pipeline.warehouse import Warehouse

GOLDEN = Path(__file__).resolve().parent / "golden" / "report" / "findings_section.html"
NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)

ROWS: list[dict[str, Any]] = [
    {
        "week": "2026-11-23", "rank": 1, "scope_kind": "agent", "scope": EVIL,
        "cause": "system_changed", "changed_kind": "system", "changed_role": "system",
        "changed_position": 4, "change_class": "timestamp", "currency": "USD", "turns": 40,
        "conversations": 2, "tokens_lost": 1_200_000, "tokens_lost_unknown": 0,
        "lost_cost": 0.19, "lost_cost_unknown": 0, "fix": "move the timestamp after the history",
        "max_gap_s": 30.0, "example_request_id": "r-17", "example_conversation_id": "c-1",
        "example_parent_excerpt": "time: 10:00", "example_excerpt": "time: 10:01",
    },
    {
        "week": "2026-11-23", "rank": 2, "scope_kind": "conversation", "scope": "c-2",
        "cause": "expired", "changed_kind": None, "changed_role": None,
        "changed_position": None, "change_class": None, "currency": None, "turns": 3,
        "conversations": 1, "tokens_lost": None, "tokens_lost_unknown": 3,
        "lost_cost": None, "lost_cost_unknown": 3,
        "fix": "send within the cache lifetime", "max_gap_s": 3900.0,
        "example_request_id": "r-40", "example_conversation_id": "c-2",
        "example_parent_excerpt": None, "example_excerpt": None,
    },
]  # fmt: skip


def _section_html() -> str:
    section = findings.build(WeekData(IsoWeek.parse("2026-W48"), {findings.VIEW: ROWS}))
    return f"<h2>{section.title}</h2>\n<p>{section.caption}</p>\n{section.body_html}\n"


def test_the_findings_section_renders_as_its_golden_file() -> None:
    html = _section_html()
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(html, encoding="utf-8")
    assert html == GOLDEN.read_text(encoding="utf-8")


def test_a_finding_reads_as_cause_place_change_and_idle_gap_with_unknown_money_counted() -> None:
    html = _section_html()
    assert "system_changed · system @4 · timestamp" in html
    assert "expired · idle up to 1 h 5 min" in html  # 3,900 s
    assert "0.1900 USD" in html
    assert "3 breaks had no known money" in html
    assert "<script" not in html  # the agent name is escaped, never markup
    # the example opens its conversation; a conversation scope links to its own page
    assert html.count('href="conversation-c-2-') == 2 and 'href="conversation-c-1-' in html


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Warehouse, Any]:
    root = tmp_path_factory.mktemp("demo")
    write_demo(root / "capture.jsonl", seed=7, sessions=24)
    wh = Warehouse(root / "warehouse")
    ingest([root / "capture.jsonl"], wh, workers=1)
    return wh, sqlmod.connect(wh)


def test_each_weeks_findings_hold_its_breaks_once_and_sum_to_its_break_money(
    demo: tuple[Warehouse, Any],
) -> None:
    _, con = demo
    by_view = con.sql(
        "SELECT week, currency, sum(turns), round(sum(lost_cost), 9) FROM report_findings"
        " GROUP BY ALL ORDER BY ALL"
    ).fetchall()
    by_hand = con.sql(
        "SELECT date_trunc('week', (started_at AT TIME ZONE 'UTC')::DATE)::DATE, currency,"
        " count(*), round(sum(lost_cost), 9) FROM break_costs WHERE cause <> 'cold_start'"
        " GROUP BY ALL ORDER BY ALL"
    ).fetchall()
    assert by_view == by_hand
    assert len({row[0] for row in by_view}) >= 2  # the demo spans weeks: each is its own


def test_the_weekly_page_opens_with_the_findings_and_writes_the_pages_they_link(
    demo: tuple[Warehouse, Any], tmp_path: Path
) -> None:
    wh, con = demo
    ((week,),) = con.sql("SELECT strftime(max(week), '%G-W%V') FROM report_findings").fetchall()
    out = tmp_path / "out"
    generate_weekly(wh, out, WeekSelection(week=week), now=NOW)
    html = (out / f"{week}.html").read_text(encoding="utf-8")
    sections = re.findall(r'<section[^>]*id="([^"]+)"', html)
    assert sections[0].endswith("findings"), sections
    (top,) = con.execute(
        "SELECT scope, fix, example_conversation_id FROM report_findings"
        " WHERE strftime(week, '%G-W%V') = ? AND rank = 1",
        [week],
    ).fetchall()
    first = html[html.index("What to fix") :]
    assert top[0] in first[:5000] and top[1] in first[:5000]
    linked = re.findall(r'href="(conversation-[^"]+)"', first[: first.index("</table>")])
    assert linked and all((out / name).exists() for name in linked)


def test_the_conversation_page_shows_each_breaks_money_in_its_row(
    demo: tuple[Warehouse, Any], tmp_path: Path
) -> None:
    from pipeline.reports.conversation import generate_conversation
    from pipeline.reports.numbers import money

    wh, con = demo
    ((cid,),) = con.sql(
        "SELECT conversation_id FROM break_costs WHERE lost_cost > 0"
        " GROUP BY 1 ORDER BY sum(lost_cost) DESC LIMIT 1"
    ).fetchall()
    breaks = con.execute(
        "SELECT turn, lost_cost, currency FROM break_costs"
        " WHERE conversation_id = ? AND lost_cost > 0 ORDER BY turn",
        [cid],
    ).fetchall()
    page = generate_conversation(wh, tmp_path, cid, now=NOW).read_text(encoding="utf-8")
    rows = re.findall(r"<tr><td class=\"num\">(\d+)</td>(.*?)</tr>", page)
    by_turn = {int(turn): cells for turn, cells in rows}
    assert breaks
    for turn, cost, currency in breaks:
        assert f"<td>{money(cost)} {currency}</td>" in by_turn[turn], turn


def test_the_conversation_page_names_the_prices_of_its_money_and_the_turns_its_chart_leaves_out(
    demo: tuple[Warehouse, Any], tmp_path: Path
) -> None:
    from pipeline.reports.conversation import generate_conversation

    wh, con = demo
    # a conversation with turns whose input was not reported: in the table, not in the chart
    (cid, turns), *_ = con.execute(
        "SELECT c.conversation_id, list(c.turn ORDER BY c.turn) FROM conversations AS c"
        " JOIN requests AS r USING (request_id) WHERE r.input_tokens IS NULL"
        " GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1"
    ).fetchall()
    ((digest,),) = con.execute("SELECT price_digest FROM price_digest").fetchall()
    page = generate_conversation(wh, tmp_path, cid, now=NOW).read_text(encoding="utf-8")
    assert f"<dt>Price table digest</dt><dd><code>{digest}</code>" in page
    listed = ", ".join(str(t) for t in turns)
    word = "turn" if len(turns) == 1 else "turns"
    assert (
        f"The chart leaves out {len(turns)} {word} whose input was not reported (turn {listed})"
        in page
    )
