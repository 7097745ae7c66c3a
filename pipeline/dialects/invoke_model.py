"""AWS Bedrock InvokeModel (`POST /model/{modelId}/invoke`) and InvokeModelWithResponseStream
(`/model/{modelId}/invoke-with-response-stream`) carrying an Anthropic Messages body.

Request: the Messages body with `"anthropic_version": "bedrock-2023-05-31"` and no `model` or
`stream` field; the Anthropic SDK's Bedrock client pops both and puts the model in the path,
quoted with `safe=":"` (so `:` may arrive raw), while boto3 and others send `%3A`
(anthropic-sdk-python src/anthropic/lib/bedrock/_client.py `_prepare_options`). The model id is
therefore percent-decoded from the path, and streaming is told by the path. Segments, cache
breakpoints and TTLs are exactly the Messages dialect's (tools, system, messages).

Non-streamed response: an Anthropic Message, read by the Messages dialect (`input_tokens`
EXCLUDES the cache; cache_read_input_tokens, cache_creation_input_tokens and the
cache_creation.ephemeral_5m/1h split).

Streamed response: the binary AWS event stream (pipeline.eventstream). Each `:event-type: chunk`
message's payload is a PayloadPart `{"bytes": "<base64>"}` whose decoded bytes are ONE Anthropic
stream event JSON (anthropic-sdk-python lib/bedrock/_stream_decoder.py decodes `chunk.bytes` into
the SSE data of one event). Those events feed the Messages stream accumulator, so usage is
message_start's, overwritten by the LAST cumulative message_delta, as for api.anthropic.com
(direct Bedrock streams carry message_delta.usage with input and cache counts: maximhq/bifrost
issue #5629).

The final event (message_stop) also carries `amazon-bedrock-invocationMetrics`:
inputTokenCount, outputTokenCount, invocationLatency, firstByteLatency and, with prompt caching,
cacheReadInputTokenCount / cacheWriteInputTokenCount (fixtures in discourse-ai and other
clients; BerriAI/litellm issue #34373). inputTokenCount EXCLUDES cache reads and writes
(BerriAI/litellm PR #36878), the same semantics as Anthropic's input_tokens. Every fixture found
has the metrics INSIDE the decoded event JSON; a wrapper payload holding them beside `bytes` is
unconfirmed, so both places are read. WHICH WINS: the Anthropic usage of the decoded events
always wins; the invocation metrics are used only when no event carried usage at all (e.g. a
gateway that strips it, or a non-Anthropic model), and then raw_usage holds the metrics object.
Likewise a non-streamed body without `usage` falls back to the `x-amzn-bedrock-input-token-count`
/ `-output-token-count` / `-cache-read-input-token-count` / `-cache-write-input-token-count`
response headers.

A stream cut before any usage has usage NULL and outcome interrupted; cut after message_start it
keeps message_start's input and cache counts with output NULL, as the Messages dialect does.
An `:message-type: exception` (or `error`) message is a stream_error whose error_type is the
`:exception-type` header (throttlingException, modelStreamErrorException, ...); the Anthropic
SDK turns such non-200 event messages into an error event too (_stream_decoder.py). HTTP errors
are `{"message": ...}` with the type in the `x-amzn-errortype` header, as for Converse.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

import orjson

from pipeline.dialects import messages
from pipeline.dialects.common import header, http_error
from pipeline.dialects.converse import amzn_error_type, model_from_url
from pipeline.eventstream import iter_eventstream
from pipeline.records import RequestInfo, ResponseInfo, Usage
from pipeline.redact import cut

API = "invoke_model"

METRICS_KEY = "amazon-bedrock-invocationMetrics"

USAGE_MAP = replace(
    messages.USAGE_MAP,
    api=API,
    title="AWS Bedrock InvokeModel / InvokeModelWithResponseStream (Anthropic Messages body)",
    usage_at="`usage` of the Message; streamed (binary event stream, each `chunk` a base64 "
    "Anthropic event): `message_start.message.usage` overwritten by the last cumulative "
    "`message_delta.usage`; only when no event carried usage, the final event's "
    "`amazon-bedrock-invocationMetrics` (inputTokenCount as `input_tokens`, outputTokenCount as "
    "`output_tokens`, cacheReadInputTokenCount as `cache_read_input_tokens`, "
    "cacheWriteInputTokenCount as `cache_creation_input_tokens`); a non-streamed body without "
    "usage falls back to the same counts in the `x-amzn-bedrock-*-token-count` headers",
    notes=(
        "Model id from the URL path (`/model/{id}/invoke`), percent-decoded; the response's "
        "own model name (message_start / Message) fills `model` when present.",
        "HTTP error type from the `x-amzn-errortype` header; in-stream `exception` messages "
        "are stream_error with the `:exception-type` header as error_type.",
        *messages.USAGE_MAP.notes,
    ),
)

# invocationMetrics name -> the Anthropic usage name it is read as (both exclude the cache).
_METRIC_NAMES = (
    ("inputTokenCount", "input_tokens"),
    ("outputTokenCount", "output_tokens"),
    ("cacheReadInputTokenCount", "cache_read_input_tokens"),
    ("cacheWriteInputTokenCount", "cache_creation_input_tokens"),
)

# Non-streamed InvokeModel: the same counts as response headers.
_HEADER_NAMES = (
    ("inputTokenCount", "x-amzn-bedrock-input-token-count"),
    ("outputTokenCount", "x-amzn-bedrock-output-token-count"),
    ("cacheReadInputTokenCount", "x-amzn-bedrock-cache-read-input-token-count"),
    ("cacheWriteInputTokenCount", "x-amzn-bedrock-cache-write-input-token-count"),
)


def is_stream_path(url: str) -> bool:
    return urlsplit(url).path.rstrip("/").endswith("/invoke-with-response-stream")


def parse_request(body: Any, url: str = "") -> RequestInfo:
    info = messages.parse_request(body, url)
    info.model = model_from_url(url) or info.model
    info.stream = is_stream_path(url)
    return info


def usage_from_metrics(metrics: Any) -> Usage | None:
    """Usage from `amazon-bedrock-invocationMetrics`, read with the Anthropic mapping."""
    if not isinstance(metrics, dict):
        return None
    view = {name: metrics[key] for key, name in _METRIC_NAMES if metrics.get(key) is not None}
    if not view:
        return None
    usage = messages.normalise_usage(view)
    if usage is not None:
        usage.raw = metrics
    return usage


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
        info = messages.parse_message_json(body)
        if info.usage is None and info.outcome == "ok":
            # Body without usage (a non-Anthropic model, or a gateway that dropped it): the
            # counts InvokeModel also sends as headers, with the invocation metrics' meaning.
            info.usage = usage_from_headers(headers)
        return info
    return _parse_stream(body)


def usage_from_headers(headers: list[tuple[str, str]] | None) -> Usage | None:
    """Usage from the `x-amzn-bedrock-*-token-count` headers of a non-streamed InvokeModel
    response (read by AWS SDK instrumentations such as dd-trace-js and OpenLLMetry; the input
    count excludes the cache as inputTokenCount does). The body's own usage wins over them."""
    metrics: dict[str, int] = {}
    for key, name in _HEADER_NAMES:
        value = header(headers, name)
        if value is not None and value.strip().isdigit():
            metrics[key] = int(value)
    return usage_from_metrics(metrics)


