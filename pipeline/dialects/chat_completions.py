"""OpenAI Chat Completions and every server that speaks it (DeepSeek, vLLM, SGLang, OpenRouter,
Zhipu GLM, Alibaba DashScope, Groq, Moonshot).

Usage (rulebook: shared/reference/provider-usage.md sections 1, 2, 6):
- input_tokens = prompt_tokens, which INCLUDES cached tokens for every server here.
- cache read: DeepSeek `prompt_cache_hit_tokens` (the field its guide tells users to read), else
  `prompt_tokens_details.cached_tokens`, else Moonshot's top-level `cached_tokens` (secondary
  sources disagree on which Moonshot uses, so both are accepted). Absent everywhere -> unknown:
  vLLM/SGLang omit the field unless enabled, and vLLM omits it at 0, so absent is not 0.
- cache write: `prompt_tokens_details.cache_write_tokens` (OpenAI 2026, OpenRouter) or
  DashScope `cache_creation_input_tokens`; absent -> unknown (DeepSeek never reports writes).
- output = completion_tokens (reasoning included); reasoning = completion_tokens_details.
- reported cost: OpenRouter `usage.cost`.

Streams: usage is the LAST non-null `usage` (OpenAI: a `choices: []` chunk; DeepSeek/Zhipu: the
finish chunk that still has choices[0]); `usage: null` on earlier chunks is ignored. An in-band
error (`event: error` as Groq sends, or an `error` object inside a chunk as OpenRouter sends) makes
the outcome stream_error. A stream with neither `[DONE]` nor a finish_reason nor usage ended early:
interrupted, usage unknown.

Prompt order assumed for segments: tool definitions, then the response_format schema, then the
messages in order. OpenAI does not document where tools sit in the rendered prompt; it says tools
and the schema are part of the cached prefix, so they are placed before the messages.
"""

from __future__ import annotations

from typing import Any

import orjson

from pipeline.dialects.common import (
    error_fields,
    get_float,
    get_int,
    http_error,
    loads_lenient,
    segment,
)
from pipeline.records import RequestInfo, ResponseInfo, SegmentRaw, Usage
from pipeline.streams import iter_sse, looks_like_sse

API = "chat_completions"


def parse_request(body: Any, url: str = "") -> RequestInfo:
    segments: list[SegmentRaw] = []
    for tool in body.get("tools") or body.get("functions") or []:
        segments.append(segment("tool", None, tool))
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        segments.append(segment("schema", None, fmt))
    for message in body.get("messages") or []:
        role = message.get("role") if isinstance(message, dict) else None
        kind = "system" if role in ("system", "developer") else "message"
        segments.append(segment(kind, role if isinstance(role, str) else None, message))
    model = body.get("model")
    stream = body.get("stream")
    return RequestInfo(
        model=model if isinstance(model, str) else None,
        stream=bool(stream) if stream is not None else False,
        segments=segments,
    )


def normalise_usage(raw: Any, provider: str) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    cache_read = get_int(raw, "prompt_cache_hit_tokens")
    semantics = "deepseek_hit_miss" if cache_read is not None else "openai_inclusive"
    if cache_read is None:
        cache_read = get_int(raw, "prompt_tokens_details", "cached_tokens")
    if cache_read is None:
        cache_read = get_int(raw, "cached_tokens")
    cache_write = get_int(raw, "prompt_tokens_details", "cache_write_tokens")
    if cache_write is None:
        cache_write = get_int(raw, "prompt_tokens_details", "cache_creation_input_tokens")
    return Usage(
        input_tokens=get_int(raw, "prompt_tokens"),
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
        cache_write_1h_tokens=None,
        output_tokens=get_int(raw, "completion_tokens"),
        reasoning_tokens=get_int(raw, "completion_tokens_details", "reasoning_tokens"),
        reported_cost=get_float(raw, "cost"),
        semantics=semantics,
        raw=raw,
    )


def _message_text(choice: dict[str, Any]) -> tuple[bool, bool]:
    message = choice.get("message") or choice.get("delta") or {}
    if not isinstance(message, dict):
        return False, False
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    content = message.get("content")
    has_tool = bool(message.get("tool_calls"))
    return bool(reasoning), bool(content) or has_tool


def parse_response(status: int, body: bytes, provider: str, stream: bool) -> ResponseInfo:
    if status >= 400:
        return http_error(body)
    if stream or looks_like_sse(body):
        return _parse_stream(body, provider)
    obj = loads_lenient(body)
    if not isinstance(obj, dict):
        raise ValueError("response body is not a JSON object")
    if "error" in obj and "choices" not in obj:
        etype, message = error_fields(obj)
        return ResponseInfo("stream_error", None, error_type=etype, error_message=message)
    choices = obj.get("choices") or []
    first = choices[0] if choices and isinstance(choices[0], dict) else {}
    has_reasoning, has_text = _message_text(first)
    end = len(body)
    model = obj.get("model")
    return ResponseInfo(
        outcome="ok",
        usage=normalise_usage(obj.get("usage"), provider),
        model=model if isinstance(model, str) else None,
        finish_reason=first.get("finish_reason"),
        first_reasoning_at=end if has_reasoning else None,
        first_text_at=end if has_text else None,
    )


def _parse_stream(body: bytes, provider: str) -> ResponseInfo:
    usage_raw: Any = None
    model: str | None = None
    finish: str | None = None
    done = False
    first_reasoning: int | None = None
    first_text: int | None = None
    error_type: str | None = None
    error_message: str | None = None
    for event in iter_sse(body):
        data = event.data.strip()
        if data == "[DONE]":
            done = True
            continue
        if not data:
            continue
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            if event.event == "error":
                error_type, error_message = "error", data[:200]
            continue
        if not isinstance(chunk, dict):
            continue
        if event.event == "error" or "error" in chunk:
            error_type, error_message = error_fields(chunk)
            error_type = error_type or "error"
        if chunk.get("usage") is not None:
            usage_raw = chunk["usage"]
        if isinstance(chunk.get("model"), str):
            model = chunk["model"]
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            reasoning, text = _message_text(choice)
            if reasoning and first_reasoning is None:
                first_reasoning = event.end
            if text and first_text is None:
                first_text = event.end
            if choice.get("finish_reason"):
                finish = choice["finish_reason"]
    usage = normalise_usage(usage_raw, provider)
    if error_type is not None or error_message is not None:
        outcome = "stream_error"
    elif usage is None and not done and finish is None:
        outcome = "interrupted"
    else:
        outcome = "ok"
    return ResponseInfo(
        outcome=outcome,
        usage=usage,
        model=model,
        error_type=error_type,
        error_message=error_message,
        finish_reason=finish,
        first_reasoning_at=first_reasoning,
        first_text_at=first_text,
    )
