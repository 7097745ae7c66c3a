"""Lineage and expected reads across dialects whose wire format differs from chat completions:
Gemini's reply role is `model` and its explicit cache is a `cachedContent` segment; Anthropic's
`cache_control` and Bedrock's `cachePoint` markers move between turns without changing the
content, so they are not part of the hashed prompt."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from pipeline import sql
from pipeline.capture_format import dumps_record, make_record
from pipeline.dialects import converse, messages
from pipeline.ingest import ingest
from pipeline.warehouse import Warehouse

T0 = datetime(2026, 11, 17, 9, 0, tzinfo=UTC)
LONG = "Follow the runbook step by step. " * 250  # ~8000 bytes, ~2000 tokens
EPHEMERAL = {"type": "ephemeral"}


def _record(
    at: datetime, rid: str, url: str, key: tuple[str, str], body: Any, response: Any
) -> bytes:
    return dumps_record(
        make_record(
            started_at=at,
            method="POST",
            url=url,
            request_headers=[key],
            request_body=orjson.dumps(body),
            status=200,
            response_headers=[("content-type", "application/json")],
            response_body=orjson.dumps(response),
            record_id=rid,
        )
    )


def _tokens(body: Any) -> int:
    return len(orjson.dumps(body)) // 4


def _gemini(at: datetime, rid: str, body: dict[str, Any]) -> bytes:
    prompt = _tokens(body)
    response = {
        "candidates": [
            {"content": {"role": "model", "parts": [{"text": "ok"}]}, "finishReason": "STOP"}
        ],
        "usageMetadata": {
            "promptTokenCount": prompt,
            "candidatesTokenCount": 2,
            "totalTokenCount": prompt + 2,
        },
        "modelVersion": "gemini-2.5-flash",
    }
    url = "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent"
    return _record(at, rid, url, ("x-goog-api-key", "AIza-lineage-test"), body, response)


def _anthropic(at: datetime, rid: str, body: dict[str, Any]) -> bytes:
    body = {"model": "claude-sonnet-4-5-20250929", "max_tokens": 100, **body}
    response = {
        "id": rid,
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "usage": {
            "input_tokens": 10,
            "cache_creation_input_tokens": _tokens(body),
            "cache_read_input_tokens": 0,
            "output_tokens": 2,
        },
    }
    url = "https://api.anthropic.com/v1/messages"
    return _record(at, rid, url, ("x-api-key", "sk-ant-lineage-test"), body, response)


def _converse(at: datetime, rid: str, body: dict[str, Any]) -> bytes:
    response = {
        "output": {"message": {"role": "assistant", "content": [{"text": "ok"}]}},
        "stopReason": "end_turn",
        "usage": {
            "inputTokens": 10,
            "outputTokens": 2,
            "cacheReadInputTokens": 0,
            "cacheWriteInputTokens": _tokens(body),
        },
    }
    url = (
        "https://bedrock-runtime.us-east-1.amazonaws.com/model/"
        "us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse"
    )
    key = ("authorization", "AWS4-HMAC-SHA256 Credential=AKIALINEAGETEST0000/20261117/x")
    return _record(at, rid, url, key, body, response)


def _warehouse(tmp_path: Path, lines: list[bytes]) -> Any:
    capture = tmp_path / "capture.jsonl"
    capture.write_bytes(b"".join(lines))
    wh = Warehouse(tmp_path / "wh")
    ingest([capture], wh, workers=1)
    return sql.connect(wh, only=["cache_breaks"])


def _turns(con: Any) -> list[tuple[Any, ...]]:
    return con.execute(
        "SELECT c.request_id, c.conversation_id, c.turn, c.parent_request_id, c.link_method, "
        "b.cause, e.expected_read_tokens "
        "FROM conversations AS c JOIN expected_cache AS e USING (request_id) "
        "LEFT JOIN cache_breaks AS b USING (request_id) ORDER BY c.started_at"
    ).fetchall()


def test_a_multi_turn_gemini_conversation_is_one_conversation_linked_by_its_model_replies(
    tmp_path: Path,
) -> None:
    system = {"parts": [{"text": LONG}]}
    history: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": "task H"}]}]
    lines = []
    for i in range(1, 7):
        body = {"systemInstruction": system, "contents": list(history)}
        lines.append(_gemini(T0 + timedelta(seconds=60 * i), f"H{i}", body))
        history += [
            {"role": "model", "parts": [{"text": f"ok H{i}"}]},
            {"role": "user", "parts": [{"text": f"h{i + 1}"}]},
        ]
    rows = _turns(_warehouse(tmp_path, lines))
    assert [r[:5] for r in rows] == [
        ("H1", "H1", 1, None, "new"),
        *[(f"H{i}", "H1", i, f"H{i - 1}", "history") for i in range(2, 7)],
    ]
    assert all(r[5] != "history_rewritten" for r in rows)


def test_a_new_gemini_explicit_cache_is_a_system_change_inside_the_same_conversation(
    tmp_path: Path,
) -> None:
    user = {"role": "user", "parts": [{"text": "task G " + LONG}]}
    first = {"cachedContent": "cachedContents/aaa", "contents": [user]}
    second = {
        "cachedContent": "cachedContents/bbb",
        "contents": [
            user,
            {"role": "model", "parts": [{"text": "ok"}]},
            {"role": "user", "parts": [{"text": "next"}]},
        ],
    }
    con = _warehouse(
        tmp_path, [_gemini(T0, "G1", first), _gemini(T0 + timedelta(seconds=60), "G2", second)]
    )
    starts = con.execute(
        "SELECT request_id, history_start FROM request_prefix ORDER BY request_id"
    ).fetchall()
    assert starts == [("G1", 1), ("G2", 1)]
    rows = _turns(con)
    assert [r[:6] for r in rows] == [
        ("G1", "G1", 1, None, "new", "cold_start"),
        ("G2", "G1", 2, "G1", "history", "system_changed"),
    ]


def _user(text: str, marker: bool) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": text}
    if marker:
        block["cache_control"] = EPHEMERAL
    return {"role": "user", "content": [block]}


def test_moving_the_anthropic_breakpoint_to_the_newest_message_keeps_one_conversation(
    tmp_path: Path,
) -> None:
    """The documented multi-turn pattern: the marker moves to the last message every turn."""
    tools = [{"name": "search", "description": LONG, "input_schema": {"type": "object"}}]
    system = [{"type": "text", "text": LONG, "cache_control": EPHEMERAL}]
    said = ["task AM " + LONG[:2000], "second " + LONG[:2000], "third " + LONG[:2000], "fourth"]
    lines = []
    for turn in range(4):
        msgs: list[dict[str, Any]] = []
        for i in range(turn + 1):
            msgs.append(_user(said[i], i == turn))
            if i < turn:
                msgs.append({"role": "assistant", "content": [{"type": "text", "text": f"ok {i}"}]})
        body = {"tools": tools, "system": system, "messages": msgs}
        lines.append(_anthropic(T0 + timedelta(seconds=60 * turn), f"AM{turn + 1}", body))
    con = _warehouse(tmp_path, lines)
    rows = _turns(con)
    assert [r[:5] for r in rows] == [
        ("AM1", "AM1", 1, None, "new"),
        *[(f"AM{i}", "AM1", i, f"AM{i - 1}", "history") for i in range(2, 5)],
    ]
    assert not [r for r in rows if r[5] in ("history_rewritten", "system_changed")]
    expected = [r[6] for r in rows]
    assert expected[0] == 0
    assert expected[1] < expected[2] < expected[3]
    # turn 2 reads what turn 1 wrote at its breakpoint: tools, system and the first message
    tools_system_first = con.execute(
        "SELECT sum(bytes) FROM segments WHERE request_id = 'AM1'"
    ).fetchone()[0]
    assert expected[1] > 0.9 * tools_system_first / 4


def test_anthropic_segment_bytes_do_not_carry_cache_control_markers() -> None:
    marked = {
        "tools": [{"name": "t", "input_schema": {}, "cache_control": EPHEMERAL}],
        "system": [
            {"type": "text", "text": "S", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
        ],
        "messages": [
            _user("a", True),
            {"role": "user", "content": "b", "cache_control": EPHEMERAL},
        ],
    }
    plain = {
        "tools": [{"name": "t", "input_schema": {}}],
        "system": [{"type": "text", "text": "S"}],
        "messages": [_user("a", False), {"role": "user", "content": "b"}],
    }
    ours, theirs = messages.parse_request(marked), messages.parse_request(plain)
    assert [s.data for s in ours.segments] == [s.data for s in theirs.segments]
    assert (ours.cache_breakpoints, ours.cache_ttls) == ([0, 1, 2, 3], ["5m", "1h", "5m", "5m"])
    assert theirs.cache_breakpoints == []
    # the request body itself is left as sent
    assert marked["tools"][0]["cache_control"] == EPHEMERAL


def _converse_user(text: str, point: bool) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"text": text}]
    if point:
        content.append({"cachePoint": {"type": "default"}})
    return {"role": "user", "content": content}


def test_moving_the_bedrock_cache_point_to_the_newest_message_keeps_one_conversation(
    tmp_path: Path,
) -> None:
    system = [{"text": LONG}, {"cachePoint": {"type": "default"}}]
    said = ["task CV " + LONG[:2000], "second " + LONG[:2000], "third " + LONG[:2000], "fourth"]
    lines = []
    for turn in range(4):
        msgs: list[dict[str, Any]] = []
        for i in range(turn + 1):
            msgs.append(_converse_user(said[i], i == turn))
            if i < turn:
                msgs.append({"role": "assistant", "content": [{"text": f"ok {i}"}]})
        body = {"system": system, "messages": msgs}
        lines.append(_converse(T0 + timedelta(seconds=60 * turn), f"CV{turn + 1}", body))
    con = _warehouse(tmp_path, lines)
    rows = _turns(con)
    assert [r[:5] for r in rows] == [
        ("CV1", "CV1", 1, None, "new"),
        *[(f"CV{i}", "CV1", i, f"CV{i - 1}", "history") for i in range(2, 5)],
    ]
    assert not [r for r in rows if r[5] in ("history_rewritten", "system_changed")]
    expected = [r[6] for r in rows]
    assert expected[0] == 0
    assert expected[1] < expected[2] < expected[3]
    bps = con.execute("SELECT cache_breakpoints FROM requests ORDER BY started_at").fetchall()
    assert [b[0] for b in bps] == [[0, 1], [0, 3], [0, 5], [0, 7]]


def test_bedrock_cache_points_make_no_segment_and_mark_the_segment_they_close() -> None:
    body = {
        "toolConfig": {"tools": [{"toolSpec": {"name": "t"}}, {"cachePoint": {"type": "default"}}]},
        "system": [{"text": "sys"}, {"cachePoint": {"type": "default", "ttl": "1h"}}],
        "messages": [_converse_user("q", True)],
    }
    info = converse.parse_request(body, "https://x/model/m/converse")
    assert [s.data for s in info.segments] == [
        b'{"toolSpec":{"name":"t"}}',
        b'{"text":"sys"}',
        b'{"role":"user","content":[{"text":"q"}]}',
    ]
    assert (info.cache_breakpoints, info.cache_ttls) == ([0, 1, 2], ["5m", "1h", "5m"])


def test_a_body_level_anthropic_cache_control_is_a_breakpoint_on_the_last_segment() -> None:
    body = {
        "system": "be brief",
        "messages": [_user("a", False), _user("b", False)],
        "cache_control": {"type": "ephemeral", "ttl": "1h"},
    }
    info = messages.parse_request(body)
    assert (info.cache_breakpoints, info.cache_ttls) == ([2], ["1h"])
    # an explicit marker on the last block already is that breakpoint
    body["messages"] = [_user("a", False), _user("b", True)]
    info = messages.parse_request(body)
    assert (info.cache_breakpoints, info.cache_ttls) == ([2], ["5m"])


def test_anthropic_automatic_caching_expects_the_previous_turn_to_be_read(tmp_path: Path) -> None:
    first = {
        "system": LONG,
        "messages": [_user("task F", False)],
        "cache_control": EPHEMERAL,
    }
    second = {
        "system": LONG,
        "messages": [
            _user("task F", False),
            {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
            _user("f2", False),
        ],
        "cache_control": EPHEMERAL,
    }
    con = _warehouse(
        tmp_path,
        [_anthropic(T0, "F1", first), _anthropic(T0 + timedelta(seconds=60), "F2", second)],
    )
    rows = _turns(con)
    assert [r[:5] for r in rows] == [
        ("F1", "F1", 1, None, "new"),
        ("F2", "F1", 2, "F1", "history"),
    ]
    first_bytes = con.execute("SELECT sum(bytes) FROM segments WHERE request_id = 'F1'").fetchone()[
        0
    ]
    assert rows[1][6] > 0.9 * first_bytes / 4


def _responses(at: datetime, rid: str, body: dict[str, Any]) -> bytes:
    body = {"model": "gpt-4.1", **body}
    prompt = _tokens(body)
    response = {
        "id": rid,
        "object": "response",
        "status": "completed",
        "model": "gpt-4.1-2025-04-14",
        "output": [{"type": "function_call", "call_id": f"c-{rid}", "name": "step",
                    "arguments": "{}"}],
        "usage": {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens": 5, "total_tokens": prompt + 5},
    }  # fmt: skip
    url = "https://api.openai.com/v1/responses"
    return _record(at, rid, url, ("authorization", "Bearer sk-lineage-test"), body, response)


def test_a_responses_agent_loop_of_only_tool_calls_is_one_conversation(tmp_path: Path) -> None:
    # No item has a role except the first user message: function_call items are the model's
    # replies and function_call_output items the tool results.
    items: list[dict[str, Any]] = [{"role": "user", "content": "task R"}]
    lines = []
    for i in range(1, 6):
        body = {"instructions": LONG, "input": list(items)}
        lines.append(_responses(T0 + timedelta(seconds=30 * i), f"R{i}", body))
        items += [
            {"type": "function_call", "call_id": f"c-R{i}", "name": "step", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"c-R{i}", "output": f"done {i}"},
        ]
    rows = _turns(_warehouse(tmp_path, lines))
    assert [r[:5] for r in rows] == [
        ("R1", "R1", 1, None, "new"),
        *[(f"R{i}", "R1", i, f"R{i - 1}", "history") for i in range(2, 6)],
    ]
