"""Conversations without session ids are linked by their message history: a system prompt that
changes every turn is still ONE conversation with a break on every turn, and a new conversation
starts cold even when it shares the tools and system prompt of another."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from pipeline import sql
from pipeline.capture_format import dumps_record, make_record
from pipeline.ingest import ingest
from pipeline.warehouse import Warehouse

T0 = datetime(2026, 11, 16, 9, 0, tzinfo=UTC)
SYSTEM = "Follow the runbook. " * 300


def _record(at: datetime, rid: str, messages: list[dict[str, Any]]) -> bytes:
    body = {"model": "gpt-4.1-2025-04-14", "messages": messages}
    usage = {
        "prompt_tokens": 1600,
        "completion_tokens": 5,
        "total_tokens": 1605,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    response = {
        "id": rid,
        "object": "chat.completion",
        "model": "gpt-4.1-2025-04-14",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        ],
        "usage": usage,
    }
    return dumps_record(
        make_record(
            started_at=at,
            method="POST",
            url="https://api.openai.com/v1/chat/completions",
            request_headers=[("authorization", "Bearer sk-lineage")],
            request_body=orjson.dumps(body),
            status=200,
            response_headers=[("content-type", "application/json")],
            response_body=orjson.dumps(response),
            record_id=rid,
        )
    )


def _conversation(prefix: str, start: datetime, task: str, turns: int) -> list[bytes]:
    out = []
    history: list[dict[str, Any]] = [{"role": "user", "content": task}]
    for t in range(turns):
        at = start + timedelta(seconds=20 * t)
        system = f"Current time: {at.isoformat()}\n{SYSTEM}"
        out.append(_record(at, f"{prefix}-{t}", [{"role": "system", "content": system}, *history]))
        history += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": f"go {t}"}]
    return out


def test_a_timestamp_in_the_system_prompt_is_one_conversation_with_a_break_every_turn(
    tmp_path: Path,
) -> None:
    lines = _conversation("a", T0, "Fix the deploy.", 4)
    lines += _conversation("b", T0 + timedelta(seconds=5), "Refund order 7.", 3)
    capture = tmp_path / "capture.jsonl"
    capture.write_bytes(b"".join(sorted(lines)))
    wh = Warehouse(tmp_path / "wh")
    ingest([capture], wh, workers=1)
    con = sql.connect(wh, only=["cache_breaks"])
    conv = con.execute(
        "SELECT request_id, conversation_id, turn, parent_request_id, link_method "
        "FROM conversations ORDER BY request_id"
    ).fetchall()
    assert conv == [
        ("a-0", "a-0", 1, None, "new"),
        ("a-1", "a-0", 2, "a-0", "history"),
        ("a-2", "a-0", 3, "a-1", "history"),
        ("a-3", "a-0", 4, "a-2", "history"),
        ("b-0", "b-0", 1, None, "new"),
        ("b-1", "b-0", 2, "b-0", "history"),
        ("b-2", "b-0", 3, "b-1", "history"),
    ]
    causes = con.execute(
        "SELECT request_id, cause, change_class FROM cache_breaks ORDER BY request_id"
    ).fetchall()
    assert causes == [
        ("a-0", "cold_start", None),
        ("a-1", "system_changed", "timestamp"),
        ("a-2", "system_changed", "timestamp"),
        ("a-3", "system_changed", "timestamp"),
        ("b-0", "cold_start", None),
        ("b-1", "system_changed", "timestamp"),
        ("b-2", "system_changed", "timestamp"),
    ]
