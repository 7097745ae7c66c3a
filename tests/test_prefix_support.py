"""Builders for the prefix, conversation and break tests: hand-made exchanges per dialect whose
usage follows docs/providers.md (OpenAI 1024 + 128-token steps, Anthropic input excluding the
cache, Gemini promptTokenCount including it), token counts = compact JSON bytes / 4. No session
ids unless asked: conversations are linked by their history, as from a proxy capture."""

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
BIG = "Follow the runbook step by step. " * 250  # ~8,250 bytes: ~2,060 tokens
KEY = "sk-prefix-tests-aaaaaaaaaaaaaaaaaaaaaaaa"
OPENAI = "https://api.openai.com/v1/chat/completions"
ANTHROPIC = "https://api.anthropic.com/v1/messages"
DEEPSEEK = "https://api.deepseek.com/chat/completions"
REPLY = {"role": "assistant", "content": "ok"}


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def tokens(*parts: Any) -> int:
    return sum(len(orjson.dumps(p)) for p in parts) // 4


def openai_read(prefix_tokens: int) -> int:
    """What OpenAI serves of a shared prefix (docs/providers.md)."""
    return 0 if prefix_tokens < 1024 else 1024 + 128 * ((prefix_tokens - 1024) // 128)


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def system(text: str) -> dict[str, str]:
    return {"role": "system", "content": text}


def tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}


def _record(
    when: datetime,
    rid: str,
    url: str,
    body: dict[str, Any],
    response: dict[str, Any] | None,
    *,
    status: int | None = 200,
    header: tuple[str, str] = ("authorization", f"Bearer {KEY}"),
    first_byte_ms: float | None = None,
    end_ms: float | None = 800.0,
    session: str | None = None,
    stream_body: bytes | None = None,
    outcome: str | None = None,
) -> bytes:
    streamed = stream_body is not None
    return dumps_record(
        make_record(
            started_at=when,
            method="POST",
            url=url,
            request_headers=[("content-type", "application/json"), header],
            request_body=orjson.dumps(body),
            status=status,
            response_headers=[
                ("content-type", "text/event-stream" if streamed else "application/json")
            ],
            response_body=stream_body if streamed else orjson.dumps(response) if response else None,
            chunks=[(first_byte_ms or 300.0, len(stream_body))] if stream_body else None,
            first_byte_ms=first_byte_ms,
            end_ms=end_ms,
            outcome=outcome,
            record_id=rid,
            session_id=session,
        )
    )


def chat(
    when: datetime,
    rid: str,
    messages: list[dict[str, Any]],
    *,
    read: int = 0,
    tools: list[dict[str, Any]] | None = None,
    model: str = "gpt-4.1-2025-04-14",
    first_byte_ms: float | None = None,
    end_ms: float | None = 800.0,
    session: str | None = None,
) -> bytes:
    """An OpenAI chat completion that answered, with `read` cached tokens."""
    body: dict[str, Any] = {"model": model, "messages": messages}
    if tools:
        body["tools"] = tools
    total = tokens(*(tools or []), *messages)
    usage = {
        "prompt_tokens": total,
        "completion_tokens": 5,
        "total_tokens": total + 5,
        "prompt_tokens_details": {"cached_tokens": read},
    }
    answer = {
        "id": rid,
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": REPLY, "finish_reason": "stop"}],
        "usage": usage,
    }
    return _record(
        when, rid, OPENAI, body, answer, first_byte_ms=first_byte_ms, end_ms=end_ms,
        session=session,
    )  # fmt: skip


def deepseek(when: datetime, rid: str, messages: list[dict[str, Any]], *, read: int = 0) -> bytes:
    """A DeepSeek chat completion that answered (V4 rules: persisted units)."""
    body = {"model": "deepseek-chat", "messages": messages}
    total = tokens(*messages)
    usage = {
        "prompt_tokens": total,
        "completion_tokens": 5,
        "total_tokens": total + 5,
        "prompt_cache_hit_tokens": read,
        "prompt_cache_miss_tokens": total - read,
    }
    answer = {
        "id": rid,
        "object": "chat.completion",
        "model": "deepseek-chat",
        "choices": [{"index": 0, "message": REPLY, "finish_reason": "stop"}],
        "usage": usage,
    }
    return _record(when, rid, DEEPSEEK, body, answer)


