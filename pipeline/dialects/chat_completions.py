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
    as_str,
    error_fields,
    http_error,
    loads_lenient,
    segment,
)
from pipeline.dialects.fields import DialectMap, first, never, read_usage, src
from pipeline.records import RequestInfo, ResponseInfo, SegmentRaw, Usage
from pipeline.streams import is_stream_body, iter_sse

API = "chat_completions"

USAGE_MAP = DialectMap(
    api=API,
    title="OpenAI Chat Completions and compatible servers (DeepSeek, vLLM, SGLang, OpenRouter, "
    "Zhipu, DashScope, Groq, Moonshot)",
    usage_at="`usage` of the body; streamed: the LAST non-null `usage` of any chunk "
    "(OpenAI: a `choices: []` chunk; DeepSeek/Zhipu: the finish chunk)",
    semantics="openai_inclusive",
    columns={
        "input_tokens": first(src("prompt_tokens"), note="Includes cached tokens."),
        "cache_read_tokens": first(
            src("prompt_cache_hit_tokens"),
            src("prompt_tokens_details.cached_tokens"),
            src("cached_tokens"),
            note="DeepSeek's hit field first (usage_semantics = deepseek_hit_miss); Moonshot's "
            "top-level field last (unconfirmed which one it sends, so both are accepted). "
            "vLLM/SGLang omit it unless enabled: absent is unknown, not 0",
        ),
        "cache_write_tokens": first(
            src("prompt_tokens_details.cache_write_tokens"),
            src("prompt_tokens_details.cache_creation_input_tokens"),
            src("cache_creation_input_tokens"),
            note="OpenAI 2026 / OpenRouter, then DashScope (nested per the rulebook; top-level "
            "accepted too, unconfirmed). DeepSeek never reports writes",
        ),
        "cache_write_1h_tokens": never("No TTL split in this dialect"),
        "output_tokens": first(src("completion_tokens"), note="Includes reasoning."),
        "reasoning_tokens": first(src("completion_tokens_details.reasoning_tokens")),
        "reported_cost": first(src("cost"), note="OpenRouter only", real=True),
    },
    notes=(
        "DeepSeek: prompt_tokens = prompt_cache_hit_tokens + prompt_cache_miss_tokens, so "
        "uncached_input_tokens equals prompt_cache_miss_tokens.",
        "An `error` object inside an HTTP-200 body or chunk (OpenRouter) or an `event: error` "
        "(Groq) makes the outcome stream_error; usage sent alongside is kept.",
        "A stream with neither `[DONE]`, a finish_reason nor usage is `interrupted`, usage NULL.",
    ),
)


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
        segments.append(segment(kind, as_str(role), message))
    stream = body.get("stream")
    return RequestInfo(
        model=as_str(body.get("model")),
        stream=bool(stream) if stream is not None else False,
        segments=segments,
    )


def normalise_usage(raw: Any, provider: str = "") -> Usage | None:
    if not isinstance(raw, dict):
        return None
    hit_miss = "prompt_cache_hit_tokens" in raw
    return read_usage(raw, USAGE_MAP, "deepseek_hit_miss" if hit_miss else None)


def _message_text(choice: dict[str, Any]) -> tuple[bool, bool]:
    message = choice.get("message") or choice.get("delta") or {}
    if not isinstance(message, dict):
        return False, False
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    content = message.get("content")
    has_tool = bool(message.get("tool_calls")) or bool(message.get("function_call"))
    return bool(reasoning), bool(content) or has_tool


def parse_response(
    status: int,
    body: bytes,
    provider: str,
    stream: bool,
    headers: list[tuple[str, str]] | None = None,
) -> ResponseInfo:
    if status >= 400:
        return http_error(body)
    if is_stream_body(body, stream):
        return _parse_stream(body, provider)
    obj = loads_lenient(body)
    if not isinstance(obj, dict):
        raise ValueError("response body is not a JSON object")
    if "error" in obj and "choices" not in obj:
        etype, message = error_fields(obj)
        return ResponseInfo(
            "stream_error",
            normalise_usage(obj.get("usage"), provider),
            error_type=etype,
            error_message=message,
        )
    choices = obj.get("choices") or []
    head = choices[0] if choices and isinstance(choices[0], dict) else {}
    has_reasoning, has_text = _message_text(head)
    end = len(body)
    return ResponseInfo(
        outcome="ok",
        usage=normalise_usage(obj.get("usage"), provider),
        model=as_str(obj.get("model")),
        finish_reason=as_str(head.get("finish_reason")),
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
    errored = False
    usage_final = False  # usage seen on or after the finish chunk
    for event in iter_sse(body):
        data = event.data.strip()
        if data == b"[DONE]":
            done = True
            continue
        if not data:
            continue
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            if event.event == "error":
                errored = True
                error_type, error_message = "error", data[:200].decode("utf-8", "replace")
            continue
        if not isinstance(chunk, dict):
            continue
        if event.event == "error" or chunk.get("error") is not None:
            errored = True
            error_type, error_message = error_fields(chunk)
            error_type = error_type or "error"
        if chunk.get("usage") is not None:
            usage_raw = chunk["usage"]
            usage_final = finish is not None or any(
                isinstance(c, dict) and c.get("finish_reason") for c in chunk.get("choices") or ()
            )
        if isinstance(chunk.get("model"), str):
            model = chunk["model"]
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            reasoning, text = _message_text(choice)
            if reasoning and first_reasoning is None:
                first_reasoning = event.end
            if text and first_text is None:
                first_text = event.end
            if choice.get("finish_reason"):
                finish = as_str(choice["finish_reason"])
    usage = normalise_usage(usage_raw, provider)
    if errored:
        outcome = "stream_error"
    elif not done and not usage_final:
        outcome = "interrupted"
        if usage is not None:  # running totals of a cut stream: output not final
            usage.output_tokens = usage.reasoning_tokens = None
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
