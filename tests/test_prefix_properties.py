"""Property: appending a turn to a conversation never lowers the shared prefix with its parent
(prefix_reuse measures the whole parent prompt as shared, turn after turn)."""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline import sql
from pipeline.capture_format import dumps_record, make_record
from pipeline.ingest import ingest
from pipeline.warehouse import Warehouse

T0 = datetime(2026, 11, 16, 9, 0, tzinfo=UTC)
text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)


def _line(i: int, messages: list[dict[str, Any]], tools: list[str]) -> bytes:
    body: dict[str, Any] = {"model": "deepseek-chat", "messages": messages}
    if tools:
        body["tools"] = [{"type": "function", "function": {"name": n}} for n in tools]
    response = {
        "id": f"r{i}",
        "object": "chat.completion",
        "model": "deepseek-chat",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        ],
        "usage": {
            "prompt_tokens": 100 + i,
            "completion_tokens": 1,
            "prompt_cache_hit_tokens": 0,
            "prompt_cache_miss_tokens": 100 + i,
        },
    }
    return dumps_record(
        make_record(
            started_at=T0 + timedelta(seconds=10 * i),
            method="POST",
            url="https://api.deepseek.com/chat/completions",
            request_headers=[("authorization", "Bearer sk-property-test")],
            request_body=orjson.dumps(body),
            status=200,
            response_headers=[("content-type", "application/json")],
            response_body=orjson.dumps(response),
            record_id=f"r{i}",
        )
    )


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    system=text,
    tools=st.lists(st.sampled_from(["search", "fetch", "run"]), max_size=3),
    first=text,
    replies=st.lists(st.tuples(text, text), min_size=2, max_size=4),
)
def test_appending_a_turn_never_lowers_the_shared_prefix_with_its_parent(
    system: str, tools: list[str], first: str, replies: list[tuple[str, str]]
) -> None:
    history: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": first},
    ]
    lines = [_line(0, history, tools)]
    for i, (reply, user) in enumerate(replies, start=1):
        history = [
            *history,
            {"role": "assistant", "content": reply},
            {"role": "user", "content": user},
        ]
        lines.append(_line(i, history, tools))
    with tempfile.TemporaryDirectory() as tmp:
        capture = Path(tmp) / "c.jsonl"
        capture.write_bytes(b"".join(lines))
        wh = Warehouse(Path(tmp) / "wh")
        ingest([capture], wh, workers=1)
        rows = (
            sql.connect(wh, only=["prefix_reuse"])
            .execute(
                "SELECT request_id, shared_segments, segment_count FROM prefix_reuse "
                "ORDER BY started_at"
            )
            .fetchall()
        )
    shared = [r[1] for r in rows]
    counts = [r[2] for r in rows]
    assert shared == sorted(shared)  # never lower than the turn before
    for turn in range(1, len(rows)):  # and always at least the whole parent prompt
        assert shared[turn] >= counts[turn - 1]
