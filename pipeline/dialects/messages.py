"""Anthropic Messages (`POST /v1/messages`), streamed and not.

Usage (docs/providers.md; https://docs.anthropic.com/en/api/messages): `input_tokens` EXCLUDES the
cache, so the prompt total is input + cache_creation + cache_read. 5-minute and 1-hour writes are
kept apart: `cache_write_tokens` = cache_creation_input_tokens (all lifetimes),
`cache_write_1h_tokens` = `cache_creation.ephemeral_1h_input_tokens`. Reasoning:
`output_tokens_details.thinking_tokens` (already inside output_tokens).

Streams: usage starts from `message_start.message.usage` and every `message_delta.usage` then
overwrites the fields it carries (they are cumulative, so the LAST delta wins; older streams
send only output_tokens there), as the SDK's accumulator does. A stream without
`message_stop` or a final `message_delta` was cut: outcome interrupted, and only the input side
of usage is kept (message_start's output_tokens is a placeholder, so output is NULL).
`event: error` (e.g. overloaded_error on an HTTP 200) makes the outcome stream_error.

Compaction (`usage.iterations[]`): the top-level fields describe only the LAST iteration, while
every iteration is a sampling pass that read its own prompt and is billed. We therefore SUM the
iterations for every column when `iterations` is present (our reading of
Anthropic's compaction docs: "top-level usage does not include the compaction iteration").

Prompt order for segments: tools, then system, then messages: the order Anthropic documents
for its cache prefix ("tools, system, messages"). Each tool, each system block (a string system
is one segment) and each message is one segment. Positions carrying `cache_control` go to
`cache_breakpoints`, with the TTL ("5m" default, or the block's `ttl`) in `cache_ttls`.

The markers themselves are NOT part of a segment's bytes: `cache_control` is dropped from each
tool, system block, message and message content block before hashing. A cache entry is the
content up to a breakpoint, and Anthropic finds an entry written at an earlier breakpoint from a
later request that no longer marks that block (the lookback over earlier block boundaries), so
the documented multi-turn pattern, moving the breakpoint to the newest message every turn, keeps
the history's hashes unchanged (the simulator's tokeniser drops the markers too). A body-level
`cache_control` (automatic caching) is a breakpoint on the last segment, with its TTL, unless
that segment already has one.
"""

from __future__ import annotations

from typing import Any

import orjson

from pipeline.dialects.common import as_str, error_fields, http_error, loads_lenient, segment
from pipeline.dialects.fields import (
    DialectMap,
    first,
    never,
    read_column,
    read_usage,
    src,
    total,
)
from pipeline.records import RequestInfo, ResponseInfo, SegmentRaw, Usage
from pipeline.redact import cut
from pipeline.streams import is_stream_body, iter_sse

API = "messages"

USAGE_MAP = DialectMap(
    api=API,
    title="Anthropic Messages",
    usage_at="`usage` of the Message; streamed: `message_start.message.usage` overwritten "
    "field by field by each cumulative `message_delta.usage` (the last one wins)",
    semantics="anthropic_exclusive",
    columns={
        "input_tokens": total(
            src("input_tokens"),
            src("cache_creation_input_tokens", "zero"),
            src("cache_read_input_tokens", "zero"),
            note="`input_tokens` excludes the cache, so the three are added",
        ),
        "cache_read_tokens": first(src("cache_read_input_tokens")),
        "cache_write_tokens": first(
            src("cache_creation_input_tokens"), note="5-minute and 1-hour writes together"
        ),
        "cache_write_1h_tokens": first(src("cache_creation.ephemeral_1h_input_tokens")),
        "output_tokens": first(src("output_tokens"), note="Includes thinking"),
        "reasoning_tokens": first(src("output_tokens_details.thinking_tokens")),
        "reported_cost": never("Anthropic returns no cost"),
        "web_search_requests": first(
            src("server_tool_use.web_search_requests"),
            note="Billed per search; absent: no count reported (no fee charged)",
        ),
    },
    notes=(
        "Compaction: when `usage.iterations[]` is present every column is the SUM over the "
        "iterations (the top-level fields describe only the last one; each iteration is billed). "
        "Each iteration's whole prompt is kept (largest/smallest_pass_prompt_tokens): a "
        "long-context price tier applies per pass, not to the sum.",
        "A stream cut before its final `message_delta` keeps message_start's input and cache "
        "counts; output_tokens is then NULL (message_start's value is a placeholder).",
        "Segments: tools, then system blocks, then messages; `cache_control` positions are "
        "recorded as cache breakpoints with their TTL, and the markers are left out of the "
        "segment bytes (moving a breakpoint does not change the prompt's hashes). A body-level "
        "`cache_control` (automatic caching) is a breakpoint on the last segment.",
    ),
)


def _ttl(control: Any) -> str | None:
    """The TTL of a `cache_control` value: its `ttl`, "5m" by default; None when not a marker."""
    if isinstance(control, dict):
        ttl = control.get("ttl")
        return ttl if isinstance(ttl, str) else "5m"
    return None


