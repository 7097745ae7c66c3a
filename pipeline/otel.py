"""OpenTelemetry LLM spans -> `requests` rows (the third input format, after capture JSONL and
HAR). `pipeline.sources.otlp` reads the OTLP/JSON file and puts each span in `Exchange.span`.
Two families of attribute names are read, one per span (counts are never mixed across them):

1. OpenTelemetry GenAI (`gen_ai.*`, rulebook section 10): the current names first, then the
   older or vendor names where they differ. OpenLLMetry (Traceloop) spans belong here: they mix
   `gen_ai.*` with its own `llm.usage.*` names, and its oldest releases used only `llm.*`
   (`llm.vendor`, `llm.request.model`, `llm.usage.prompt_tokens`, `llm.prompts.N.*`:
   traceloop/openllmetry packages/opentelemetry-semantic-conventions-ai, `SpanAttributes`);
   `llm.usage.cache_read_input_tokens` is OpenAI's `cached_tokens`, a part of the prompt count
   (its OpenAI instrumentation docs), and its Anthropic instrumentation adds the cache reads and
   writes into the input count (opentelemetry-instrumentation-anthropic `_set_token_usage`:
   `input_tokens = prompt_tokens + cache_read_tokens + cache_creation_tokens`).
2. OpenInference (Arize Phoenix, LlamaIndex, openinference-instrumentation-*): a span whose
   `openinference.span.kind` is `LLM`; every other kind (CHAIN, TOOL, AGENT, RETRIEVER,
   EMBEDDING, ...) is skipped, whatever else it carries (an AGENT span's counts are its LLM
   children's again). Usage is `llm.token_count.*`, read in preference to any `gen_ai.usage.*`
   a translating span processor added beside it.

Input counts. `gen_ai.usage.input_tokens` SHOULD include cached tokens; instrumentations that
copied Anthropic's or Bedrock's exclusive `input_tokens` break that rule, and the break is visible
when cache read + write exceed the input count: then the cache counts are added to it
(usage_semantics `otel_exclusive_fixed`). When the counts do not betray it the spec's inclusive
reading is taken (both shapes accepted as far as they can be told apart).

OpenInference says the same of `llm.token_count.prompt` (Arize-ai/openinference
spec/semantic_conventions.md, "Token Count Details": the `prompt_details.*` counts "are already
included in it", and instrumentations of providers with an exclusive count "should fold the cache
read/write tokens back into `llm.token_count.prompt` (and `llm.token_count.total`)"). Its
instrumentors do, with exceptions found in their source:
- openai: prompt = `usage.prompt_tokens` (cached included by OpenAI), cache_read =
  `prompt_tokens_details.cached_tokens`, total = `total_tokens`
  (openinference-instrumentation-openai `_response_attributes_extractor.py`,
  `_get_attributes_from_completion_usage`).
- anthropic: up to 0.1.13 prompt = `usage.input_tokens` alone (exclusive) and no cache counts;
  0.1.14 (2025-03-25, #1429 "include cache tokens in prompt tokens for anthropic") prompt =
  input + cache_creation + cache_read, and 0.1.15 (#1465) added `prompt_details.cache_read` /
  `cache_write` (`_wrappers.py` `_get_llm_token_counts`; CHANGELOG.md). So a span with cache
  counts has an inclusive prompt. The streaming path took message_start's `input_tokens` alone
  (`_stream.py` at 0.1.7, commit 4dd0bba) and got cache counts only in 1.1.1 (2026-08-04,
  #3488): a streamed span without them whose prompt was exclusive cannot be told (its cache
  columns are NULL, unknown, and its input may be short by the cache).
- bedrock: the Converse path writes prompt = `inputTokens`, which EXCLUDES the cache, with the
  cache counts as details and total = `totalTokens`, which includes it (`_converse_attributes.py`
  `get_token_counts`; rulebook section 7); the InvokeModel Anthropic path at one version wrote
  `input_tokens or 0 + cache...`, i.e. the exclusive `input_tokens` whenever it is not 0
  (`utils/anthropic/_attributes.py` `_get_llm_token_counts`, later fixed to the sum).
So an OpenInference prompt is inclusive unless the counts say otherwise: cache read + write above
the prompt, or `llm.token_count.total` equal to prompt + cache + completion (and not to prompt +
completion): then the cache counts are added (usage_semantics `openinference_exclusive_fixed`). A
total equal to prompt + completion confirms the inclusive reading (`openinference`); without a
deciding total, an Anthropic or Bedrock span with cache counts is `openinference_inclusive_assumed`.
A negative attribute value is not a count: its column is NULL before these tests (fields.py), so
a negative input never makes a span look exclusive.

Spans carry usage and timing but normally NO prompt bytes: unless the instrumentation captured
content (`gen_ai.input.messages`, `gen_ai.system_instructions`, `gen_ai.tool.definitions`, the
older `gen_ai.prompt.N.*` / `llm.prompts.N.*` with OpenLLMetry's `llm.request.functions.N.*`
tools, or OpenInference's `llm.input_messages.N.message.*` with `llm.tools.N.tool.*`), a span's
row has no segments, so cache-break analysis (prefix hashes) is not possible for it. Captured
content is the instrumentation's own JSON, not the bytes sent to the provider, so its hashes never
match those of HTTP captures.

Outcome: span status ERROR is http_error, or stream_error when the span also reports an HTTP
status below 400; the error type comes from `error.type`. Time to first token comes from
`gen_ai.response.time_to_first_chunk` (seconds) when present.
"""

