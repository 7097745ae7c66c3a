"""OpenTelemetry GenAI spans -> `requests` rows (the third input format, after capture JSONL and
HAR). `pipeline.sources.otlp` reads the OTLP/JSON file and puts each span in `Exchange.span`.

Attribute names (https://opentelemetry.io/docs/specs/semconv/registry/attributes/gen-ai/): the
current GenAI conventions first, then the older or vendor names where they differ.
`gen_ai.usage.input_tokens` SHOULD include cached tokens; instrumentations that copied Anthropic's
or Bedrock's exclusive `input_tokens` break that rule, and the break is visible when cache read +
write exceed the input count: then the cache counts are added to it (usage_semantics
`otel_exclusive_fixed`). When the counts do not betray it the spec's inclusive reading is taken
(both shapes accepted as far as they can be told apart). A negative attribute value is not a count:
its column is NULL before that test (fields.py), so a negative input never makes a span look
exclusive.

Spans carry usage and timing but normally NO prompt bytes: unless the instrumentation captured
content (`gen_ai.input.messages`, `gen_ai.system_instructions`, `gen_ai.tool.definitions`, or
the older `gen_ai.prompt.N.*` attributes), a span's row has no segments, so cache-break analysis
(prefix hashes) is not possible for it. Captured content is the instrumentation's own JSON, not
the bytes sent to the provider, so its hashes never match those of HTTP captures.

Outcome: span status ERROR is http_error, or stream_error when the span also reports an HTTP
status below 400; the error type comes from `error.type`. Time to first token comes from
`gen_ai.response.time_to_first_chunk` (seconds) when present.
"""

from __future__ import annotations

import math
from typing import Any

import orjson

from pipeline import providers
from pipeline.dialects.common import segment
from pipeline.dialects.fields import DialectMap, attr, first, never, read_usage
from pipeline.normalise import Normalised, Skip, build
from pipeline.records import Exchange, RequestInfo, ResponseInfo, SegmentRaw, Usage

API = "otel"

USAGE_MAP = DialectMap(
    api=API,
    title="OpenTelemetry GenAI spans (OTLP/JSON)",
    usage_at="span attributes `gen_ai.usage.*`",
    semantics="otel_genai",
    columns={
        "input_tokens": first(
            attr("gen_ai.usage.input_tokens"),
            attr("gen_ai.usage.prompt_tokens"),
            note="Inclusive of cache per the spec; if read + write exceed it, the emitter used "
            "an exclusive count and they are added",
        ),
        "cache_read_tokens": first(
            attr("gen_ai.usage.cache_read.input_tokens"),
            attr("gen_ai.usage.cache_read_input_tokens"),
            attr("gen_ai.usage.input_tokens.cached"),
        ),
        "cache_write_tokens": first(
            attr("gen_ai.usage.cache_creation.input_tokens"),
            attr("gen_ai.usage.cache_creation_input_tokens"),
            attr("gen_ai.usage.input_tokens.cache_write"),
        ),
        "cache_write_1h_tokens": never("No TTL split in the conventions"),
        "output_tokens": first(
            attr("gen_ai.usage.output_tokens"), attr("gen_ai.usage.completion_tokens")
        ),
        "reasoning_tokens": first(
            attr("gen_ai.usage.reasoning.output_tokens"),
            attr("gen_ai.usage.output_tokens.reasoning"),
        ),
        "reported_cost": never("Not in the GenAI conventions"),
    },
    notes=(
        "Spans carry no prompt bytes unless content capture was on, so their rows usually "
        "have usage and timing but no segments (no prefix-hash / cache-break analysis).",
        "provider = the provider of `server.address` when it is a known API host (an OpenAI "
        "client pointed at api.deepseek.com is deepseek), else `gen_ai.provider.name` (older: "
        "`gen_ai.system`) lower-cased, with gcp.* -> google, aws.bedrock -> bedrock, "
        "azure.ai.openai -> azure_openai; model = `gen_ai.response.model`, else "
        "`gen_ai.request.model`.",
        "stream = `gen_ai.request.stream` or `llm.is_streaming`; NULL when the span says "
        "neither. A span whose `startTimeUnixNano` is missing, 0 or not an unsigned 64-bit "
        "integer after 2000 (negative, a bool, a fraction, milliseconds) is a reject; "
        "started_at is that time truncated to "
        "the microsecond, like the times of capture JSONL and HAR.",
        "Skipped (counted as skipped, not rows): spans without GenAI attributes, and GenAI "
        "spans that are not one model call (`gen_ai.operation.name` invoke_agent, "
        "create_agent, invoke_workflow, execute_tool): an agent span sums the chat spans under "
        "it. OpenInference (`llm.token_count.*`) and OpenLLMetry `llm.usage.*` spans are "
        "skipped too: instrumentations nest them around the GenAI span of the same call, and "
        "counting both would count the call twice.",
    ),
)

_PROVIDERS = {
    "gcp.gemini": "google",
    "gcp.vertex_ai": "google",
    "gcp.gen_ai": "google",
    "gemini": "google",
    "vertex_ai": "google",
    "aws.bedrock": "bedrock",
    "azure.ai.openai": "azure_openai",
    "az.ai.openai": "azure_openai",
}
_USAGE_PREFIX = "gen_ai.usage."


def _str(attrs: dict[str, Any], *names: str) -> str | None:
    for name in names:
        value = attrs.get(name)
        if isinstance(value, str) and value:
            return value
        if isinstance(value, list) and value and isinstance(value[0], str):
            return value[0]
    return None


def _json_items(value: Any) -> list[Any]:
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            return [value]
    if isinstance(value, list):
        return value
    return [value] if value is not None else []


