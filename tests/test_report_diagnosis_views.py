"""The report views over the diagnosis views (cache_breaks, expected_cache, prefix_stability,
prefix_hygiene, conversations), each fed hand-written rows: a temp table shadows the upstream
view, so these tests pin the report SQL alone (numbers worked out by hand)."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from test_report_support import EVIL, request, write_requests

from pipeline import sql

W48 = date(2026, 11, 23)


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    rows = [
        request("r1", "2026-11-23T10:00:00", "deepseek", "deepseek-chat", 1000, 0),
        request("r2", "2026-11-23T10:01:00", "deepseek", "deepseek-chat", 2000, 500),
        request(
            "r3",
            "2026-11-23T10:02:00",
            "deepseek",
            "deepseek-chat",
            None,
            None,
            usage_status="missing",
        ),
    ]
    return sql.connect(write_requests(tmp_path_factory.mktemp("diag") / "wh", rows))


@pytest.fixture
def con(shared):
    """The module's connection; the temp tables a test adds are dropped after it."""
    query = "SELECT table_name FROM duckdb_tables() WHERE temporary"
    before = set(shared.execute(query).fetchall())
    yield shared
    for (name,) in set(shared.execute(query).fetchall()) - before:
        shared.execute(f'DROP TABLE temp."{name}"')


def shadow(con, view: str, columns: str, rows: list[tuple]) -> None:
    con.execute(f"CREATE TEMP TABLE {view} ({columns})")
    marks = ", ".join("?" for _ in columns.split(","))
    con.executemany(f"INSERT INTO {view} VALUES ({marks})", rows)


BREAK_COLUMNS = (
    "request_id VARCHAR, conversation_id VARCHAR, turn INTEGER, started_at TIMESTAMPTZ,"
    " agent VARCHAR, model VARCHAR, cause VARCHAR, tokens_lost BIGINT, change_class VARCHAR,"
    " changed_kind VARCHAR, excerpt VARCHAR"
)
BREAKS = [
    ("a1", "A", 1, at("2026-11-23T09:00:00"), "bot", "m", "cold_start", 0, None, None, None),
    (
        "a2",
        "A",
        2,
        at("2026-11-23T09:01:00"),
        "bot",
        "m",
        "system_changed",
        300,
        "timestamp",
        "system",
        "time: 09:01",
    ),
    (
        "a3",
        "A",
        3,
        at("2026-11-24T09:02:00"),
        "bot",
        "m",
        "system_changed",
        500,
        "timestamp",
        "system",
        "time: 09:02",
    ),
    ("a4", "A", 4, at("2026-11-25T09:03:00"), "bot", "m", "expired", 700, None, None, None),
    ("b1", "B", 1, at("2026-11-24T12:00:00"), "ops", "m", "cold_start", 0, None, None, None),
    (
        "b2",
        "B",
        2,
        at("2026-11-24T12:01:00"),
        "ops",
        "m",
        "tools_changed",
        900,
        "reordered",
        "tool",
        EVIL,
    ),
    (
        "b3",
        "B",
        3,
        at("2026-11-24T12:02:00"),
        "ops",
        "m",
        "tools_changed",
        None,
        "reordered",
        "tool",
        "x",
    ),
    # D's only break has an unknown loss (usage not reported): counted, never summed as 0.
    ("d2", "D", 2, at("2026-11-26T08:00:00"), "bot", "m", "expired", None, None, None, None),
    # Next week: not in W48's rows.
    ("c1", "C", 1, at("2026-11-30T00:00:00"), "bot", "m", "cold_start", 0, None, None, None),
]


def test_break_causes_count_requests_tokens_and_conversations_per_week(con) -> None:
    shadow(con, "cache_breaks", BREAK_COLUMNS, BREAKS)
    got = con.execute(
        "SELECT week, cause, breaks, tokens_lost, breaks_tokens_unknown, conversations"
        " FROM report_break_causes ORDER BY ALL"
    ).fetchall()
    assert got == [
        (W48, "cold_start", 2, 0, 0, 2),
        (W48, "expired", 2, 700, 1, 2),
        (W48, "system_changed", 2, 800, 0, 1),
        (W48, "tools_changed", 2, 900, 1, 1),
        (date(2026, 11, 30), "cold_start", 1, 0, 0, 1),
    ]