from __future__ import annotations

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
    title="OpenTelemetry LLM spans: GenAI, OpenLLMetry, OpenInference (OTLP/JSON)",
    usage_at="span attributes `gen_ai.usage.*` and OpenLLMetry's `llm.usage.*`; on an "
    "OpenInference LLM span (`openinference.span.kind` = `LLM`), `llm.token_count.*` instead",
    semantics="otel_genai",
    columns={
        "input_tokens": first(
            attr("gen_ai.usage.input_tokens"),
            attr("gen_ai.usage.prompt_tokens"),
            attr("llm.usage.prompt_tokens"),
            attr("llm.token_count.prompt"),
            note="Inclusive of cache per both conventions; if read + write exceed it (or, "
            "OpenInference, `llm.token_count.total` = prompt + cache + completion), the emitter "
            "used an exclusive count and they are added",
        ),
        "cache_read_tokens": first(
            attr("gen_ai.usage.cache_read.input_tokens"),
            attr("gen_ai.usage.cache_read_input_tokens"),
            attr("gen_ai.usage.input_tokens.cached"),
            attr("llm.usage.cache_read_input_tokens"),
            attr("llm.token_count.prompt_details.cache_read"),
        ),
        "cache_write_tokens": first(
            attr("gen_ai.usage.cache_creation.input_tokens"),
            attr("gen_ai.usage.cache_creation_input_tokens"),
            attr("gen_ai.usage.input_tokens.cache_write"),
            # a deprecated alias Strands Agents writes (an OpenInference span-processor test)
            attr("gen_ai.usage.cache_write_input_tokens"),
            attr("llm.usage.cache_creation_input_tokens"),
            attr("llm.token_count.prompt_details.cache_write"),
        ),
        "cache_write_1h_tokens": never("No TTL split in the conventions"),
        "output_tokens": first(
            attr("gen_ai.usage.output_tokens"),
            attr("gen_ai.usage.completion_tokens"),
            attr("llm.usage.completion_tokens"),
            attr("llm.token_count.completion"),
        ),
        "reasoning_tokens": first(
            attr("gen_ai.usage.reasoning.output_tokens"),
            attr("gen_ai.usage.output_tokens.reasoning"),
            attr("llm.usage.reasoning_tokens"),
            attr("llm.token_count.completion_details.reasoning"),
        ),
        "reported_cost": never(
            "Not in the GenAI conventions; OpenInference's `llm.cost.*` is priced by the "
            "tracing side, not returned by the provider"
        ),
    },
    notes=(
        "One family per span: an OpenInference LLM span with `llm.token_count.*` is read from "
        "those alone (usage_semantics `openinference`, `openinference_exclusive_fixed` or "
        "`openinference_inclusive_assumed`); any other span from `gen_ai.usage.*` and "
        "`llm.usage.*` (`otel_genai`, `otel_exclusive_fixed` or `otel_inclusive_assumed`). "
        "Other OpenInference span kinds (CHAIN, TOOL, AGENT, RETRIEVER, EMBEDDING, ...) are "
        "skipped. The `_assumed` labels mark Anthropic and Bedrock spans whose counts cannot "
        "tell an inclusive input from an exclusive one (instrumentations of both kinds exist).",
        "Spans carry no prompt bytes unless content capture was on, so their rows usually "
        "have usage and timing but no segments (no prefix-hash / cache-break analysis).",
        "provider = the provider of `server.address` when it is a known API host (an OpenAI "
        "client pointed at api.deepseek.com is deepseek), else `gen_ai.provider.name` (older: "
        "`gen_ai.system`; OpenInference: `llm.provider`, the host, then `llm.system`; oldest "
        "OpenLLMetry: `llm.vendor`) lower-cased, with gcp.*, vertexai -> google, aws.bedrock, "
        "aws, amazon -> bedrock, azure.ai.openai, azure -> azure_openai, zai -> zhipu; model = "
        "`gen_ai.response.model` (OpenLLMetry `llm.response.model`, OpenInference "
        "`llm.response.model_name`, else `llm.model_name`), else the requested model: "
        "`gen_ai.request.model` (`llm.request.model`, `llm.request.model_name`, else `model` of "
        "`llm.invocation_parameters`). session_id = `session.id`, else `gen_ai.conversation.id`.",
        "stream = `gen_ai.request.stream`, `llm.is_streaming` or `stream` of "
        "`llm.invocation_parameters`; NULL when the span says none of them. A span whose "
        "`startTimeUnixNano` is missing, 0 or not an unsigned 64-bit "
        "integer after 2000 (negative, a bool, a fraction, milliseconds) is a reject; "
        "started_at is that time truncated to "
        "the microsecond, like the times of capture JSONL and HAR.",
    ),
)

