"""OpenAI extended prompt-cache retention (`prompt_cache_retention: "24h"`, its caching guide)
keeps a prefix alive for 24 hours: a turn 20 minutes after the previous one expects the read the
provider really made, with no `expired` break. Without it the in-memory lifetime (600 s in the
rule table) applies and the same gap is an expiry. Chat completions and Responses both record
the retention (requests.cache_ttls = ["24h"])."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from test_ingest_support import chat_line, chat_usage, ingested_rows

from pipeline.dialects import chat_completions, responses

T0 = datetime(2026, 11, 16, 9, 0, tzinfo=UTC)
LATER = T0 + timedelta(minutes=20)
SYSTEM = "Follow the runbook exactly. " * 220  # about 1500 tokens at 4 bytes a token
MODEL = "gpt-4.1-2025-04-14"


def _exchange(
    at: datetime, rid: str, session: str, second: bool, retention: str | None, usage: Any
) -> bytes:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": f"Desk {session}. {SYSTEM}"},
        {"role": "user", "content": "Check order 1234."},
    ]
    if second:
        messages += [
            {"role": "assistant", "content": "Done."},
            {"role": "user", "content": "And 1235?"},
        ]
    body: dict[str, Any] = {"model": MODEL, "messages": messages}
    if retention is not None:
        body["prompt_cache_retention"] = retention
    return chat_line(at, rid, body, usage, session_id=session)


def _conversation(session: str, retention: str | None) -> list[bytes]:
    # Turn 2 reads turn 1's whole prompt from the cache, 20 minutes later.
    return [
        _exchange(T0, f"{session}-1", session, False, retention, chat_usage(1553, 0)),
        _exchange(LATER, f"{session}-2", session, True, retention, chat_usage(1567, 1536)),
    ]


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    base = tmp_path_factory.mktemp("retention")
    capture = base / "capture.jsonl"
    capture.write_bytes(b"".join(_conversation("keep", "24h") + _conversation("mem", None)))
    return ingested_rows(
        capture,
        base / "wh",
        "SELECT e.request_id, e.lifetime_s, e.expected_read_tokens, e.cache_read_tokens, "
        "b.cause, r.cache_ttls FROM expected_cache AS e JOIN requests AS r USING (request_id) "
        "LEFT JOIN cache_breaks AS b USING (request_id)",
    )


def test_a_24h_retention_request_20_minutes_later_expects_the_read_and_has_no_break(
    rows: dict[str, dict[str, Any]],
) -> None:
    row = rows["keep-2"]
    assert row["cache_ttls"] == ["24h"]
    assert row["lifetime_s"] == 86_400
    # turn 1's prompt (its bytes' share of turn 2's 1567 tokens) in 128-token steps: the read
    assert (row["expected_read_tokens"], row["cache_read_tokens"]) == (1536, 1536)
    assert row["cause"] is None


def test_without_extended_retention_the_same_turn_is_an_expired_break(
    rows: dict[str, dict[str, Any]],
) -> None:
    row = rows["mem-2"]
    assert row["cache_ttls"] is None
    assert (row["lifetime_s"], row["expected_read_tokens"], row["cause"]) == (600, 0, "expired")


def test_both_openai_dialects_record_the_24h_retention_and_nothing_for_the_default() -> None:
    for body, ttls in (
        ({"model": "gpt-5", "prompt_cache_retention": "24h"}, ["24h"]),
        ({"model": "gpt-5", "prompt_cache_retention": "in_memory"}, []),
        ({"model": "gpt-5"}, []),
    ):
        assert chat_completions.parse_request({**body, "messages": []}).cache_ttls == ttls
        assert responses.parse_request({**body, "input": "hi"}).cache_ttls == ttls
