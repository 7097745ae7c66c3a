"""A conversation page written by `report weekly` holds only the turns of the days that week
read; it says so whichever end the week cut, so its turn count is never taken for the whole
conversation (`report conversation` shows every turn)."""

from __future__ import annotations

import html as htmllib
import json
import re
from datetime import UTC, datetime
from pathlib import Path

from test_prefix_support import BIG, REPLY, chat, system, user, warehouse

from pipeline import materialise
from pipeline.reports.conversation import generate_conversation
from pipeline.reports.section import conversation_page
from pipeline.reports.weekly import WeekSelection, generate_weekly

NOW = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)


def subtitle(path: Path) -> str:
    found = re.search(r'<p class="subtitle">(.*?)</p>', path.read_text(encoding="utf-8"), re.S)
    assert found, path
    return htmllib.unescape(re.sub(r"<[^>]+>", "", found.group(1)))


def test_a_conversation_past_sunday_midnight_is_shown_as_the_turns_its_week_read(
    tmp_path: Path,
) -> None:
    # One session, four turns: Sunday 29 Nov 2026 (the last day of 2026-W48) 23:50 and 23:58,
    # Monday 30 Nov (2026-W49) 00:05 and 00:20. Turn 2 changes the system prompt, a cache
    # break in W48, so the W48 page links the conversation's page.
    first, changed = system(BIG), system(BIG + " Today is Sunday.")
    q = [user(f"step {i}") for i in range(4)]
    lines = [
        chat(datetime(2026, 11, 29, 23, 50, tzinfo=UTC), "t1", [first, q[0]], session="s"),
        chat(datetime(2026, 11, 29, 23, 58, tzinfo=UTC), "t2", [changed, q[0], REPLY, q[1]],
             session="s"),
        chat(datetime(2026, 11, 30, 0, 5, tzinfo=UTC), "t3",
             [changed, q[0], REPLY, q[1], REPLY, q[2]], session="s"),
        chat(datetime(2026, 11, 30, 0, 20, tzinfo=UTC), "t4",
             [changed, q[0], REPLY, q[1], REPLY, q[2], REPLY, q[3]], session="s"),
    ]  # fmt: skip
    wh = warehouse(tmp_path, lines)
    out = tmp_path / "out"
    generate_weekly(wh, out, WeekSelection(week="2026-W48"), now=NOW)
    page = out / conversation_page("s", "2026-W48")
    assert page.name in (out / "2026-W48.html").read_text(encoding="utf-8")
    # W48 read its days (and a margin before them), so turns 1 and 2 only: the page must not
    # pass them off as the whole conversation of four.
    assert subtitle(page).endswith(
        "2 turns from 2026-11-29T23:50:00 to 2026-11-29T23:58:00 UTC (turns 1 to 2: those in"
        " the days read for week 2026-W48; `cacheaudit report conversation` shows every turn)"
    )
    # `report conversation` reads every day: all four turns, and no note.
    full = generate_conversation(wh, tmp_path / "full", "s", now=NOW)
    assert full.name == conversation_page("s")
    assert subtitle(full).endswith("4 turns from 2026-11-29T23:50:00 to 2026-11-30T00:20:00 UTC")


def test_the_next_weeks_page_of_a_conversation_does_not_replace_the_one_a_week_links_to(
    tmp_path: Path,
) -> None:
    # One session: Saturday 28 Nov 2026 10:00 and 10:02 (a system change: W48's break, its
    # finding's example t2), Sunday 29 Nov 09:00, Monday 30 Nov 00:10 (another system change:
    # W49's break). W49 reads its days and the margin before them, not Saturday: its page of
    # the conversation cannot show t2, which the W48 page's finding opens.
    first, sat, mon = system(BIG), system(BIG + " Saturday."), system(BIG + " Saturday. Monday.")
    q = [user(f"step {i}") for i in range(4)]
    lines = [
        chat(datetime(2026, 11, 28, 10, 0, tzinfo=UTC), "t1", [first, q[0]], session="s"),
        chat(datetime(2026, 11, 28, 10, 2, tzinfo=UTC), "t2", [sat, q[0], REPLY, q[1]],
             session="s"),
        chat(datetime(2026, 11, 29, 9, 0, tzinfo=UTC), "t3",
             [sat, q[0], REPLY, q[1], REPLY, q[2]], session="s"),
        chat(datetime(2026, 11, 30, 0, 10, tzinfo=UTC), "t4",
             [mon, q[0], REPLY, q[1], REPLY, q[2], REPLY, q[3]], session="s"),
    ]  # fmt: skip
    wh = warehouse(tmp_path, lines)
    materialise.build(wh)  # the stored views: a week then reads one day before its Monday
    out = tmp_path / "out"
    generate_weekly(wh, out, WeekSelection(all_weeks=True), now=NOW)  # W48, then W49
    w48 = (out / "2026-W48.html").read_text(encoding="utf-8")
    w49 = (out / "2026-W49.html").read_text(encoding="utf-8")
    assert conversation_page("s", "2026-W48") in w48
    assert conversation_page("s", "2026-W49") in w49
    # what W48 links to still holds W48's turns, t2 among them, after W49 was written
    linked = (out / conversation_page("s", "2026-W48")).read_text(encoding="utf-8")
    assert turns_of(linked) == ["t1", "t2", "t3"]
    assert turns_of((out / conversation_page("s", "2026-W49")).read_text(encoding="utf-8")) == [
        "t3",
        "t4",
    ]


def turns_of(page: str) -> list[str]:
    """The request ids of the turns a conversation page draws (its chart's data)."""
    specs = json.loads(
        re.search(
            r'<script type="application/json" id="chart-specs">(.*?)</script>', page, re.S
        ).group(1)  # type: ignore[union-attr]
    )
    rows = next(iter(specs["chart-conversation-turns"]["datasets"].values()))
    return [r["request_id"] for r in rows]