_PROVIDERS = {
    "gcp.gemini": "google",
    "gcp.vertex_ai": "google",
    "gcp.gen_ai": "google",
    "gemini": "google",
    "vertex_ai": "google",
    "vertexai": "google",  # OpenInference llm.system
    "aws.bedrock": "bedrock",
    "aws": "bedrock",  # OpenInference llm.provider; OpenLLMetry's old gen_ai.system "AWS"
    "amazon": "bedrock",  # OpenInference llm.system: Amazon Bedrock native models
    "azure.ai.openai": "azure_openai",
    "az.ai.openai": "azure_openai",
    "azure": "azure_openai",  # OpenInference llm.provider; OpenLLMetry's old "Azure"
    "zai": "zhipu",  # OpenInference llm.provider (Z.ai GLM)
}
# Usage attribute prefixes of the two families (see the module docstring).
_GENAI_USAGE = ("gen_ai.usage.", "llm.usage.")
_OPENINFERENCE_USAGE = "llm.token_count."
_OPENINFERENCE_KIND = "openinference.span.kind"


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


def _json_value(value: Any) -> Any:
    """A JSON-string attribute parsed, or the value as it is when it is not JSON."""
    if isinstance(value, str):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value


def _indexed(attrs: dict[str, Any], prefix: str, strip: str = "") -> list[dict[str, Any]]:
    """Flattened list attributes `<prefix><i>.<field>` as one dict per index, in index order,
    with `strip` taken off the front of each field (OpenInference repeats `message.`)."""
    indexed: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        if key.startswith(prefix):
            number, _, field = key[len(prefix) :].partition(".")
            if number.isdigit() and field:
                indexed.setdefault(int(number), {})[field.removeprefix(strip)] = value
    return [indexed[i] for i in sorted(indexed)]


def _message_segments(messages: list[dict[str, Any]]) -> list[SegmentRaw]:
    out: list[SegmentRaw] = []
    for message in messages:
        role = message.get("role")
        kind = "system" if role == "system" else "message"
        out.append(segment(kind, role if isinstance(role, str) else None, message))
    return out


