"""OpenAI Responses API (`POST /v1/responses`; also DeepSeek's `/responses`), streamed and not.

Usage (docs/providers.md; https://platform.openai.com/docs/api-reference/responses/object):
`input_tokens` INCLUDES `input_tokens_details.cached_tokens`;
`input_tokens_details.cache_write_tokens` where present (absent in older captures: unknown);
`output_tokens` includes `output_tokens_details.reasoning_tokens`.

Streams are SSE with `event:` lines and no `[DONE]`; the event type is also inside the data
(`"type"`), which is what is read, so bodies without `event:` lines parse the same. Usage comes
from the terminal event's Response: `response.completed`, `response.incomplete` or
`response.failed` (earlier events carry `usage: null`). An `error` event, or a
`response.failed`, on the HTTP-200 stream makes the outcome stream_error. No terminal event:
interrupted, usage NULL.

Prompt order for segments: tools, then the `text.format` JSON schema, then `instructions`, then
the `input` items in order. OpenAI does not document where tools sit in the rendered prompt; its
caching guide says tools and schemas are part of the cached prefix, so they come first. Input
that lives server-side (`previous_response_id`, `conversation`) is not in the request bytes and
so has no segment. Items without a `role` get one from their type: what the model produced
(`function_call`, `reasoning`, other `*_call` items) is `assistant`, `*_output` items are `tool`.

`prompt_cache_retention: "24h"` is recorded as `cache_ttls = ["24h"]`, as in chat completions.
"""

from __future__ import annotations

from typing import Any

import orjson

from pipeline.dialects.chat_completions import retention_ttls
from pipeline.dialects.common import as_str, error_fields, http_error, loads_lenient, segment
from pipeline.dialects.fields import DialectMap, first, never, read_usage, src
from pipeline.records import RequestInfo, ResponseInfo, SegmentRaw, Usage
from pipeline.redact import cut
from pipeline.streams import is_stream_body, iter_sse

API = "responses"

USAGE_MAP = DialectMap(
    api=API,
    title="OpenAI Responses (also DeepSeek `/responses`)",
    usage_at="`usage` of the Response; streamed: the Response inside `response.completed`, "
    "`response.incomplete` or `response.failed`",
    semantics="openai_inclusive",
    columns={
        "input_tokens": first(src("input_tokens"), note="Includes cached tokens"),
        "cache_read_tokens": first(src("input_tokens_details.cached_tokens")),
        "cache_write_tokens": first(
            src("input_tokens_details.cache_write_tokens"), note="Absent in older captures"
        ),
        "cache_write_1h_tokens": never("No TTL split in this dialect"),
        "output_tokens": first(src("output_tokens"), note="Includes reasoning"),
        "reasoning_tokens": first(src("output_tokens_details.reasoning_tokens")),
        "reported_cost": never("OpenAI returns no cost"),
    },
    notes=(
        "An `error` event or `response.failed` on an HTTP-200 stream is a stream_error.",
        "Segments: tools, text.format schema, instructions, then input items.",
        "web_search_requests: the Response's `tool_usage.web_search.num_requests` (beside "
        "`usage`) where reported; else the number of `web_search_call` items in its `output`, "
        "each a billed search call, when there is one or more; else NULL.",
    ),
)

_TERMINAL = ("response.completed", "response.incomplete", "response.failed")


def _is_tool_call(kind: object) -> bool:
    """An output item that is a tool call (function_call, web_search_call, mcp_call, shell_call,
    and any later `*_call`): the model's answer, for the first-answer time and for the role of
    such an item when it comes back as input. One rule for both, so a new tool type counts in
    both places at once."""
    return isinstance(kind, str) and kind.endswith("_call")


def _item_role(item: dict[str, Any]) -> str | None:
    """An input item's role. Items the model produced (function_call, reasoning, *_call) have no
    `role` but are its reply, and *_output items are tool results: without these roles an agent
    loop made only of tool calls has no assistant turn to link its history by."""
    role = item.get("role")
    if isinstance(role, str):
        return role
    kind = item.get("type")
    if not isinstance(kind, str):
        return None
    if kind.endswith("_output") or kind == "mcp_approval_response":
        return "tool"
    if kind == "reasoning" or _is_tool_call(kind):
        return "assistant"
    return None


def parse_request(body: Any, url: str = "") -> RequestInfo:
    segments: list[SegmentRaw] = []
    for tool in body.get("tools") or ():
        segments.append(segment("tool", None, tool))
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        segments.append(segment("schema", None, fmt))
    instructions = body.get("instructions")
    if instructions:
        segments.append(segment("system", "system", instructions))
    items = body.get("input")
    if isinstance(items, str):
        segments.append(segment("message", "user", items))
    elif isinstance(items, list):
        for item in items:
            role = _item_role(item) if isinstance(item, dict) else None
            kind = "system" if role in ("system", "developer") else "message"
            segments.append(segment(kind, role, item))
    return RequestInfo(
        model=as_str(body.get("model")),
        stream=bool(body.get("stream")),
        segments=segments,
        cache_ttls=retention_ttls(body),
    )