def test_top_breaks_rank_conversations_by_tokens_lost_with_their_costliest_excerpt(con) -> None:
    shadow(con, "cache_breaks", BREAK_COLUMNS, BREAKS)
    got = con.execute(
        "SELECT rank, conversation_id, agent, breaks, tokens_lost, breaks_tokens_unknown,"
        " main_cause, costliest_cause, change_class, costliest_turn, excerpt"
        " FROM report_top_breaks ORDER BY ALL"
    ).fetchall()
    # A: 300 + 500 + 700 = 1500 lost; system_changed (800) beats expired (700) as main cause,
    # but the single costliest break is the expired one (700). B: 900 + one unknown. D: only
    # an unknown loss: NULL (not 0), ranked after every known loss.
    assert got == [
        (1, "A", "bot", 3, 1500, 0, "system_changed", "expired", None, 4, None),
        (2, "B", "ops", 2, 900, 1, "tools_changed", "tools_changed", "reordered", 2, EVIL),
        (3, "D", "bot", 1, None, 1, "expired", "expired", None, 2, None),
    ]


def test_provider_gap_compares_only_requests_where_both_reads_are_known(con) -> None:
    shadow(
        con,
        "expected_cache",
        "request_id VARCHAR, started_at TIMESTAMPTZ, provider VARCHAR, model VARCHAR,"
        " expected_read_tokens BIGINT, cache_read_tokens BIGINT",
        [
            ("e1", at("2026-11-23T10:00:00"), "openai", "gpt", 1024, 1024),
            ("e2", at("2026-11-23T11:00:00"), "openai", "gpt", 2048, 1024),
            ("e3", at("2026-11-24T11:00:00"), "openai", "gpt", None, 512),
            ("e4", at("2026-11-24T12:00:00"), "openai", "gpt", 256, 512),
        ],
    )
    got = con.execute(
        "SELECT series, requests, requests_unknown, expected_read_tokens, reported_read_tokens,"
        " gap_tokens, requests_short, delivered_ratio FROM report_provider_gap"
    ).fetchall()
    # Known: e1, e2, e4 -> expected 3328, reported 2560, gap 768; only e2 came up short.
    assert got == [("openai · gpt", 4, 1, 3328, 2560, 768, 1, 2560 / 3328)]


def test_prefix_stability_sums_the_agent_days_of_a_week(con) -> None:
    shadow(
        con,
        "prefix_stability",
        "scope VARCHAR, agent VARCHAR, conversation_id VARCHAR, day DATE, part VARCHAR,"
        " turns BIGINT, changed_turns BIGINT",
        [
            ("agent", "bot", None, date(2026, 11, 23), "system", 10, 10),
            ("agent", "bot", None, date(2026, 11, 24), "system", 30, 10),
            ("agent", None, None, date(2026, 11, 24), "tools", 4, 1),
            ("conversation", "bot", "A", date(2026, 11, 24), "system", 30, 10),  # other scope
        ],
    )
    got = con.execute(
        "SELECT week, agent, part, turns, changed_turns, change_rate"
        " FROM report_prefix_stability ORDER BY ALL"
    ).fetchall()
    assert got == [
        (W48, "bot", "system", 40, 20, 0.5),
        (W48, "unknown agent", "tools", 4, 1, 0.25),
    ]


def test_hygiene_lists_findings_of_agents_active_that_week_worst_first(con) -> None:
    shadow(
        con,
        "conversations",
        "request_id VARCHAR, conversation_id VARCHAR, turn INTEGER, agent VARCHAR,"
        " started_at TIMESTAMPTZ",
        [
            ("x1", "A", 1, "bot", at("2026-11-23T10:00:00")),
            ("x2", "B", 1, "ops", at("2026-11-23T10:00:00")),
            ("x3", "C", 1, "late", at("2026-11-30T10:00:00")),
        ],
    )
    shadow(
        con,
        "prefix_hygiene",
        "subject_kind VARCHAR, subject VARCHAR, finding VARCHAR, example_request_id VARCHAR,"
        " conversation_id VARCHAR, position INTEGER, excerpt VARCHAR, turns_affected BIGINT,"
        " tokens_per_turn DOUBLE, detail VARCHAR",
        [
            ("agent", "bot", "volatile_content", "x1", "A", 1, "ts", 10, 100.0, "timestamp"),
            ("agent", "ops", "dynamic_before_stable", "x2", "B", 0, "t", 50, 30.0, "tools"),
            ("agent", "late", "volatile_content", "x3", "C", 1, "id", 99, 99.0, "uuid"),
        ],
    )
    got = con.execute(
        "SELECT week, rank, subject, finding, tokens_total FROM report_hygiene ORDER BY ALL"
    ).fetchall()
    # ops: 50 x 30 = 1500 before bot: 10 x 100 = 1000; late is only active the next week.
    assert got == [
        (W48, 1, "ops", "dynamic_before_stable", 1500.0),
        (W48, 2, "bot", "volatile_content", 1000.0),
        (date(2026, 11, 30), 1, "late", "volatile_content", 9801.0),
    ]