def _openinference_tools(attrs: dict[str, Any]) -> list[SegmentRaw]:
    """OpenInference `llm.tools.N.tool.json_schema`: the provider's own tool object as JSON (some
    SDKs add `tool.name` / `tool.description` beside it, kept with it)."""
    out: list[SegmentRaw] = []
    for tool in _indexed(attrs, "llm.tools.", strip="tool."):
        if "json_schema" in tool:
            tool["json_schema"] = _json_value(tool["json_schema"])
        value = tool["json_schema"] if list(tool) == ["json_schema"] else tool
        out.append(segment("tool", None, value))
    return out


def _openllmetry_functions(attrs: dict[str, Any]) -> list[SegmentRaw]:
    """OpenLLMetry's `llm.request.functions.N.name / .description / .parameters`."""
    return [segment("tool", None, f) for f in _indexed(attrs, "llm.request.functions.")]


def _no_tools(attrs: dict[str, Any]) -> list[SegmentRaw]:
    return []


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
    # Older conventions, one flattened attribute per message field, tools first as in the
    # prompt: OpenLLMetry's gen_ai.prompt.<i>.role / .content (read as before, without tools);
    # OpenInference's llm.input_messages.<i>.message.role / .content / .contents.<j>... with
    # llm.tools; OpenLLMetry's oldest llm.prompts.<i>.* with llm.request.functions.
    readers = (
        ("gen_ai.prompt.", "", _no_tools),
        ("llm.input_messages.", "message.", _openinference_tools),
        ("llm.prompts.", "", _openllmetry_functions),
    )
    for prefix, strip, tools in readers:
        messages = _indexed(attrs, prefix, strip)
        if messages:
            return tools(attrs) + _message_segments(messages)
    return _openinference_tools(attrs)


def _openinference_kind(attrs: dict[str, Any]) -> str | None:
    """The OpenInference span kind (LLM, CHAIN, TOOL, ...), upper-cased; None on other spans."""
    kind = attrs.get(_OPENINFERENCE_KIND)
    return kind.upper() if isinstance(kind, str) and kind else None


def _count(value: Any) -> int | None:
    """An OTel integer attribute as a count; None when absent, not an integer or negative."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and value >= 0 else None


def span_usage(attrs: dict[str, Any]) -> Usage | None:
    if _openinference_kind(attrs) == "LLM":
        raw = {k: v for k, v in attrs.items() if k.startswith(_OPENINFERENCE_USAGE)}
        if raw:
            return _openinference_usage(attrs, raw)
    raw = {k: v for k, v in attrs.items() if k.startswith(_GENAI_USAGE)}
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


def _openinference_usage(attrs: dict[str, Any], raw: dict[str, Any]) -> Usage | None:
    """Usage of an OpenInference LLM span: `llm.token_count.prompt` includes the cache reads and
    writes (spec, "Token Count Details"), unless the counts show the emitter's exclusive one
    (the Bedrock Converse path, an older Bedrock InvokeModel path: see the module docstring)."""
    usage = read_usage(raw, USAGE_MAP, semantics="openinference")
    if usage is None or usage.input_tokens is None:
        return usage
    cached = (usage.cache_read_tokens or 0) + (usage.cache_write_tokens or 0)
    if not cached:
        return usage  # nothing the two readings disagree on
    prompt, output = usage.input_tokens, usage.output_tokens
    total = _count(attrs.get("llm.token_count.total"))
    # Bedrock's totalTokens includes the cache while its inputTokens does not (rulebook
    # section 7: "trust the arithmetic"); an inclusive emitter's total is prompt + completion.
    exclusive_total = total is not None and output is not None and total == prompt + cached + output
    inclusive_total = total is not None and output is not None and total == prompt + output
    if cached > prompt or exclusive_total:
        usage.input_tokens = prompt + cached
        usage.semantics = "openinference_exclusive_fixed"
    elif not inclusive_total and (
        _provider_column(attrs) in ("anthropic", "bedrock")
        or (_str(attrs, "llm.system") or "").lower() == "anthropic"
    ):
        usage.semantics = "openinference_inclusive_assumed"
    return usage


_EXCLUSIVE_PROVIDERS = frozenset({"anthropic", "aws.bedrock", "bedrock", "aws"})


def _provider(attrs: dict[str, Any]) -> str:
    """The span's own provider name, lower-cased (OpenLLMetry writes "OpenAI", "Anthropic"):
    GenAI `gen_ai.provider.name` / `gen_ai.system`, else OpenInference `llm.provider` (the host,
    e.g. aws for Anthropic models on Bedrock) / `llm.system`, else OpenLLMetry's `llm.vendor`."""
    names = ("gen_ai.provider.name", "gen_ai.system", "llm.provider", "llm.system", "llm.vendor")
    return (_str(attrs, *names) or "").lower()


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


