"""Anthropic cache entries live as long as their own breakpoint's TTL, not the longest in the
request (Anthropic prompt caching: 5m default, 1h with `ttl: "1h"`; one entry per breakpoint).

A common layout marks the system prompt `1h` and the newest message `5m`. Ten minutes later the
system prompt's entry is still alive and the conversation's is not: the expected read is the
system prompt only, and the lost history is an `expired` break. Giving the whole request the 1h
lifetime (what the views did before) expected the whole previous prompt and named no cause.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from test_ingest_support import ingested_rows

from pipeline.capture_format import dumps_record, make_record

T0 = datetime(2026, 11, 18, 9, 0, tzinfo=UTC)
LATER = T0 + timedelta(minutes=10)  # past 5 minutes, within the hour
MODEL = "claude-sonnet-4-5-20250929"
SYSTEM = "Follow the runbook step by step. " * 250  # ~8,000 bytes, ~2,000 tokens
HISTORY = "Here is the full incident log to analyse. " * 400  # ~17,000 bytes


def _marker(ttl: str) -> dict[str, str]:
    return {"type": "ephemeral", "ttl": ttl}


def _body(system_ttl: str, history_ttl: str, second: bool) -> dict[str, Any]:
    turns = [("user", HISTORY)]
    if second:
        turns += [("assistant", "Read it."), ("user", "What failed first?")]
    # content as blocks in every turn, so the marker moving to the newest one changes no bytes
    messages: list[dict[str, Any]] = [
        {"role": role, "content": [{"type": "text", "text": text}]} for role, text in turns
    ]
    messages[-1]["content"][0]["cache_control"] = _marker(history_ttl)
    return {
        "model": MODEL,
        "max_tokens": 100,
        "system": [{"type": "text", "text": SYSTEM, "cache_control": _marker(system_ttl)}],
        "messages": messages,
    }


def _line(
    at: datetime, rid: str, body: dict[str, Any], read: int, written: int, key: str = ""
) -> bytes:
    prompt = len(orjson.dumps(body)) // 4
    response = {
        "id": rid,
        "type": "message",
        "role": "assistant",
        "model": body["model"],
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "usage": {
            "input_tokens": prompt - read - written,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": written,
            "output_tokens": 2,
        },
    }
    return dumps_record(
        make_record(
            started_at=at,
            method="POST",
            url="https://api.anthropic.com/v1/messages",
            # one key per conversation unless given: each is its own cache scope
            request_headers=[("x-api-key", key or f"sk-ant-mixed-ttl-{rid[0]}")],
            request_body=orjson.dumps(body),
            status=200,
            response_headers=[("content-type", "application/json")],
            response_body=orjson.dumps(response),
            record_id=rid,
            session_id=rid[0],
        )
    )


def _conversation(
    tag: str, system_ttl: str, history_ttl: str, read: str, then: tuple[str, str] | None = None
) -> list[bytes]:
    """Two turns ten minutes apart; the second reads `read`: "system", "all" or "none". `then`:
    the second turn's (system, history) TTLs when they differ from the first's."""
    second_ttls = then or (system_ttl, history_ttl)
    first, second = _body(system_ttl, history_ttl, False), _body(*second_ttls, True)
    prompt = len(orjson.dumps(first)) // 4
    tokens = {"system": len(SYSTEM) // 4, "all": prompt, "none": 0}[read]
    return [_line(T0, f"{tag}1", first, 0, prompt), _line(LATER, f"{tag}2", second, tokens, 0)]


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    base = tmp_path_factory.mktemp("mixed-ttl")
    capture = base / "capture.jsonl"
    capture.write_bytes(
        b"".join(
            _conversation("M", "1h", "5m", "system")  # mixed: the usual layout
            + _conversation("L", "1h", "1h", "all")  # every entry 1h
            + _conversation("S", "5m", "5m", "none")  # every entry 5m
            # the TTLs change between turns: what the first turn wrote is what lives
            + _conversation("A", "1h", "5m", "system", then=("1h", "1h"))
            + _conversation("B", "1h", "1h", "all", then=("1h", "5m"))
        )
    )
    return ingested_rows(
        capture,
        base / "wh",
        "SELECT e.request_id, p.extended_segments, p.live_segments, p.segment_count, "
        "p.live_bytes, p.prompt_bytes, e.expected_read_tokens, e.input_tokens, e.lifetime_s, "
        "e.default_lifetime_s, b.cause FROM expected_cache AS e "
        "JOIN request_prefix AS p USING (request_id) "
        "LEFT JOIN cache_breaks AS b USING (request_id)",
    )


def test_with_a_1h_system_and_a_5m_history_only_the_system_prompt_is_expected_ten_minutes_later(
    rows: dict[str, dict[str, Any]],
) -> None:
    row = rows["M2"]
    # segments: system block (1h breakpoint, position 0), then the messages
    assert (row["extended_segments"], row["segment_count"]) == (1, 4)
    assert row["live_segments"] == 1
    # Worked from the request body, not from the row: the segments are the system block and
    # the three messages as sent, markers removed; the reported input is the whole prompt
    # (input + read + write, which _line sets to the body's bytes // 4). The expected read is
    # the system block's share of it (granularity 1; above the 1,024-token minimum).
    second = _body("1h", "5m", True)
    system_bytes = len(orjson.dumps({"type": "text", "text": SYSTEM}))
    turns = [("user", HISTORY), ("assistant", "Read it."), ("user", "What failed first?")]
    message_bytes = sum(
        len(orjson.dumps({"role": r, "content": [{"type": "text", "text": t}]})) for r, t in turns
    )
    prompt_tokens = len(orjson.dumps(second)) // 4
    assert (row["live_bytes"], row["prompt_bytes"]) == (system_bytes, system_bytes + message_bytes)
    assert row["input_tokens"] == prompt_tokens
    expected = round(prompt_tokens * system_bytes / (system_bytes + message_bytes))
    assert expected > 1024
    assert row["expected_read_tokens"] == expected
    assert (row["lifetime_s"], row["default_lifetime_s"]) == (3600, 300)


def test_the_lost_5m_history_is_an_expired_break(rows: dict[str, dict[str, Any]]) -> None:
    assert rows["M2"]["cause"] == "expired"


def test_when_every_entry_is_1h_the_whole_previous_prompt_is_expected_and_nothing_broke(
    rows: dict[str, dict[str, Any]],
) -> None:
    row = rows["L2"]
    assert row["extended_segments"] == row["segment_count"] == 4
    assert row["live_segments"] == 2  # the first turn's system block and message
    assert row["cause"] is None


def test_when_every_entry_is_5m_nothing_is_expected_and_the_break_is_expired(
    rows: dict[str, dict[str, Any]],
) -> None:
    row = rows["S2"]
    assert (row["extended_segments"], row["live_segments"], row["expected_read_tokens"]) == (
        0,
        0,
        0,
    )
    assert row["cause"] == "expired"


def test_an_entry_lives_as_long_as_the_request_that_wrote_it_asked_not_the_one_reading_it(
    rows: dict[str, dict[str, Any]],
) -> None:
    # A: written with a 5m history, read ten minutes later by a turn marking it 1h: gone
    assert (rows["A2"]["live_segments"], rows["A2"]["cause"]) == (1, "expired")
    # B: written 1h, read by a turn marking its history 5m: still there, nothing broke
    assert (rows["B2"]["live_segments"], rows["B2"]["cause"]) == (2, None)


OTHER_MODEL = "claude-opus-4-1-20250805"


def _switch(with_other_traffic: bool) -> list[bytes]:
    """Turn 2 switches model ten minutes later; optionally another conversation on the new
    model (same key: same cache scope) has just warmed the same system prompt."""
    first, second = _body("1h", "5m", False), {**_body("1h", "5m", True), "model": OTHER_MODEL}
    lines = [_line(T0, "X1", first, 0, 5000, "sk-ant-switch"),
             _line(LATER, "X2", second, 0, 5000, "sk-ant-switch")]  # fmt: skip
    if with_other_traffic:
        other = {**_body("1h", "5m", False), "model": OTHER_MODEL}
        other["messages"] = [{"role": "user", "content": [{"type": "text", "text": "Other."}]}]
        lines.append(_line(LATER - timedelta(minutes=2), "W1", other, 0, 3000, "sk-ant-switch"))
    return lines


@pytest.mark.parametrize("with_other_traffic", [False, True])
def test_a_model_switch_is_model_changed_whatever_other_traffic_warmed_the_new_models_cache(
    tmp_path_factory: pytest.TempPathFactory, with_other_traffic: bool
) -> None:
    base = tmp_path_factory.mktemp("switch")
    capture = base / "capture.jsonl"
    capture.write_bytes(b"".join(_switch(with_other_traffic)))
    rows = ingested_rows(
        capture, base / "wh", "SELECT request_id, cause FROM cache_breaks ORDER BY request_id"
    )
    assert rows["X2"]["cause"] == "model_changed"