def _unmarked(value: Any) -> tuple[Any, str | None]:
    """(the block without its `cache_control` key, that marker's TTL or None). The block is
    copied only when it carries the key: most blocks do not, and this runs per segment."""
    if isinstance(value, dict) and "cache_control" in value:
        ttl = _ttl(value["cache_control"])
        return {k: v for k, v in value.items() if k != "cache_control"}, ttl
    return value, None


def _unmarked_message(message: Any) -> tuple[Any, str | None]:
    """A message without the markers on it and on its content blocks, and the last marker's
    TTL (one pass finds the TTL and whether anything needs copying)."""
    if not isinstance(message, dict):
        return message, None
    ttl = None
    if "cache_control" in message:
        message, ttl = _unmarked(message)
    content = message.get("content")
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and "cache_control" in block:
                break
        else:
            return message, ttl  # no marked block: nothing to copy (the common case)
        blocks = []
        for block in content:
            if isinstance(block, dict) and "cache_control" in block:
                block, block_ttl = _unmarked(block)
                ttl = block_ttl or ttl
            blocks.append(block)
        message = {**message, "content": blocks}
    return message, ttl


def parse_request(body: Any, url: str = "") -> RequestInfo:
    segments: list[SegmentRaw] = []
    breakpoints: list[int] = []
    ttls: list[str] = []

    def add(kind: str, role: str | None, value: Any, ttl: str | None) -> None:
        if ttl is not None:
            breakpoints.append(len(segments))
            ttls.append(ttl)
        segments.append(segment(kind, role, value))

    for tool in body.get("tools") or ():
        add("tool", None, *_unmarked(tool))
    system = body.get("system")
    if isinstance(system, str) and system:
        add("system", "system", system, None)
    elif isinstance(system, list):
        for block in system:
            add("system", "system", *_unmarked(block))
    for message in body.get("messages") or ():
        role = as_str(message.get("role")) if isinstance(message, dict) else None
        add("message", role, *_unmarked_message(message))
    # Automatic caching: a body-level marker is a breakpoint on the last cacheable segment.
    auto = _ttl(body.get("cache_control"))
    if auto is not None and segments and (not breakpoints or breakpoints[-1] != len(segments) - 1):
        breakpoints.append(len(segments) - 1)
        ttls.append(auto)
    stream = body.get("stream")
    return RequestInfo(
        model=as_str(body.get("model")),
        stream=bool(stream),
        segments=segments,
        cache_breakpoints=breakpoints,
        cache_ttls=ttls,
    )


def _sum_iterations(iterations: list[Any]) -> dict[str, Any]:
    """One usage dict whose counts are the sums over the compaction iterations. A count that
    an iteration does not report (or an iteration that is not an object) leaves the sum
    unknown, left out, never summed as 0: 100 + unknown is not 100."""
    items = [item if isinstance(item, dict) else {} for item in iterations]
    out = _sum_counts(items)
    breakdowns = [item.get("cache_creation") for item in items]
    if any(isinstance(cc, dict) for cc in breakdowns):
        creation = _sum_counts([cc if isinstance(cc, dict) else {} for cc in breakdowns])
        if creation:
            out["cache_creation"] = creation
    return out


