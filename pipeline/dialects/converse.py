"""AWS Bedrock Converse (`POST /model/{modelId}/converse`) and ConverseStream
(`/model/{modelId}/converse-stream`).

The model id comes from the URL path, percent-decoded (`us.anthropic...-v1%3A0` -> `...-v1:0`);
Bedrock responses do not name the model.

Usage (docs/providers.md;
https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_TokenUsage.html): `inputTokens`
EXCLUDES `cacheReadInputTokens` and `cacheWriteInputTokens` (observed: totalTokens 1329 = 2 + 5 +
1322), so the prompt total is the sum of the three. Real responses also carry duplicate
`cacheReadInputTokenCount` / `cacheWriteInputTokenCount`; either name is accepted. When a cache
field is absent (no cachePoint in the request, e.g. the Nova stream sample: 13 + 82 = 95) its count
comes from `totalTokens`, which includes the cache (seen in real responses, though the API reference
describes the total as input plus output, so the arithmetic is trusted): total = input + output
means no cache tokens, so reads and writes are 0, not unknown; one absent field is the rest of the
total. Only when both are absent and the total exceeds input + output is the split unknown (NULL),
the prompt total still being input + that rest. usage_semantics says
`bedrock_exclusive_cache_from_total` whenever a count came from the total. Bedrock reports no
reasoning count.

ConverseStream is the binary AWS event stream (pipeline.eventstream): usage is on the final
`metadata` event. No `metadata` event: interrupted, usage NULL. An `exception` message (e.g.
throttlingException, modelStreamErrorException) is a stream_error with that type.
HTTP errors are `{"message": ...}` with the type in the `x-amzn-errortype` header.

Prompt order for segments: tools (`toolConfig.tools`), then `system` blocks, then messages; for
Anthropic models Bedrock renders the Anthropic order (tools, system, messages). A `cachePoint`
block is a marker, not content: it is left out of the segment bytes (a `{"cachePoint": ...}`
entry of `tools` or `system` makes no segment, one inside a message's `content` is dropped from
that message's bytes), and the breakpoint goes to cache_breakpoints at the segment it closes:
the tool or system block before it, or the message that holds it. So moving the cachePoint to
the newest message every turn does not change the history's hashes, as for Anthropic's
`cache_control`. The TTL is the point's `ttl` ("5m" by default).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit

import orjson

from pipeline.dialects.common import as_str, header, http_error, loads_lenient, segment
from pipeline.dialects.fields import DialectMap, attr, first, never, read_usage, src, total
from pipeline.eventstream import iter_eventstream
from pipeline.records import RequestInfo, ResponseInfo, SegmentRaw, Usage
from pipeline.redact import cut

API = "converse"
# The 1-hour part of the cache writes, summed from `cacheDetails` (one entry per TTL written:
# https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_TokenUsage.html).
ONE_HOUR = "cacheDetails[ttl=1h].inputTokens"

USAGE_MAP = DialectMap(
    api=API,
    title="AWS Bedrock Converse / ConverseStream",
    usage_at="`usage` of the body; streamed (binary event stream): the `metadata` event",
    semantics="bedrock_exclusive",
    columns={
        "input_tokens": total(
            src("inputTokens"),
            src("cacheReadInputTokens", "zero"),
            src("cacheWriteInputTokens", "zero"),
            note="`inputTokens` excludes the cache, so the three are added",
        ),
        "cache_read_tokens": first(src("cacheReadInputTokens"), src("cacheReadInputTokenCount")),
        "cache_write_tokens": first(src("cacheWriteInputTokens"), src("cacheWriteInputTokenCount")),
        "cache_write_1h_tokens": first(
            attr(ONE_HOUR),
            note="the `inputTokens` of the `cacheDetails` entries whose `ttl` is `1h`; 0 when the"
            " list has none (it is empty when nothing was written); unknown without the list",
        ),
        "output_tokens": first(src("outputTokens")),
        "reasoning_tokens": never("Not reported"),
        "reported_cost": never("AWS returns no cost"),
    },
    notes=(
        "Model id from the URL path (`/model/{id}/converse`), percent-decoded.",
        "HTTP error type from the `x-amzn-errortype` header; in-stream `exception` messages "
        "are stream_error with the `:exception-type` header as error_type.",
        "An absent cache field comes from `totalTokens`, which includes the cache in "
        "real responses: total = input + output means reads and writes of 0; one absent field "
        "is the rest of the total; both absent with a larger total leaves them unknown and adds "
        "the rest to input_tokens. usage_semantics is then `bedrock_exclusive_cache_from_total`.",
    ),
)


def model_from_url(url: str) -> str | None:
    parts = urlsplit(url).path.split("/")
    if "model" in parts:
        i = parts.index("model")
        if i + 1 < len(parts) and parts[i + 1]:
            return unquote(parts[i + 1])
    return None


def _has_cache_point(value: Any) -> bool:
    if isinstance(value, dict):
        return "cachePoint" in value
    return False


def parse_request(body: Any, url: str = "") -> RequestInfo:
    segments: list[SegmentRaw] = []
    breakpoints: list[int] = []
    ttls: list[str] = []

    def mark(cache_point: Any) -> None:
        """A breakpoint at the last segment so far (the content the point closes)."""
        at = len(segments) - 1
        if at < 0 or (breakpoints and breakpoints[-1] == at):
            return
        breakpoints.append(at)
        ttl = cache_point.get("ttl") if isinstance(cache_point, dict) else None
        ttls.append(ttl if isinstance(ttl, str) else "5m")

    def add_list(kind: str, role: str | None, items: Any) -> None:
        for item in items or ():
            if _has_cache_point(item):
                mark(item["cachePoint"])
            else:
                segments.append(segment(kind, role, item))

    config = body.get("toolConfig")
    add_list("tool", None, config.get("tools") if isinstance(config, dict) else None)
    add_list("system", "system", body.get("system"))
    for message in body.get("messages") or ():
        point = None
        role = None
        if isinstance(message, dict):
            role = as_str(message.get("role"))
            content = message.get("content")
            if isinstance(content, list) and any(map(_has_cache_point, content)):
                # Copied only when it holds a point: the point's bytes are not content.
                for block in content:
                    if _has_cache_point(block):
                        point = block["cachePoint"]
                message = {
                    **message,
                    "content": [b for b in content if not _has_cache_point(b)],
                }
        segments.append(segment("message", role, message))
        if point is not None:
            mark(point)
    return RequestInfo(
        model=model_from_url(url) or as_str(body.get("modelId")),
        stream=urlsplit(url).path.endswith("/converse-stream"),
        segments=segments,
        cache_breakpoints=breakpoints,
        cache_ttls=ttls,
    )


_CACHE_FIELDS = ("cacheReadInputTokens", "cacheWriteInputTokens")
FROM_TOTAL = "bedrock_exclusive_cache_from_total"


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _cache_from_total(view: dict[str, Any]) -> int | None:
    """Fill the cache counts a response left out from its totalTokens, which includes them
    (real responses: 1329 = 2 + 5 + 1322). Returns the cache tokens whose split stays unknown
    (both fields absent, total above input + output), else None."""
    inp, out, tot = (_count(view.get(k)) for k in ("inputTokens", "outputTokens", "totalTokens"))
    missing = [name for name in _CACHE_FIELDS if view.get(name) is None]
    known = [_count(view.get(name)) for name in _CACHE_FIELDS if name not in missing]
    if inp is None or out is None or tot is None or not missing or None in known:
        return None
    rest = tot - inp - out - sum(k for k in known if k is not None)
    if rest == 0:  # no cache tokens at all: reported as 0 by the total, not unknown
        for name in missing:
            view[name] = 0
    elif rest > 0 and len(missing) == 1:
        view[missing[0]] = rest
    elif rest > 0:
        return rest
    return None


def _one_hour_writes(details: Any) -> int | None:
    """Tokens written with the 1-hour TTL: the sum over `cacheDetails` entries of `ttl` 1h, 0
    when there is none; None without the list or with an entry whose count is unreadable."""
    if not isinstance(details, list):
        return None
    entries = [d for d in details if isinstance(d, dict) and d.get("ttl") == "1h"]
    counts = [_count(d.get("inputTokens")) for d in entries]
    return None if None in counts else sum(c for c in counts if c is not None)


def normalise_usage(raw: Any, provider: str = "") -> Usage | None:
    if not isinstance(raw, dict):
        return None
    view = dict(raw)
    aliases = ("cacheReadInputTokenCount", "cacheWriteInputTokenCount")
    for name, alias in zip(_CACHE_FIELDS, aliases, strict=True):
        if view.get(name) is None and raw.get(alias) is not None:
            view[name] = raw[alias]
    view[ONE_HOUR] = _one_hour_writes(raw.get("cacheDetails"))
    absent = [name for name in _CACHE_FIELDS if view.get(name) is None]
    unsplit = _cache_from_total(view)
    filled = absent and any(view.get(name) is not None for name in absent)
    usage = read_usage(view, USAGE_MAP, FROM_TOTAL if filled else None)
    if usage is None:
        return None
    if unsplit is not None and usage.input_tokens is not None:
        # Cache tokens were counted but not said as reads or writes: the prompt total is still
        # known (inputTokens + them); the reads and writes stay unknown.
        usage.input_tokens += unsplit
        usage.semantics = FROM_TOTAL
    usage.raw = raw
    return usage


def amzn_error_type(headers: list[tuple[str, str]] | None) -> str | None:
    """The error type Bedrock puts in `x-amzn-errortype` (InvokeModel shares it)."""
    value = header(headers, "x-amzn-errortype")
    # "ValidationException:http://internal.amazon.com/coral/..." -> "ValidationException"
    return value.split(":", 1)[0] if value else None


def parse_response(
    status: int,
    body: bytes,
    provider: str,
    stream: bool,
    headers: list[tuple[str, str]] | None = None,
) -> ResponseInfo:
    if status >= 400:
        return http_error(body, amzn_error_type(headers))
    if body.lstrip()[:1] == b"{":
        return _parse_json(body)
    return _parse_stream(body)


def _parse_json(body: bytes) -> ResponseInfo:
    obj = loads_lenient(body)
    if not isinstance(obj, dict):
        raise ValueError("response body is not a JSON object")
    output = obj.get("output")
    message = output.get("message") if isinstance(output, dict) else None
    reasoning = text = False
    for block in (message.get("content") if isinstance(message, dict) else None) or ():
        if isinstance(block, dict):
            reasoning = reasoning or "reasoningContent" in block
            text = text or bool(block.get("text")) or "toolUse" in block
    end = len(body)
    return ResponseInfo(
        outcome="ok",
        usage=normalise_usage(obj.get("usage")),
        finish_reason=as_str(obj.get("stopReason")),
        first_reasoning_at=end if reasoning else None,
        first_text_at=end if text else None,
    )


def _parse_stream(body: bytes) -> ResponseInfo:
    usage_raw: Any = None
    finish: str | None = None
    first_reasoning: int | None = None
    first_text: int | None = None
    error_type: str | None = None
    error_message: str | None = None
    for msg in iter_eventstream(body):
        mtype = msg.header(":message-type")
        if mtype in ("exception", "error"):
            error_type = msg.header(":exception-type") or msg.header(":error-code") or mtype
            error_message = msg.header(":error-message") or cut(msg.payload, 200).decode(
                "utf-8", "replace"
            )
            continue
        event = msg.header(":event-type")
        try:
            payload = orjson.loads(msg.payload) if msg.payload else {}
        except orjson.JSONDecodeError:
            continue
        if not isinstance(payload, dict):
            continue
        if event == "metadata":
            usage_raw = payload.get("usage")
        elif event == "messageStop":
            finish = as_str(payload.get("stopReason"))
        elif event == "contentBlockDelta":
            delta = payload.get("delta") or {}
            if delta.get("text") and first_text is None:
                first_text = msg.end
            reasoning = delta.get("reasoningContent")
            if isinstance(reasoning, dict) and reasoning.get("text") and first_reasoning is None:
                first_reasoning = msg.end
        elif event == "contentBlockStart":
            start = payload.get("start") or {}
            if "toolUse" in start and first_text is None:
                first_text = msg.end
    usage = normalise_usage(usage_raw)
    if error_type is not None:
        outcome = "stream_error"
    elif usage is None:
        outcome = "interrupted"
    else:
        outcome = "ok"
    return ResponseInfo(
        outcome=outcome,
        usage=usage,
        error_type=error_type,
        error_message=error_message,
        finish_reason=finish,
        first_reasoning_at=first_reasoning,
        first_text_at=first_text,
    )