def refused(
    when: datetime,
    rid: str,
    body: dict[str, Any],
    *,
    url: str = OPENAI,
    status: int | None = 429,
    session: str | None = None,
    header: tuple[str, str] = ("authorization", f"Bearer {KEY}"),
) -> bytes:
    """An HTTP error (never processed), or with status None no response at all."""
    error = {"error": {"message": "Rate limit reached", "type": "requests"}}
    answered = status is not None
    return _record(
        when, rid, url, body, error if answered else None, status=status, session=session,
        header=header, outcome=None if answered else "interrupted",
        end_ms=50.0 if answered else None,
    )  # fmt: skip


def cut_stream(
    when: datetime,
    rid: str,
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] | None = None,
    first_byte_ms: float = 300.0,
    session: str | None = None,
) -> bytes:
    """A streamed chat completion that began (HTTP 200, first chunk) and was cut before usage."""
    body: dict[str, Any] = {"model": "gpt-4.1-2025-04-14", "messages": messages, "stream": True}
    if tools:
        body["tools"] = tools
    chunk = {
        "id": rid,
        "object": "chat.completion.chunk",
        "model": "gpt-4.1-2025-04-14",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": "o"}}],
    }
    sse = b"data: " + orjson.dumps(chunk) + b"\n\n"
    return _record(
        when, rid, OPENAI, body, None, stream_body=sse, outcome="interrupted",
        first_byte_ms=first_byte_ms, session=session,
    )  # fmt: skip


def anthropic(
    when: datetime,
    rid: str,
    system_blocks: Any,
    messages: list[dict[str, Any]],
    *,
    uncached: int,
    write: int = 0,
    read: int = 0,
    model: str = "claude-sonnet-4-5-20250929",
) -> bytes:
    body = {"model": model, "max_tokens": 100, "system": system_blocks, "messages": messages}
    usage = {
        "input_tokens": uncached,
        "output_tokens": 5,
        "cache_creation_input_tokens": write,
        "cache_read_input_tokens": read,
    }
    answer = {
        "id": rid,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "usage": usage,
    }
    return _record(when, rid, ANTHROPIC, body, answer, header=("x-api-key", KEY))


def gemini(
    when: datetime,
    rid: str,
    system_text: str,
    contents: list[dict[str, Any]],
    *,
    read: int = 0,
    model: str = "gemini-2.5-flash",
) -> bytes:
    body = {"systemInstruction": {"parts": [{"text": system_text}]}, "contents": contents}
    total = tokens(body["systemInstruction"], *contents)
    meta: dict[str, Any] = {
        "promptTokenCount": total,
        "candidatesTokenCount": 5,
        "totalTokenCount": total + 5,
    }
    if read:
        meta["cachedContentTokenCount"] = read
    answer = {
        "candidates": [
            {"content": {"role": "model", "parts": [{"text": "ok"}]}, "finishReason": "STOP"}
        ],
        "usageMetadata": meta,
        "modelVersion": model,
    }
    url = f"https://generativelanguage.googleapis.com/v1beta/models/{model}:generateContent"
    return _record(when, rid, url, body, answer, header=("x-goog-api-key", KEY))


def warehouse(tmp_path: Path, lines: list[bytes]) -> Warehouse:
    tmp_path.mkdir(parents=True, exist_ok=True)
    capture = tmp_path / "capture.jsonl"
    capture.write_bytes(b"".join(lines))
    wh = Warehouse(tmp_path / "wh")
    ingest([capture], wh, workers=1)
    return wh


def rows(wh: Warehouse, query: str) -> dict[str, dict[str, Any]]:
    """Rows of `query` by their first column (a request id)."""
    rel = sql.connect(wh, only=["cache_breaks"]).sql(query)
    return {r[0]: dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()}


TURNS = (
    "SELECT c.request_id, c.conversation_id, c.turn, c.parent_request_id, c.link_method,"
    " e.expected_read_tokens, e.cache_read_tokens, b.cause, b.tokens_lost"
    " FROM conversations AS c JOIN expected_cache AS e USING (request_id)"
    " LEFT JOIN cache_breaks AS b USING (request_id)"
)


def turns(wh: Warehouse) -> dict[str, dict[str, Any]]:
    """Per request: conversation, turn, parent, link, expected and reported read, cause, loss."""
    return rows(wh, TURNS)
