"""cache_breaks.tokens_lost is NULL (unknown) when a token count it needs is unknown, never
computed from a 0: two-turn captures like the golden ones (tests/fixtures/breaks/build.py), where
one turn's usage is missing (an interrupted stream) or the server reports no cache read and no
cache rule applies. A cold start still loses 0: there was nothing earlier to reuse."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from pipeline import sql
from pipeline.capture_format import dumps_record, make_record
from pipeline.ingest import ingest
from pipeline.warehouse import Warehouse

T0 = datetime(2026, 11, 16, 9, 0, tzinfo=UTC)
LATER = T0 + timedelta(seconds=30)
BIG = "Follow the runbook. " * 400  # about 2000 tokens: above OpenAI's 1024 minimum
ORDER = " Details of the order follow." * 36  # about 250 tokens
OPENAI = "https://api.openai.com/v1/chat/completions"
VLLM = "http://vllm.internal:8000/v1/chat/completions"  # no cache rule for this host


def _messages(system: str, user: str, *, second: bool) -> list[dict[str, Any]]:
    first = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    if not second:
        return first
    return [*first, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "next"}]


def _exchange(
    at: datetime,
    rid: str,
    session: str,
    messages: list[dict[str, Any]],
    usage: dict[str, Any] | None,
    *,
    url: str = OPENAI,
) -> bytes:
    """A JSON answer with this usage; usage None = a stream cut before its usage chunk."""
    body = {"model": "gpt-4.1-2025-04-14", "messages": messages, "stream": usage is None}
    if usage is None:
        chunk = {
            "id": rid,
            "object": "chat.completion.chunk",
            "model": "gpt-4.1-2025-04-14",
            "choices": [{"index": 0, "delta": {"content": "o"}, "finish_reason": None}],
        }
        response_body = b"data: " + orjson.dumps(chunk) + b"\n\n"  # no [DONE], no usage
        content_type = "text/event-stream"
        chunks: list[tuple[float, int]] | None = [(200.0, len(response_body))]
    else:
        answer = {
            "id": rid,
            "object": "chat.completion",
            "model": "gpt-4.1-2025-04-14",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "ok"},
                    "finish_reason": "stop",
                }
            ],
            "usage": usage,
        }
        response_body = orjson.dumps(answer)
        content_type = "application/json"
        chunks = None
    record = make_record(
        started_at=at,
        method="POST",
        url=url,
        request_headers=[("content-type", "application/json"), ("authorization", "Bearer sk-x")],
        request_body=orjson.dumps(body),
        status=200,
        response_headers=[("content-type", content_type)],
        response_body=response_body,
        chunks=chunks,
        end_ms=500.0,
        record_id=rid,
        session_id=session,
        agent="unknown-loss",
    )
    return dumps_record(record)


def _usage(prompt: int, cached: int | None) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": 10,
        "total_tokens": prompt + 10,
    }
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return usage


def _capture() -> bytes:
    day1 = "Today is 2026-11-16. " + BIG
    day2 = "Today is 2026-11-17. " + BIG
    return b"".join(
        [
            # the system prompt changed and this turn's stream was cut: its input is unknown
            _exchange(
                T0, "child-1", "child", _messages(day1, "Hi.", second=False), _usage(2015, 0)
            ),
            _exchange(LATER, "child-2", "child", _messages(day2, "Hi.", second=True), None),
            # the parent's stream was cut: how much of its prompt could be reused is unknown
            _exchange(T0, "parent-1", "parent", _messages(day1, "Hi.", second=False), None),
            _exchange(
                LATER, "parent-2", "parent", _messages(day2, "Hi.", second=True), _usage(2025, 0)
            ),
            # a cold start whose stream was cut: nothing earlier to reuse, so nothing lost
            _exchange(T0, "cold-1", "cold", _messages(BIG, "Cold.", second=False), None),
            # a server that reports no cache read, with no cache rule: no read to subtract
            _exchange(
                T0,
                "vllm-1",
                "vllm",
                _messages(day1, "Hi.", second=False),
                _usage(2015, None),
                url=VLLM,
            ),
            _exchange(
                LATER,
                "vllm-2",
                "vllm",
                _messages(day2, "Hi.", second=True),
                _usage(2025, None),
                url=VLLM,
            ),
            # OpenAI without the read field: the read the rules allow stands in (an estimate);
            # the edited order number drops the ~250-token order text after it from the read
            _exchange(
                T0,
                "est-1",
                "est",
                _messages(BIG, "Order 1234." + ORDER, second=False),
                _usage(2250, 0),
            ),
            _exchange(
                LATER,
                "est-2",
                "est",
                _messages(BIG, "Order 1235." + ORDER, second=True),
                _usage(2260, None),
            ),
        ]
    )


@pytest.fixture(scope="module")
def wh(tmp_path_factory: pytest.TempPathFactory) -> Warehouse:
    base = tmp_path_factory.mktemp("unknown_loss")
    capture = base / "capture.jsonl"
    capture.write_bytes(_capture())
    warehouse = Warehouse(base / "wh")
    ingest([capture], warehouse, workers=1)
    return warehouse


@pytest.fixture(scope="module")
def breaks(wh: Warehouse) -> dict[str, dict[str, Any]]:
    rel = sql.connect(wh, only=["cache_breaks"]).sql("SELECT * FROM cache_breaks")
    rows = [dict(zip(rel.columns, row, strict=True)) for row in rel.fetchall()]
    return {str(r["request_id"]): r for r in rows}


def test_a_break_whose_own_usage_is_unknown_has_an_unknown_loss(breaks) -> None:
    row = breaks["child-2"]
    assert (row["cause"], row["input_tokens"], row["cache_read_tokens"]) == (
        "system_changed",
        None,
        None,
    )
    assert row["tokens_lost"] is None  # was 2015: the parent's input minus a read of 0


def test_a_break_whose_parent_usage_is_unknown_has_an_unknown_loss(breaks) -> None:
    row = breaks["parent-2"]
    assert (row["cause"], row["input_tokens"], row["cache_read_tokens"]) == (
        "system_changed",
        2025,
        0,
    )
    assert row["tokens_lost"] is None  # was 2025: least() skipped the parent's unknown input


def test_a_break_with_no_read_reported_and_no_rule_has_an_unknown_loss(breaks) -> None:
    row = breaks["vllm-2"]
    assert (row["cause"], row["cache_read_tokens"], row["expected_read_tokens"]) == (
        "system_changed",
        None,
        None,
    )
    assert row["tokens_lost"] is None  # was 2015: min(inputs) minus a read of 0


def test_a_cold_start_with_unknown_usage_still_loses_nothing(breaks) -> None:
    row = breaks["cold-1"]
    assert (row["cause"], row["input_tokens"], row["tokens_lost"]) == ("cold_start", None, 0)


def test_an_unreported_read_is_replaced_by_the_read_the_rules_allow(breaks) -> None:
    row = breaks["est-2"]
    assert row["cause"] == "history_rewritten"
    assert row["cache_read_tokens"] is None
    assert row["expected_read_tokens"] > 0
    # what OpenAI serves of est-1's 2,250 tokens (1024 + 128 x 9) less the estimated read
    assert row["tokens_lost"] == 2176 - row["expected_read_tokens"] > 0


def test_the_report_views_count_the_breaks_whose_loss_is_unknown(wh: Warehouse) -> None:
    con = sql.connect(wh)
    lost = 2176 - _expected(con, "est-2")
    causes = con.execute(
        "SELECT cause, breaks, tokens_lost, breaks_tokens_unknown FROM report_break_causes"
        " ORDER BY cause"
    ).fetchall()
    assert causes == [
        ("cold_start", 5, 0, 0),
        ("history_rewritten", 1, lost, 0),
        ("system_changed", 3, None, 3),
    ]
    top = con.execute(
        "SELECT conversation_id, breaks, tokens_lost, breaks_tokens_unknown"
        " FROM report_top_breaks ORDER BY rank"
    ).fetchall()
    # the one known loss ranks first; conversations with only unknown losses follow, counted
    assert top[0] == ("est", 1, lost, 0)
    assert sorted(t[1:] for t in top[1:]) == [(1, None, 1)] * 3


def _expected(con: Any, request_id: str) -> int:
    row = con.execute(
        "SELECT expected_read_tokens FROM expected_cache WHERE request_id = ?", [request_id]
    ).fetchone()
    assert row is not None
    return int(row[0])