def _segments(attrs: dict[str, Any]) -> list[SegmentRaw]:
    out: list[SegmentRaw] = []
    for tool in _json_items(attrs.get("gen_ai.tool.definitions")):
        out.append(segment("tool", None, tool))
    system = attrs.get("gen_ai.system_instructions")
    if system is not None:
        out.append(segment("system", "system", _json_items(system)))
    for message in _json_items(attrs.get("gen_ai.input.messages")):
        role = message.get("role") if isinstance(message, dict) else None
        kind = "system" if role == "system" else "message"
        out.append(segment(kind, role if isinstance(role, str) else None, message))
    if out:
        return out
    # Older conventions (OpenLLMetry): gen_ai.prompt.<i>.role / .content
    indexed: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        if key.startswith("gen_ai.prompt."):
            number, _, field = key[len("gen_ai.prompt.") :].partition(".")
            if number.isdigit() and field:
                indexed.setdefault(int(number), {})[field] = value
    for position in sorted(indexed):
        message = indexed[position]
        role = message.get("role")
        kind = "system" if role == "system" else "message"
        out.append(segment(kind, role if isinstance(role, str) else None, message))
    return out


def span_usage(attrs: dict[str, Any]) -> Usage | None:
    raw = {k: v for k, v in attrs.items() if k.startswith(_USAGE_PREFIX)}
    usage = read_usage(raw, USAGE_MAP) if raw else None
    if usage is None or usage.input_tokens is None:
        return usage
    cached = (usage.cache_read_tokens or 0) + (usage.cache_write_tokens or 0)
    if cached > usage.input_tokens:
        usage.input_tokens += cached
        usage.semantics = "otel_exclusive_fixed"
    elif cached and _provider(attrs) in _EXCLUSIVE_PROVIDERS:
        # The current conventions say input_tokens includes cache, but older Anthropic/Bedrock
        # instrumentations copied the provider's exclusive count. When cache <= input we cannot
        # tell the two apart, so the row says it rests on the convention.
        usage.semantics = "otel_inclusive_assumed"
    return usage


_EXCLUSIVE_PROVIDERS = frozenset({"anthropic", "aws.bedrock", "bedrock"})


def _provider(attrs: dict[str, Any]) -> str:
    """The span's own provider name, lower-cased (OpenLLMetry writes "OpenAI", "Anthropic")."""
    return (_str(attrs, "gen_ai.provider.name", "gen_ai.system") or "").lower()


def _provider_column(attrs: dict[str, Any]) -> str:
    """The provider column: the builtin provider of `server.address` when it is a known API host
    (the openai-v2 instrumentation says `openai` for a client pointed at api.deepseek.com),
    else the span's provider name (`_provider`) mapped to the names the other sources use."""
    host = attrs.get("server.address")
    if isinstance(host, str) and host:
        known = providers.builtin_provider(host)
        if known is not None:
            return known
    name = _provider(attrs) or "unknown"
    return _PROVIDERS.get(name, name)


def _stream(attrs: dict[str, Any]) -> bool | None:
    """Whether the call streamed: `gen_ai.request.stream`, or OpenLLMetry's `llm.is_streaming`;
    None (unknown) when the span says neither."""
    for name in ("gen_ai.request.stream", "llm.is_streaming"):
        value = attrs.get(name)
        if isinstance(value, bool):
            return value
    return None


# GenAI operations that are not one model call: an agent or workflow span sums the usage of
# the chat spans under it, a tool span calls no model. Counting them would count those calls
# twice (gen_ai.operation.name values of the GenAI conventions).
_NOT_MODEL_CALLS = frozenset({"invoke_agent", "create_agent", "invoke_workflow", "execute_tool"})


def _is_genai(attrs: dict[str, Any]) -> bool:
    if attrs.get("gen_ai.operation.name") in _NOT_MODEL_CALLS:
        return False
    return any(
        key in attrs
        for key in (
            "gen_ai.operation.name",
            "gen_ai.provider.name",
            "gen_ai.system",
            "gen_ai.request.model",
        )
    ) or any(key.startswith(_USAGE_PREFIX) for key in attrs)


def normalise_span(exchange: Exchange, request_id: str) -> Normalised:
    span = exchange.span or {}
    attrs: dict[str, Any] = span.get("attributes") or {}
    if not _is_genai(attrs):
        raise Skip
    provider = _provider_column(attrs)
    usage = span_usage(attrs)
    outcome = "ok"
    error_type: str | None = None
    if span.get("status_code") == 2:
        http = exchange.status
        outcome = "stream_error" if http is not None and http < 400 else "http_error"
        error_type = _str(attrs, "error.type") or "error"
    stream = _stream(attrs)
    request = RequestInfo(
        model=_str(attrs, "gen_ai.request.model"),
        stream=stream,
        segments=_segments(attrs),
    )
    response = ResponseInfo(
        outcome=outcome,
        usage=usage,
        model=_str(attrs, "gen_ai.response.model"),
        error_type=error_type,
        error_message=span.get("status_message") or None,
        finish_reason=_str(attrs, "gen_ai.response.finish_reasons"),
    )
    return build(
        exchange, request_id, provider, API, request, response, stream,
        (None, _ttft_ms(attrs.get("gen_ai.response.time_to_first_chunk"), exchange.end_ms)),
    )  # fmt: skip


def _ttft_ms(seconds: Any, duration_ms: float | None) -> float | None:
    """gen_ai.response.time_to_first_chunk (seconds) in ms; unknown (None) when it is no time
    this span can have had: not a number, negative, not finite, or after the span ended."""
    if not isinstance(seconds, int | float) or isinstance(seconds, bool):
        return None
    ms = float(seconds) * 1000.0
    if not math.isfinite(ms) or ms < 0 or (duration_ms is not None and ms > duration_ms):
        return None
    return ms
