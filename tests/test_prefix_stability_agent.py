"""prefix_stability and report_prefix_stability name an agent that was not recorded the way
their schemas say: NULL in prefix_stability (unknown is NULL), 'unknown agent' in the report
view. conversations and request_prefix are shadowed by hand-written rows (temp tables), so the
two views' SQL is pinned alone."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from test_report_support import request, write_requests

from pipeline import schema, sql

W48 = date(2026, 11, 23)


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    rows = [request("r1", "2026-11-23T10:00:00", "deepseek", "deepseek-chat", 1000, 0)]
    con = sql.connect(
        write_requests(tmp_path_factory.mktemp("stability") / "wh", rows),
        only=["report_prefix_stability"],
    )
    # the rows this test needs, in place of the heavy views the session computed as tables
    con.execute(
        "CREATE OR REPLACE TEMP TABLE conversations (request_id VARCHAR, conversation_id VARCHAR,"
        " parent_request_id VARCHAR, agent VARCHAR, started_at TIMESTAMPTZ)"
    )
    con.execute(
        "CREATE OR REPLACE TEMP TABLE request_prefix (request_id VARCHAR, tools_hash VARCHAR,"
        " system_hash VARCHAR, before_last_reply_hash VARCHAR, history_hash VARCHAR)"
    )
    # Conversation A: no agent recorded; its second turn changed the system prompt.
    # Conversation B: an agent that really is called "(none)"; its second turn changed nothing.
    con.executemany(
        "INSERT INTO conversations VALUES (?, ?, ?, ?, ?)",
        [
            ("a1", "A", None, None, at("2026-11-23T10:00:00")),
            ("a2", "A", "a1", None, at("2026-11-23T10:01:00")),
            ("b1", "B", None, "(none)", at("2026-11-23T11:00:00")),
            ("b2", "B", "b1", "(none)", at("2026-11-23T11:01:00")),
        ],
    )
    con.executemany(
        "INSERT INTO request_prefix VALUES (?, ?, ?, ?, ?)",
        [
            ("a1", "t", "s1", None, "h1"),
            ("a2", "t", "s2", "h1", "h2"),
            ("b1", "t", "s", None, "h1"),
            ("b2", "t", "s", "h1", "h2"),
        ],
    )
    return con


def test_prefix_stability_keeps_an_unrecorded_agent_null_apart_from_a_real_agent_name(
    con,
) -> None:
    got = con.execute(
        "SELECT agent, turns, changed_turns FROM prefix_stability"
        " WHERE scope = 'agent' AND part = 'system' ORDER BY agent NULLS FIRST"
    ).fetchall()
    assert got == [(None, 1, 1), ("(none)", 1, 0)]


def test_the_weekly_view_labels_the_unrecorded_agent_as_its_schema_says(con) -> None:
    got = con.execute(
        "SELECT week, agent, turns, changed_turns FROM report_prefix_stability"
        " WHERE part = 'system' ORDER BY agent"
    ).fetchall()
    assert got == [(W48, "(none)", 1, 0), (W48, "unknown agent", 1, 1)]
    documented = {c.name: c.description for c in schema.load("report_prefix_stability").columns}
    assert "'unknown agent' when not recorded" in documented["agent"]


def test_a_turn_just_after_utc_midnight_counts_on_its_utc_day_whatever_the_session_zone(
    tmp_path,
) -> None:
    # A DuckDB client of <warehouse>/cacheaudit.duckdb that did not SET TimeZone = 'UTC': its
    # session zone is the machine's. c2, 00:20 UTC on Monday 30 Nov 2026 (2026-W49), changed the
    # system prompt; in Los Angeles (UTC-8) that is still Sunday 29 Nov (2026-W48). Every view
    # puts c2 on its UTC day, 30 Nov, in the week of Monday 30 Nov: so must these two.
    rows = [request("r1", "2026-11-29T23:50:00", "deepseek", "deepseek-chat", 1000, 0)]
    con = sql.connect(write_requests(tmp_path / "wh", rows), only=["report_prefix_stability"])
    con.execute(
        "CREATE OR REPLACE TEMP TABLE conversations (request_id VARCHAR, conversation_id VARCHAR,"
        " parent_request_id VARCHAR, agent VARCHAR, started_at TIMESTAMPTZ)"
    )
    con.execute(
        "CREATE OR REPLACE TEMP TABLE request_prefix (request_id VARCHAR, tools_hash VARCHAR,"
        " system_hash VARCHAR, before_last_reply_hash VARCHAR, history_hash VARCHAR)"
    )
    con.executemany(
        "INSERT INTO conversations VALUES (?, ?, ?, ?, ?)",
        [
            ("c1", "C", None, "midnight", at("2026-11-29T23:50:00")),
            ("c2", "C", "c1", "midnight", at("2026-11-30T00:20:00")),
        ],
    )
    con.executemany(
        "INSERT INTO request_prefix VALUES (?, ?, ?, ?, ?)",
        [("c1", "t", "s1", None, "h1"), ("c2", "t", "s2", "h1", "h2")],
    )
    con.execute("SET TimeZone = 'America/Los_Angeles'")
    day = con.execute(
        "SELECT day, turns, changed_turns FROM prefix_stability"
        " WHERE scope = 'conversation' AND part = 'system'"
    ).fetchall()
    assert day == [(date(2026, 11, 30), 1, 1)]
    week = con.execute(
        "SELECT week, turns, changed_turns FROM report_prefix_stability WHERE part = 'system'"
    ).fetchall()
    assert week == [(date(2026, 11, 30), 1, 1)]