def test_conversation_turns_split_input_into_read_and_miss_with_the_cause(con) -> None:
    shadow(
        con,
        "conversations",
        "request_id VARCHAR, conversation_id VARCHAR, turn INTEGER, agent VARCHAR,"
        " started_at TIMESTAMPTZ",
        [
            ("r1", "A", 1, "bot", at("2026-11-23T10:00:00")),
            ("r2", "A", 2, "bot", at("2026-11-23T10:01:00")),
            ("r3", "A", 3, "bot", at("2026-11-23T10:02:00")),
        ],
    )
    shadow(con, "expected_cache", "request_id VARCHAR, expected_read_tokens BIGINT", [("r2", 896)])
    shadow(
        con,
        "cache_breaks",
        BREAK_COLUMNS,
        [
            (
                "r1",
                "A",
                1,
                at("2026-11-23T10:00:00"),
                "bot",
                "m",
                "cold_start",
                0,
                None,
                None,
                None,
            ),
            (
                "r2",
                "A",
                2,
                at("2026-11-23T10:01:00"),
                "bot",
                "m",
                "system_changed",
                400,
                "timestamp",
                "system",
                "now: 10:01",
            ),
        ],
    )
    # r2's break money as break_costs prices it; r1 (a cold start) lost 0 and has no currency
    shadow(
        con,
        "break_costs",
        "request_id VARCHAR, lost_cost DOUBLE, currency VARCHAR",
        [("r1", 0.0, None), ("r2", 0.0012, "USD")],
    )
    money = con.execute(
        "SELECT turn, lost_cost, currency FROM report_conversation_turns"
        " WHERE conversation_id = 'A' ORDER BY turn"
    ).fetchall()
    assert money == [(1, 0.0, None), (2, 0.0012, "USD"), (3, None, None)]
    got = con.execute(
        "SELECT turn, input_tokens, read_tokens, miss_tokens, expected_read_tokens, cause,"
        " excerpt FROM report_conversation_turns WHERE conversation_id = 'A' ORDER BY turn"
    ).fetchall()
    assert got == [
        (1, 1000, 0, 1000, None, "cold_start", None),
        (2, 2000, 500, 1500, 896, "system_changed", "now: 10:01"),
        (3, None, None, None, None, None, None),  # usage unknown stays unknown
    ]


def test_top_breaks_name_the_model_of_the_costliest_break_whatever_order_the_rows_are_read_in(
    con,
) -> None:
    # M switched models: its expired break on gpt-4.1 lost 100 tokens, its model_changed break
    # on gpt-5-mini 900, so the page names gpt-5-mini. Its agent is named by one break only.
    # Stored by day after an ingest, or in one pass from scratch, the same rows come in
    # another order: the row must not follow it.
    cheap = ("m2", "M", 2, at("2026-11-24T08:00:00"), None, "gpt-4.1", "expired", 100)
    costly = ("m3", "M", 3, at("2026-11-25T08:00:00"), "bot", "gpt-5-mini", "model_changed", 900)
    got = []
    for rows in ([cheap, costly], [costly, cheap]):
        shadow(con, "cache_breaks", BREAK_COLUMNS, [(*r, None, None, None) for r in rows])
        query = "SELECT agent, model, tokens_lost FROM report_top_breaks"
        got.append(con.execute(query).fetchall())
        con.execute("DROP TABLE temp.cache_breaks")
    assert got == [[("bot", "gpt-5-mini", 1000)]] * 2