def normalise_usage(raw: Any, provider: str = "") -> Usage | None:
    return read_usage(raw, USAGE_MAP)


def _output_flags(output: Any) -> tuple[bool, bool]:
    reasoning = text = False
    for item in output if isinstance(output, list) else ():
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "reasoning" and (item.get("summary") or item.get("content")):
            reasoning = True
        elif kind == "message":
            text = text or any(
                isinstance(part, dict) and bool(part.get("text") or part.get("refusal"))
                for part in item.get("content") or ()
            )
        elif _is_tool_call(kind):
            text = True
    return reasoning, text


def web_searches(response: dict[str, Any]) -> int | None:
    """Web search calls billed for a Response: `tool_usage.web_search.num_requests` where the
    API reports it (0 included), else the `web_search_call` items of its output when it has
    any (older Responses report no count; every call is billed per search,
    https://platform.openai.com/docs/pricing, built-in tools), else None (unknown: no fee)."""
    tool_usage = response.get("tool_usage")
    if isinstance(tool_usage, dict):
        search = tool_usage.get("web_search")
        count = search.get("num_requests") if isinstance(search, dict) else None
        if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
            return count
    output = response.get("output")
    calls = sum(
        1
        for item in (output if isinstance(output, list) else ())
        if isinstance(item, dict) and item.get("type") == "web_search_call"
    )
    return calls or None


def _with_searches(usage: Usage | None, response: dict[str, Any]) -> Usage | None:
    if usage is not None:
        usage.web_search_requests = web_searches(response)
    return usage


def _finish(response: dict[str, Any]) -> str | None:
    details = response.get("incomplete_details")
    if isinstance(details, dict) and details.get("reason"):
        return f"incomplete:{details['reason']}"
    return as_str(response.get("status"))


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
    usage = _with_searches(normalise_usage(obj.get("usage")), obj)
    if obj.get("status") == "failed" or (obj.get("error") and "output" not in obj):
        etype, message = error_fields(obj)
        return ResponseInfo("stream_error", usage, error_type=etype, error_message=message)
    reasoning, text = _output_flags(obj.get("output"))
    end = len(body)
    return ResponseInfo(
        outcome="ok",
        usage=usage,
        model=as_str(obj.get("model")),
        finish_reason=_finish(obj),
        first_reasoning_at=end if reasoning else None,
        first_text_at=end if text else None,
    )


def _parse_stream(body: bytes) -> ResponseInfo:
    final: dict[str, Any] | None = None
    terminal: str | None = None
    model: str | None = None
    first_reasoning: int | None = None
    first_text: int | None = None
    error_type: str | None = None
    error_message: str | None = None
    for event in iter_sse(body):
        data = event.data.strip()
        if not data or data == b"[DONE]":
            continue
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            if event.event == "error":
                error_type = "error"
                error_message = cut(data, 200).decode("utf-8", "replace")
            continue
        if not isinstance(obj, dict):
            continue
        kind = as_str(obj.get("type")) or event.event or ""
        response = obj.get("response")
        if isinstance(response, dict):
            model = as_str(response.get("model")) or model
            if kind in _TERMINAL:
                final, terminal = response, kind
        if kind == "error":
            inner = (
                obj["error"]
                if isinstance(obj.get("error"), dict)
                else {k: v for k, v in obj.items() if k != "type"}
            )
            etype, error_message = error_fields({"error": inner})
            error_type = etype or "error"
        elif (
            first_reasoning is None
            and kind.startswith("response.reasoning")
            and (kind.endswith(".delta") and obj.get("delta"))
        ):
            first_reasoning = event.end
        elif first_text is None and (
            (kind in ("response.output_text.delta", "response.refusal.delta") and obj.get("delta"))
            or (
                kind == "response.output_item.added"
                and isinstance(obj.get("item"), dict)
                and _is_tool_call(obj["item"].get("type"))
            )
        ):
            first_text = event.end
    usage = _with_searches(normalise_usage(final.get("usage")), final) if final else None
    if terminal == "response.failed" and error_type is None and final is not None:
        error_type, error_message = error_fields(final)
        error_type = error_type or "failed"
    if error_type is not None:
        outcome = "stream_error"
    elif terminal is None:
        outcome = "interrupted"
    else:
        outcome = "ok"
    return ResponseInfo(
        outcome=outcome,
        usage=usage,
        model=model,
        error_type=error_type,
        error_message=error_message,
        finish_reason=_finish(final) if final is not None else None,
        first_reasoning_at=first_reasoning,
        first_text_at=first_text,
    )