def _sum_counts(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Per key, the sum of the whole-number counts over `items`, for the keys every item has."""
    keys = dict.fromkeys(key for item in items for key, value in item.items() if _is_count(value))
    return {
        key: sum(item[key] for item in items)
        for key in keys
        if all(_is_count(item.get(key)) for item in items)
    }


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _pass_prompts(iterations: list[Any]) -> list[int] | None:
    """Each iteration's whole prompt (input + cache writes + cache reads, as for the request),
    or None when one of them is not known: the price tier of a pass depends on its own prompt."""
    prompts: list[int] = []
    for item in iterations:
        if not isinstance(item, dict):
            return None
        # Absent cache counts are 0, as in USAGE_MAP; an absent input count is unknown.
        parts = [
            item.get("input_tokens"),
            item.get("cache_creation_input_tokens", 0),
            item.get("cache_read_input_tokens", 0),
        ]
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in parts):
            return None
        prompts.append(sum(parts))
    return prompts


def normalise_usage(raw: Any, provider: str = "") -> Usage | None:
    if not isinstance(raw, dict):
        return None
    iterations = raw.get("iterations")
    if isinstance(iterations, list) and iterations:
        usage = read_usage(_sum_iterations(iterations), USAGE_MAP)
        if usage is not None:
            usage.raw = raw
            usage.pass_prompt_tokens = _pass_prompts(iterations)
            # server-side searches are counted once, for the whole response, at the top level
            searches = read_column(raw, USAGE_MAP.columns["web_search_requests"])
            usage.web_search_requests = None if searches is None else int(searches)
        return usage
    return read_usage(raw, USAGE_MAP)


def _content_flags(content: Any) -> tuple[bool, bool]:
    reasoning = text = False
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind in ("thinking", "redacted_thinking"):
            reasoning = True
        elif (kind == "text" and block.get("text")) or kind in ("tool_use", "server_tool_use"):
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
    return parse_message_json(body)


def parse_message_json(body: bytes) -> ResponseInfo:
    """A non-streamed Messages body (a Message, or an error envelope on HTTP 200)."""
    obj = loads_lenient(body)
    if not isinstance(obj, dict):
        raise ValueError("response body is not a JSON object")
    if obj.get("type") == "error":
        etype, message = error_fields(obj)
        return ResponseInfo("stream_error", None, error_type=etype, error_message=message)
    reasoning, text = _content_flags(obj.get("content"))
    end = len(body)
    return ResponseInfo(
        outcome="ok",
        usage=normalise_usage(obj.get("usage")),
        model=as_str(obj.get("model")),
        finish_reason=as_str(obj.get("stop_reason")),
        first_reasoning_at=end if reasoning else None,
        first_text_at=end if text else None,
    )


class StreamAccumulator:
    """The state of one Messages stream, fed one decoded event at a time.

    The SSE reader below and Bedrock InvokeModel's binary event stream
    (pipeline.dialects.invoke_model, where each `chunk` carries one of these events base64-encoded)
    both feed it, so the usage rules (message_start, then the LAST cumulative message_delta)
    live in one place. `end` is the byte offset just past the event in the response body.
    """

    __slots__ = (
        "error_message",
        "error_type",
        "errored",
        "final_delta",
        "finish",
        "first_reasoning",
        "first_text",
        "model",
        "stopped",
        "usage",
    )

    def __init__(self) -> None:
        self.usage: dict[str, Any] | None = None
        self.model: str | None = None
        self.finish: str | None = None
        self.final_delta = False
        self.stopped = False
        self.first_reasoning: int | None = None
        self.first_text: int | None = None
        self.error_type: str | None = None
        self.error_message: str | None = None
        self.errored = False

    def feed(self, kind: Any, obj: dict[str, Any], end: int, error_event: bool = False) -> None:
        """One event: `kind` is its `type` (or the SSE event name), `obj` its JSON object;
        `error_event` says the transport itself labelled it an error (SSE `event: error`)."""
        if kind == "message_start":
            message = obj.get("message") or {}
            self.model = as_str(message.get("model")) or self.model
            if isinstance(message.get("usage"), dict):
                self.usage = dict(message["usage"])
        elif kind == "content_block_start":
            block = obj.get("content_block") or {}
            if block.get("type") in ("tool_use", "server_tool_use") and self.first_text is None:
                self.first_text = end
        elif kind == "content_block_delta":
            delta = obj.get("delta") or {}
            dtype = delta.get("type")
            if dtype == "thinking_delta" and delta.get("thinking") and self.first_reasoning is None:
                self.first_reasoning = end
            elif dtype == "text_delta" and delta.get("text") and self.first_text is None:
                self.first_text = end
        elif kind == "message_delta":
            delta_usage = obj.get("usage")
            if isinstance(delta_usage, dict):
                usage = self.usage = self.usage or {}
                written = delta_usage.get("cache_creation_input_tokens")
                if (
                    written is not None
                    and written != usage.get("cache_creation_input_tokens")
                    and "cache_creation" not in delta_usage
                ):
                    # The write total moved without a new 5m/1h breakdown: message_start's
                    # split no longer describes it, so the 1-hour part becomes unknown.
                    usage.pop("cache_creation", None)
                usage.update({k: v for k, v in delta_usage.items() if v is not None})
                self.final_delta = True
            stop = (obj.get("delta") or {}).get("stop_reason")
            self.finish = as_str(stop) or self.finish
        elif kind == "message_stop":
            self.stopped = True
        elif kind == "error" or error_event:
            etype, message = error_fields(obj)
            self.fail(etype or "error", message)

    def fail(self, error_type: str | None, error_message: str | None) -> None:
        self.errored = True
        self.error_type, self.error_message = error_type, error_message

    def result(self) -> ResponseInfo:
        usage = self.usage
        if usage is not None and not self.final_delta:
            usage = {k: v for k, v in usage.items() if k != "output_tokens"}
        if self.errored:
            outcome = "stream_error"
        elif not (self.final_delta or self.stopped):
            outcome = "interrupted"
        else:
            outcome = "ok"
        return ResponseInfo(
            outcome=outcome,
            usage=normalise_usage(usage),
            model=self.model,
            error_type=self.error_type,
            error_message=self.error_message,
            finish_reason=self.finish,
            first_reasoning_at=self.first_reasoning,
            first_text_at=self.first_text,
        )


def _parse_stream(body: bytes) -> ResponseInfo:
    acc = StreamAccumulator()
    for event in iter_sse(body):
        data = event.data.strip()
        if not data:
            continue
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            if event.event == "error":
                acc.fail("error", cut(data, 200).decode("utf-8", "replace"))
            continue
        if not isinstance(obj, dict):
            continue
        acc.feed(obj.get("type") or event.event, obj, event.end, event.event == "error")
    return acc.result()
