"""prefix_hygiene takes each finding's example (request, conversation, position, excerpt) from
ONE row, the same on every run: the most tokens lost, ties broken by the lowest request_id; for
orphan findings the lowest position, then request_id, then id. Fed hand-written rows: temp
tables shadow the upstream views (as in test_report_diagnosis_views.py)."""

from __future__ import annotations

import pytest
from test_report_support import request, write_requests

from pipeline import sql

EXAMPLE = (
    "SELECT example_request_id, conversation_id, position, excerpt FROM prefix_hygiene"
    " WHERE finding = ? ORDER BY subject"
)
BREAK_COLUMNS = (
    "request_id VARCHAR, conversation_id VARCHAR, turn INTEGER, agent VARCHAR, cause VARCHAR,"
    " tokens_lost BIGINT, change_class VARCHAR, changed_kind VARCHAR, changed_position INTEGER,"
    " excerpt VARCHAR"
)
CONVERSATION_COLUMNS = (
    "request_id VARCHAR, conversation_id VARCHAR, turn INTEGER, agent VARCHAR,"
    " started_at TIMESTAMPTZ"
)
SEGMENT_COLUMNS = (
    "request_id VARCHAR, position INTEGER, kind VARCHAR, role VARCHAR, segment_hash BIGINT"
)
AT = "2026-11-23 10:00:00+00"


@pytest.fixture
def con(tmp_path):
    wh = write_requests(
        tmp_path / "wh", [request("r1", "2026-11-23T10:00:00", "deepseek", "m", 10, 0)]
    )
    return sql.connect(wh)


def shadow(con, view: str, columns: str, rows: list[tuple]) -> None:
    con.execute(f"DROP TABLE IF EXISTS temp.{view}")
    con.execute(f"CREATE TEMP TABLE {view} ({columns})")
    marks = ", ".join("?" for _ in columns.split(","))
    if rows:
        con.executemany(f"INSERT INTO {view} VALUES ({marks})", rows)


def breaks(cause: str, change_class: str, kind: str) -> list[tuple]:
    """Agent `bot`: two breaks tied at 500 tokens lost whose columns disagree in every order
    (the lower request_id has the higher conversation, position and excerpt), one that lost
    less, and one whose loss is unknown. Each row is a turn > 1 of its conversation."""
    return [
        ("req-b", "conv-1", 2, "bot", cause, 500, change_class, kind, 1, "excerpt of req-b"),
        ("req-a", "conv-9", 3, "bot", cause, 500, change_class, kind, 7, "excerpt of req-a"),
        ("req-0", "conv-5", 2, "bot", cause, 100, change_class, kind, 9, "excerpt of req-0"),
        ("req-00", "conv-8", 2, "bot", cause, None, change_class, kind, 9, "excerpt of req-00"),
    ]


def conversations(rows: list[tuple]) -> list[tuple]:
    return [(r[0], r[1], r[2], r[3], AT) for r in rows]


@pytest.mark.parametrize(
    ("cause", "change_class", "kind", "finding"),
    [
        ("system_changed", "timestamp", "system", "volatile_content"),
        ("tools_changed", "reordered", "tool", "dynamic_before_stable"),
        ("history_rewritten", "edited", "message", "history_rewritten"),
    ],
)
def test_tied_breaks_give_one_example_row_the_lowest_request_id_in_any_row_order(
    con, cause: str, change_class: str, kind: str, finding: str
) -> None:
    rows = breaks(cause, change_class, kind)
    seen = set()
    for order in (rows, rows[::-1], rows[1:] + rows[:1], rows[2:] + rows[:2]):
        shadow(con, "cache_breaks", BREAK_COLUMNS, order)
        shadow(con, "conversations", CONVERSATION_COLUMNS, conversations(order))
        for _ in range(3):
            seen.add(tuple(con.execute(EXAMPLE, [finding]).fetchall()))
    assert seen == {(("req-a", "conv-9", 7, "excerpt of req-a"),)}


def test_breaks_whose_loss_is_unknown_still_give_an_example(con) -> None:
    rows = [
        ("req-z", "conv-2", 2, "bot", "history_rewritten", None, "edited", "message", 4, "z"),
        ("req-y", "conv-3", 2, "bot", "history_rewritten", None, "edited", "message", 6, "y"),
    ]
    shadow(con, "cache_breaks", BREAK_COLUMNS, rows)
    shadow(con, "conversations", CONVERSATION_COLUMNS, conversations(rows))
    got = con.execute(EXAMPLE, ["history_rewritten"]).fetchall()
    assert got == [("req-y", "conv-3", 6, "y")]


def _orphan_call_examples_in_both_row_orders(
    con, convs: list[tuple], segments: list[tuple], content: list[tuple]
) -> set[tuple]:
    """The orphan_tool_call examples prefix_hygiene gives with the rows in order and reversed."""
    seen = set()
    for rows in (lambda r: r, lambda r: r[::-1]):
        shadow(con, "cache_breaks", BREAK_COLUMNS, [])
        shadow(con, "conversations", CONVERSATION_COLUMNS, rows(convs))
        shadow(con, "segments", SEGMENT_COLUMNS, rows(segments))
        shadow(con, "raw_segment_content", "segment_hash BIGINT, content VARCHAR", rows(content))
        seen.add(tuple(con.execute(EXAMPLE, ["orphan_tool_call"]).fetchall()))
    return seen


def test_tied_orphan_tool_calls_give_one_example_row_in_any_row_order(con) -> None:
    # Two conversations of agent `bot`, each latest request with an orphan tool call at
    # position 2: the example is the lower request_id's, all columns from its row.
    convs = [("q-b", "c-1", 1, "bot", AT), ("q-a", "c-2", 1, "bot", AT)]
    segments = [("q-b", 2, "message", "assistant", 11), ("q-a", 2, "message", "assistant", 22)]
    content = [
        (11, '{"role": "assistant", "tool_calls": [{"id": "call_1"}], "content": "from q-b"}'),
        (22, '{"role": "assistant", "tool_calls": [{"id": "call_9"}], "content": "from q-a"}'),
    ]
    seen = _orphan_call_examples_in_both_row_orders(con, convs, segments, content)
    assert len(seen) == 1
    ((row,),) = seen
    assert row[:3] == ("q-a", "c-2", 2)
    assert "from q-a" in row[3]


def test_the_latest_request_of_a_conversation_with_two_at_its_last_turn_is_the_later_one(
    con,
) -> None:
    # A fork: two requests at turn 2 of one conversation. The later (f-early sorts after
    # f-late by id, so neither id order nor row order can stand in for time) has a tool call
    # without its result; the earlier has none. The finding must not depend on the row order.
    convs = [
        ("f-root", "c-1", 1, "bot", "2026-11-23 10:00:00+00"),
        ("f-late", "c-1", 2, "bot", "2026-11-23 10:05:00+00"),
        ("f-early", "c-1", 2, "bot", "2026-11-23 10:01:00+00"),
    ]
    segments = [("f-late", 2, "message", "assistant", 33), ("f-early", 2, "message", "user", 44)]
    content = [
        (33, '{"role": "assistant", "tool_calls": [{"id": "call_7"}], "content": "late"}'),
        (44, '{"role": "user", "content": "no tool_call here"}'),
    ]
    seen = _orphan_call_examples_in_both_row_orders(con, convs, segments, content)
    assert len(seen) == 1
    ((row,),) = seen
    assert row[:3] == ("f-late", "c-1", 2)