def _decode_chunk(payload: Any) -> tuple[Any, Any]:
    """(the Anthropic event object or None, invocation metrics found beside `bytes` or None)."""
    if not isinstance(payload, dict):
        return None, None
    inner = payload.get("chunk")
    part: dict[str, Any] = inner if isinstance(inner, dict) else payload
    encoded = part.get("bytes")
    if not isinstance(encoded, str):
        return None, part.get(METRICS_KEY)
    try:
        event = orjson.loads(base64.b64decode(encoded))
    except (binascii.Error, orjson.JSONDecodeError):
        return None, part.get(METRICS_KEY)
    return event, part.get(METRICS_KEY)


def _parse_stream(body: bytes) -> ResponseInfo:
    acc = messages.StreamAccumulator()
    metrics: Any = None
    for msg in iter_eventstream(body):
        mtype = msg.header(":message-type")
        if mtype in ("exception", "error"):
            message = msg.header(":error-message")
            try:
                payload = orjson.loads(msg.payload) if msg.payload else None
            except orjson.JSONDecodeError:
                payload = None
            if message is None and isinstance(payload, dict):
                text = payload.get("message") or payload.get("Message")
                message = text if isinstance(text, str) else None
            if message is None:
                message = cut(msg.payload, 200).decode("utf-8", "replace")
            acc.fail(msg.header(":exception-type") or msg.header(":error-code") or mtype, message)
            continue
        try:
            payload = orjson.loads(msg.payload) if msg.payload else None
        except orjson.JSONDecodeError:
            continue
        event, outer_metrics = _decode_chunk(payload)
        if isinstance(event, dict):
            metrics = event.get(METRICS_KEY) or outer_metrics or metrics
            acc.feed(event.get("type"), event, msg.end)
        elif outer_metrics is not None:
            metrics = outer_metrics
    info = acc.result()
    if info.usage is None and metrics is not None:
        # No decoded event carried usage: fall back to the invocation metrics (see module doc).
        info.usage = usage_from_metrics(metrics)
        if info.outcome == "interrupted" and info.usage is not None:
            # The metrics arrive only on the last event, so the stream did finish.
            info.outcome = "ok"
    return info
