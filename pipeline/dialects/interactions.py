"""Google Gemini Interactions API (`POST /v1beta/interactions`), streamed and not.

Usage (docs/providers.md; https://ai.google.dev/gemini-api/docs/caching):
`usage.total_input_tokens`, `total_cached_tokens`, `total_output_tokens`, `total_thought_tokens`.
Whether cached tokens sit inside total_input_tokens is not established; we take them as inside
(inference, as for generateContent; Google's caching page points at total_cached_tokens as the hit
count). Thoughts are NOT inside total_output_tokens: in both real samples total_tokens = input +
output + thought (7 + 19 + 32 = 58; 7 + 26 + 115 = 148), so output = total_output + total_thought,
as for generateContent.

Streams: events carry `event_type`; usage is on `interaction.completed` (the interaction
object). No `interaction.completed`: interrupted. An `error` event, or a completed interaction
with status `failed`, is a stream_error.

Prompt order for segments (ASSUMED, as for generateContent): tools, `system_instruction`, then
the `input` turns.
"""

from __future__ import annotations

from typing import Any

from pipeline.dialects.common import as_str, error_fields, http_error, loads_lenient, segment
from pipeline.dialects.fields import DialectMap, first, never, read_usage, src, total
from pipeline.records import RequestInfo, ResponseInfo, SegmentRaw, Usage
from pipeline.streams import is_stream_body, iter_sse_json

API = "interactions"

USAGE_MAP = DialectMap(
    api=API,
    title="Google Gemini Interactions",
    usage_at="`usage` of the interaction; streamed: the interaction in `interaction.completed`",
    semantics="gemini_inclusive",
    columns={
        "input_tokens": first(
            src("total_input_tokens"), note="Cached taken as included (inference)"
        ),
        "cache_read_tokens": first(src("total_cached_tokens")),
        "cache_write_tokens": never("Not reported"),
        "cache_write_1h_tokens": never("No TTL split"),
        "output_tokens": total(
            src("total_output_tokens"),
            src("total_thought_tokens", "zero"),
            note="total_tokens = input + output + thought in real samples",
        ),
        "reasoning_tokens": first(src("total_thought_tokens")),
        "reported_cost": never("Google returns no cost"),
    },
)


def parse_request(body: Any, url: str = "") -> RequestInfo:
    segments: list[SegmentRaw] = []
    for tool in body.get("tools") or ():
        segments.append(segment("tool", None, tool))
    system = body.get("system_instruction")
    if system:
        segments.append(segment("system", "system", system))
    items = body.get("input")
    if isinstance(items, list):
        for item in items:
            role = as_str(item.get("role")) if isinstance(item, dict) else None
            segments.append(segment("message", role, item))
    elif items:
        segments.append(segment("message", "user", items))
    return RequestInfo(
        model=as_str(body.get("model")) or as_str(body.get("agent")),
        stream=bool(body.get("stream")),
        segments=segments,
    )


def normalise_usage(raw: Any, provider: str = "") -> Usage | None:
    return read_usage(raw, USAGE_MAP)


def _step_flags(steps: Any) -> tuple[bool, bool]:
    reasoning = text = False
    for step in steps if isinstance(steps, list) else ():
        if not isinstance(step, dict):
            continue
        if step.get("type") == "thought" and step.get("summary"):
            reasoning = True
        elif step.get("type") == "model_output":
            text = text or any(
                isinstance(c, dict) and bool(c.get("text")) for c in step.get("content") or ()
            )
        elif step.get("type") == "function_call":
            text = True
    return reasoning, text


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
        return _parse_stream(body)
    obj = loads_lenient(body)
    if not isinstance(obj, dict):
        raise ValueError("response body is not a JSON object")
    usage = normalise_usage(obj.get("usage"))
    if obj.get("status") == "failed" or obj.get("error") is not None:
        etype, message = error_fields(obj)
        return ResponseInfo("stream_error", usage, error_type=etype, error_message=message)
    reasoning, text = _step_flags(obj.get("steps"))
    end = len(body)
    return ResponseInfo(
        outcome="ok",
        usage=usage,
        model=as_str(obj.get("model")),
        finish_reason=as_str(obj.get("status")),
        first_reasoning_at=end if reasoning else None,
        first_text_at=end if text else None,
    )


def _parse_stream(body: bytes) -> ResponseInfo:
    final: dict[str, Any] | None = None
    model: str | None = None
    first_reasoning: int | None = None
    first_text: int | None = None
    error_type: str | None = None
    error_message: str | None = None
    for name, obj, end in iter_sse_json(body):
        if not isinstance(obj, dict):
            continue
        kind = as_str(obj.get("event_type")) or name or ""
        interaction = obj.get("interaction")
        if isinstance(interaction, dict):
            model = as_str(interaction.get("model")) or model
            if kind == "interaction.completed":
                final = interaction
        if kind == "error" or obj.get("error") is not None:
            error_type, error_message = error_fields(obj)
            error_type = error_type or "error"
        elif kind == "step.delta":
            delta = obj.get("delta") or {}
            dtype = delta.get("type")
            if dtype == "text" and delta.get("text") and first_text is None:
                first_text = end
            elif (
                dtype in ("thought_summary", "thought")
                and first_reasoning is None
                and (delta.get("text") or delta.get("content"))
            ):
                first_reasoning = end
        elif kind == "step.start" and first_text is None:
            step = obj.get("step") or {}
            if step.get("type") == "function_call":
                first_text = end
    usage = normalise_usage(final.get("usage")) if final is not None else None
    if final is not None and final.get("status") == "failed" and error_type is None:
        error_type, error_message = error_fields(final)
        error_type = error_type or "failed"
    if error_type is not None:
        outcome = "stream_error"
    elif final is None:
        outcome = "interrupted"
    else:
        outcome = "ok"
    return ResponseInfo(
        outcome=outcome,
        usage=usage,
        model=model,
        error_type=error_type,
        error_message=error_message,
        finish_reason=as_str(final.get("status")) if final is not None else None,
        first_reasoning_at=first_reasoning,
        first_text_at=first_text,
    )
