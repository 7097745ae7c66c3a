"""A refused request is named by the model it asked for (its error body names none), while the
answered ones carry the snapshot the provider answered with (OpenAI and Anthropic answer
`gpt-4.1` with `gpt-4.1-2025-04-14`). The prefix views compare the model that served a request
(request_prefix.model), so a 429 is neither a model switch nor a cache scope of its own: a
refused opening and its retry are one conversation, and a refused turn is no model_changed
break. A real switch to another requested model still is one, and the cache rule is still
matched by the request's own model (requests.model)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from pipeline import sql
from pipeline.capture_format import dumps_record, make_record
from pipeline.ingest import ingest
from pipeline.warehouse import Warehouse

T0 = datetime(2026, 11, 18, 9, 0, tzinfo=UTC)
SYSTEM = "You are a careful assistant. " * 700  # about 4200 tokens: above OpenAI's minimum
CHAT = "https://api.openai.com/v1/chat/completions"
SNAPSHOT = "gpt-4.1-2025-04-14"
RATE_LIMITED = {
    "error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}
}


def _turns(n: int) -> list[dict[str, str]]:
    """The history of turn n: questions Q1..Qn, each answered but the last."""
    messages = [{"role": "system", "content": SYSTEM}]
    for i in range(1, n + 1):
        if i > 1:
            messages.append({"role": "assistant", "content": "Answer."})
        messages.append({"role": "user", "content": f"Q{i}"})
    return messages


def _exchange(
    at: datetime,
    rid: str,
    turn: int,
    *,
    answered: str | None,
    requested: str = "gpt-4.1",
    prompt: int = 4210,
    cached: int = 0,
    session: str | None = None,
    key: str = "sk-x",
) -> bytes:
    """answered: the model the 200 response names; None = a 429 with an error body."""
    body = {"model": requested, "messages": _turns(turn)}
    if answered is None:
        status, answer = 429, RATE_LIMITED
    else:
        status = 200
        answer = {
            "id": rid,
            "object": "chat.completion",
            "model": answered,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "Answer."},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": 3,
                "total_tokens": prompt + 3,
                "prompt_tokens_details": {"cached_tokens": cached},
            },
        }
    response_body = orjson.dumps(answer)
    record = make_record(
        started_at=at,
        method="POST",
        url=CHAT,
        request_headers=[("content-type", "application/json"), ("authorization", f"Bearer {key}")],
        request_body=orjson.dumps(body),
        status=status,
        response_headers=[("content-type", "application/json")],
        response_body=response_body,
        chunks=[(800.0, len(response_body))],
        first_byte_ms=800.0,
        end_ms=1200.0,
        record_id=rid,
        session_id=session,
    )
    return dumps_record(record)


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _capture() -> bytes:
    return b"".join(
        [
            # no session ids: linked by history. A refused opening, its retry, turn 2, a refused
            # turn 3 and its retry (the reported reproduction)
            _exchange(_at(0), "c-1a", 1, answered=None),
            _exchange(_at(2), "c-1b", 1, answered=SNAPSHOT),
            _exchange(_at(60), "c-2", 2, answered=SNAPSHOT, prompt=4222, cached=4096),
            _exchange(_at(120), "c-3a", 3, answered=None),
            _exchange(_at(122), "c-3b", 3, answered=SNAPSHOT, prompt=4234, cached=4224),
            # another key, a session that really switches model: gpt-4.1 answered, then gpt-4o
            # refused
            _exchange(_at(0), "s-1", 1, answered=SNAPSHOT, session="switch", key="sk-y"),
            _exchange(
                _at(30), "s-2", 2, answered=None, requested="gpt-4o", session="switch", key="sk-y"
            ),
        ]
    )


@pytest.fixture(scope="module")
def wh(tmp_path_factory: pytest.TempPathFactory) -> Warehouse:
    base = tmp_path_factory.mktemp("refused_model")
    capture = base / "capture.jsonl"
    capture.write_bytes(_capture())
    warehouse = Warehouse(base / "wh")
    ingest([capture], warehouse, workers=1)
    return warehouse


def _rows(wh: Warehouse, view: str, query: str) -> dict[str, dict[str, Any]]:
    rel = sql.connect(wh, only=[view]).sql(query)
    rows = [dict(zip(rel.columns, row, strict=True)) for row in rel.fetchall()]
    return {str(r["request_id"]): r for r in rows}


@pytest.fixture(scope="module")
def turns(wh: Warehouse) -> dict[str, dict[str, Any]]:
    return _rows(wh, "conversations", "SELECT * FROM conversations")


@pytest.fixture(scope="module")
def breaks(wh: Warehouse) -> dict[str, dict[str, Any]]:
    return _rows(wh, "cache_breaks", "SELECT * FROM cache_breaks")


def test_the_capture_names_a_refused_request_by_the_model_it_asked_for(wh: Warehouse) -> None:
    rows = _rows(wh, "requests", "SELECT request_id, model, status_code FROM requests")
    assert (rows["c-1a"]["status_code"], rows["c-1a"]["model"]) == (429, "gpt-4.1")
    assert rows["c-1b"]["model"] == SNAPSHOT


def test_a_refused_opening_and_its_retry_are_one_conversation(turns) -> None:
    ids = ["c-1a", "c-1b", "c-2", "c-3a", "c-3b"]
    assert [turns[i]["conversation_id"] for i in ids] == ["c-1a"] * 5  # was c-1a, then c-1b
    assert [turns[i]["turn"] for i in ids] == [1, 2, 3, 4, 5]
    assert turns["c-1b"]["parent_request_id"] == "c-1a"


def test_a_refused_turn_is_no_model_change(breaks) -> None:
    assert "c-3a" not in breaks  # was model_changed, with an unknown loss
    assert [r for r in breaks if r.startswith("c-")] == ["c-1a"]
    assert breaks["c-1a"]["cause"] == "cold_start"


def test_the_prefix_views_name_a_refused_request_by_the_model_that_served_its_name(
    wh: Warehouse, turns
) -> None:
    prefix = _rows(wh, "request_prefix", "SELECT * FROM request_prefix")
    assert prefix["c-1a"]["model"] == SNAPSHOT  # the next answer: none came before it
    assert prefix["c-3a"]["model"] == SNAPSHOT
    assert turns["c-3a"]["model"] == SNAPSHOT
    # one cache scope: the retry finds the refused request's prefix
    assert prefix["c-3b"]["reuse_request_id"] == "c-3a"


def test_a_switch_to_another_requested_model_is_still_a_model_change(breaks, turns) -> None:
    # nothing answered gpt-4o in this scope: the refused request keeps the name it asked for
    assert turns["s-2"]["model"] == "gpt-4o"
    assert breaks["s-2"]["cause"] == "model_changed"


def test_the_cache_rule_is_still_matched_by_the_requests_own_model(wh: Warehouse) -> None:
    expected = _rows(
        wh,
        "expected_cache",
        "SELECT e.request_id, e.rule_id, m.rule_id AS own_rule FROM expected_cache AS e "
        "JOIN requests AS r USING (request_id) LEFT JOIN cache_rule_match AS m "
        "ON m.provider = r.provider AND m.model = r.model AND m.day = r.day",
    )
    assert all(r["rule_id"] == r["own_rule"] for r in expected.values())
    assert expected["c-1a"]["rule_id"] == "openai"


def test_an_answer_to_the_same_name_that_changed_over_time_names_the_latest_earlier_one(
    tmp_path,
) -> None:
    # the alias moved to a new snapshot: a refusal takes the answer before it, not the next
    capture = tmp_path / "capture.jsonl"
    capture.write_bytes(
        b"".join(
            [
                _exchange(_at(0), "m-1", 1, answered=None),
                _exchange(_at(10), "m-2", 1, answered="gpt-4.1-2025-04-14"),
                _exchange(_at(20), "m-3", 1, answered=None),
                _exchange(_at(30), "m-4", 1, answered="gpt-4.1-2026-01-01"),
                _exchange(_at(40), "m-5", 1, answered=None),
            ]
        )
    )
    warehouse = Warehouse(tmp_path / "wh")
    ingest([capture], warehouse, workers=1)
    prefix = _rows(warehouse, "request_prefix", "SELECT request_id, model FROM request_prefix")
    assert {k: v["model"] for k, v in prefix.items()} == {
        "m-1": "gpt-4.1-2025-04-14",
        "m-2": "gpt-4.1-2025-04-14",
        "m-3": "gpt-4.1-2025-04-14",
        "m-4": "gpt-4.1-2026-01-01",
        "m-5": "gpt-4.1-2026-01-01",
    }


def test_an_answered_request_keeps_the_model_its_response_named_even_the_one_it_asked_for(
    tmp_path,
) -> None:
    # an OpenRouter fallback answers one request with another model and the next with the one
    # asked for: that one stays in the requested model's scope, and a refusal after it takes
    # the latest answer (the name itself), not the fallback's
    claude = "anthropic/claude-4.6-sonnet-20260217"
    capture = tmp_path / "capture.jsonl"
    capture.write_bytes(
        b"".join(
            [
                _exchange(_at(0), "o-1", 1, answered=claude, requested="openai/gpt-4o"),
                _exchange(_at(30), "o-2", 1, answered="openai/gpt-4o", requested="openai/gpt-4o"),
                _exchange(_at(60), "o-3", 1, answered=None, requested="openai/gpt-4o"),
            ]
        )
    )
    warehouse = Warehouse(tmp_path / "wh")
    ingest([capture], warehouse, workers=1)
    prefix = _rows(warehouse, "request_prefix", "SELECT request_id, model FROM request_prefix")
    assert {k: v["model"] for k, v in prefix.items()} == {
        "o-1": claude,
        "o-2": "openai/gpt-4o",
        "o-3": "openai/gpt-4o",
    }