def _invocation_parameters(attrs: dict[str, Any]) -> dict[str, Any]:
    """OpenInference `llm.invocation_parameters` (the request's parameters as a JSON string)."""
    value = _json_value(attrs.get("llm.invocation_parameters"))
    return value if isinstance(value, dict) else {}


def _stream(attrs: dict[str, Any]) -> bool | None:
    """Whether the call streamed: `gen_ai.request.stream`, OpenLLMetry's `llm.is_streaming`, or
    `stream` of OpenInference's invocation parameters; None (unknown) when none says."""
    for name in ("gen_ai.request.stream", "llm.is_streaming"):
        value = attrs.get(name)
        if isinstance(value, bool):
            return value
    value = _invocation_parameters(attrs).get("stream")
    return value if isinstance(value, bool) else None


def _requested_model(attrs: dict[str, Any]) -> str | None:
    model = _str(attrs, "gen_ai.request.model", "llm.request.model", "llm.request.model_name")
    if model is None:
        value = _invocation_parameters(attrs).get("model")
        model = value if isinstance(value, str) and value else None
    return model


def _response_model(attrs: dict[str, Any]) -> str | None:
    # OpenInference's llm.model_name is the response's model when known, else the request's
    # (spec "System and Model Identification"): the `model` column takes either anyway.
    names = ("gen_ai.response.model", "llm.response.model", "llm.response.model_name")
    return _str(attrs, *names, "llm.model_name")


def _is_genai(attrs: dict[str, Any]) -> bool:
    """A GenAI span, or an OpenLLMetry one of the oldest `llm.*` names."""
    return any(
        key in attrs
        for key in (
            "gen_ai.operation.name",
            "gen_ai.provider.name",
            "gen_ai.system",
            "gen_ai.request.model",
            "llm.vendor",
            "llm.request.model",
        )
    ) or any(key.startswith(_GENAI_USAGE) for key in attrs)


def _is_llm_call(attrs: dict[str, Any]) -> bool:
    """Whether the span is one LLM call: an OpenInference span of kind LLM (any other kind is
    not, whatever GenAI attributes a translating processor copied onto it), else a GenAI one."""
    kind = _openinference_kind(attrs)
    return kind == "LLM" if kind is not None else _is_genai(attrs)


def normalise_span(exchange: Exchange, request_id: str) -> Normalised:
    span = exchange.span or {}
    attrs: dict[str, Any] = span.get("attributes") or {}
    if not _is_llm_call(attrs):
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
        model=_requested_model(attrs),
        stream=stream,
        segments=_segments(attrs),
    )
    response = ResponseInfo(
        outcome=outcome,
        usage=usage,
        model=_response_model(attrs),
        error_type=error_type,
        error_message=span.get("status_message") or None,
        finish_reason=_str(
            attrs,
            "gen_ai.response.finish_reasons",
            "llm.finish_reason",
            "llm.response.finish_reason",
        ),
    )
    ttft = attrs.get("gen_ai.response.time_to_first_chunk")
    numeric = isinstance(ttft, int | float) and not isinstance(ttft, bool)
    ttft_ms = float(ttft) * 1000.0 if numeric and ttft is not None else None
    return build(exchange, request_id, provider, API, request, response, stream, (None, ttft_ms))
