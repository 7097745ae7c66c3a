"""OpenInference (Arize Phoenix, openinference-instrumentation-*) and the oldest OpenLLMetry
(Traceloop `llm.*`) spans become rows, with the input semantics each emitter uses.

The spans are hand-built OTLP/JSON like the Collector's file exporter writes them (int64 values as
decimal strings, times in nanoseconds), with the attributes the instrumentors set (their sources
are cited in the docstring of `pipeline/otel.py`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pipeline import otel
from pipeline.normalise import Normalised, Skip, normalise
from pipeline.records import Exchange
from pipeline.sources.otlp import iter_otlp

START = "1782907200000000000"  # 2026-07-01T12:00:00Z
END = "1782907201500000000"


def _value(value: object) -> dict[str, object]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}  # OTLP/JSON writes int64 as a string
    if isinstance(value, float):
        return {"doubleValue": value}
    return {"stringValue": value}


def _span(attrs: dict[str, object], span_id: str = "b7ad6b7169203331") -> dict[str, object]:
    return {
        "traceId": "0af7651916cd43dd8448eb211c80319c",
        "spanId": span_id,
        "name": "ChatCompletion",
        "kind": 1,
        "startTimeUnixNano": START,
        "endTimeUnixNano": END,
        "attributes": [{"key": k, "value": _value(v)} for k, v in attrs.items()],
        "status": {"code": 1},
    }


def _read(tmp_path: Path, *spans: dict[str, object]) -> list[Normalised | str]:
    doc = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "rag-app"}}]
                },
                "scopeSpans": [
                    {"scope": {"name": "openinference.instrumentation"}, "spans": list(spans)}
                ],
            }
        ]
    }
    path = tmp_path / "traces.jsonl"
    path.write_text(json.dumps(doc) + "\n", encoding="utf-8")
    out: list[Normalised | str] = []
    for item in iter_otlp(path):
        assert isinstance(item, Exchange), item
        try:
            out.append(normalise(item, f"span{item.index}"))
        except Skip:
            out.append("skip")
    return out


def _row(tmp_path: Path, attrs: dict[str, object]) -> tuple[dict[str, Any], Normalised]:
    (result,) = _read(tmp_path, _span(attrs))
    assert isinstance(result, Normalised), result
    return result.row, result


# openinference-instrumentation-openai: prompt_tokens (cached included), cached_tokens,
# reasoning_tokens, total_tokens; the request's parameters as JSON; content capture on.
OPENAI = {
    "openinference.span.kind": "LLM",
    "llm.provider": "openai",
    "llm.system": "openai",
    "llm.model_name": "o4-mini-2025-04-16",
    "llm.invocation_parameters": json.dumps({"model": "o4-mini", "stream": True}),
    "llm.tools.0.tool.json_schema": json.dumps(
        {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    ),
    "llm.input_messages.0.message.role": "system",
    "llm.input_messages.0.message.content": "You answer from the manual.",
    "llm.input_messages.1.message.role": "user",
    "llm.input_messages.1.message.content": "How do I reset it?",
    "llm.token_count.prompt": 2006,
    "llm.token_count.prompt_details.cache_read": 1920,
    "llm.token_count.completion": 300,
    "llm.token_count.completion_details.reasoning": 192,
    "llm.token_count.total": 2306,
    "session.id": "sess-42",
    "input.value": "{}",
    "output.value": "{}",
}


def test_an_openinference_openai_span_is_a_row_with_openai_inclusive_counts(
    tmp_path: Path,
) -> None:
    row, result = _row(tmp_path, OPENAI)
    expected = {
        "provider": "openai",
        "api": "otel",
        "host": "openai",
        "model": "o4-mini-2025-04-16",
        "requested_model": "o4-mini",
        "outcome": "ok",
        "usage_status": "reported",
        "input_tokens": 2006,
        "cache_read_tokens": 1920,
        "cache_write_tokens": None,
        "cache_write_1h_tokens": None,
        "uncached_input_tokens": 86,
        "output_tokens": 300,
        "reasoning_tokens": 192,
        "stream": True,
        "duration_ms": 1500.0,
        "session_id": "sess-42",
        "segment_count": 3,
        "usage_semantics": "openinference",  # total 2306 = prompt + completion: inclusive
        "tags": ["service:rag-app"],
    }
    assert {k: row[k] for k in expected} == expected
    assert [(s.kind, s.role) for s in result.segments] == [
        ("tool", None),
        ("system", "system"),
        ("message", "user"),
    ]
    # The tool is the provider's own JSON; a message its flattened fields, `message.` dropped.
    tool, system, user = otel._segments(OPENAI)
    assert tool.data == (
        b'{"type":"function","function":{"name":"lookup","parameters":{"type":"object"}}}'
    )
    assert user.data == b'{"role":"user","content":"How do I reset it?"}'
    assert system.data == b'{"role":"system","content":"You answer from the manual."}'
    assert [s.bytes for s in result.segments] == [len(x.data) for x in (tool, system, user)]


# openinference-instrumentation-anthropic >= 0.1.14: prompt = input_tokens + cache_creation +
# cache_read, the two cache counts as details, total = prompt + completion (1.1.2).
ANTHROPIC = {
    "openinference.span.kind": "LLM",
    "llm.provider": "anthropic",
    "llm.system": "anthropic",
    "llm.model_name": "claude-sonnet-4-5-20250929",
    "llm.invocation_parameters": json.dumps({"max_tokens": 1024}),
    "llm.token_count.prompt": 1532,
    "llm.token_count.prompt_details.cache_read": 1111,
    "llm.token_count.prompt_details.cache_write": 418,
    "llm.token_count.completion": 33,
    "llm.token_count.total": 1565,
    "llm.finish_reason": "end_turn",
}


def test_an_openinference_anthropic_span_keeps_its_cache_inclusive_prompt(
    tmp_path: Path,
) -> None:
    row, result = _row(tmp_path, ANTHROPIC)
    expected = {
        "provider": "anthropic",
        "model": "claude-sonnet-4-5-20250929",
        "requested_model": None,  # not in the span: unknown, not guessed
        "input_tokens": 1532,
        "cache_read_tokens": 1111,
        "cache_write_tokens": 418,
        "uncached_input_tokens": 3,
        "output_tokens": 33,
        "reasoning_tokens": None,
        "stream": None,
        "finish_reason": "end_turn",
        "segment_count": 0,
        "session_id": None,
        "usage_semantics": "openinference",
    }
    assert {k: row[k] for k in expected} == expected
    assert result.segments == []  # content capture off: no prompt, no cache-break analysis


def test_an_anthropic_span_whose_counts_cannot_decide_says_it_is_assumed_inclusive(
    tmp_path: Path,
) -> None:
    attrs = {k: v for k, v in ANTHROPIC.items() if k != "llm.token_count.total"}
    row, _ = _row(tmp_path, attrs)
    assert (row["input_tokens"], row["uncached_input_tokens"]) == (1532, 3)
    assert row["usage_semantics"] == "openinference_inclusive_assumed"


def test_an_exclusive_prompt_with_cache_counts_above_it_gets_the_cache_added(
    tmp_path: Path,
) -> None:
    # openinference-instrumentation-bedrock's InvokeModel path at one version wrote
    # `input_tokens or 0 + cache...`: the exclusive input_tokens (3) with the cache details.
    attrs = {
        "openinference.span.kind": "LLM",
        "llm.provider": "aws",
        "llm.system": "anthropic",
        "llm.model_name": "claude-sonnet-4-5-20250929-v1:0",
        "llm.token_count.prompt": 3,
        "llm.token_count.prompt_details.cache_read": 1111,
        "llm.token_count.prompt_details.cache_write": 418,
        "llm.token_count.completion": 33,
    }
    row, _ = _row(tmp_path, attrs)
    assert (row["provider"], row["host"]) == ("bedrock", "aws")
    assert (row["input_tokens"], row["cache_read_tokens"], row["cache_write_tokens"]) == (
        1532,
        1111,
        418,
    )
    assert row["uncached_input_tokens"] == 3
    assert row["usage_semantics"] == "openinference_exclusive_fixed"


def test_a_bedrock_converse_span_is_found_exclusive_by_its_total(tmp_path: Path) -> None:
    # The Converse path writes prompt = inputTokens (cache excluded) and total = totalTokens
    # (cache included): 500 + 300 + 20 = 820, though the cache (300) does not exceed the prompt.
    attrs = {
        "openinference.span.kind": "LLM",
        "llm.provider": "aws",
        "llm.model_name": "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        "llm.token_count.prompt": 500,
        "llm.token_count.prompt_details.cache_read": 300,
        "llm.token_count.completion": 20,
        "llm.token_count.total": 820,
    }
    row, _ = _row(tmp_path, attrs)
    assert row["provider"] == "bedrock"
    assert (row["input_tokens"], row["cache_read_tokens"], row["uncached_input_tokens"]) == (
        800,
        300,
        500,
    )
    assert row["usage_semantics"] == "openinference_exclusive_fixed"


def test_an_openinference_span_is_read_from_its_own_counts_not_translated_genai_ones(
    tmp_path: Path,
) -> None:
    # A span processor that translates GenAI spans keeps the source's gen_ai.* (here Strands'
    # exclusive input and a cache-write alias) beside the OpenInference counts it computed.
    attrs = {
        "openinference.span.kind": "LLM",
        "gen_ai.system": "strands-agents",
        "gen_ai.usage.input_tokens": 4299,
        "gen_ai.usage.output_tokens": 631,
        "gen_ai.usage.cache_read_input_tokens": 35574,
        "gen_ai.usage.cache_write_input_tokens": 17787,
        "llm.provider": "aws",
        "llm.token_count.prompt": 57660,
        "llm.token_count.prompt_details.cache_read": 35574,
        "llm.token_count.prompt_details.cache_write": 17787,
        "llm.token_count.completion": 631,
        "llm.token_count.total": 58291,
    }
    row, _ = _row(tmp_path, attrs)
    assert (row["input_tokens"], row["cache_read_tokens"], row["cache_write_tokens"]) == (
        57660,
        35574,
        17787,
    )
    assert (row["uncached_input_tokens"], row["output_tokens"]) == (4299, 631)
    assert row["usage_semantics"] == "openinference"


# The oldest OpenLLMetry semantic conventions (opentelemetry-semantic-conventions-ai 0.0.x):
# llm.vendor, llm.request.model, llm.usage.*, llm.prompts.N.*, llm.request.functions.N.*;
# llm.usage.cache_read_input_tokens is OpenAI's cached_tokens, a part of the prompt count.
TRACELOOP = {
    "llm.vendor": "OpenAI",
    "llm.request.type": "chat",
    "llm.request.model": "gpt-4o",
    "llm.response.model": "gpt-4o-2024-08-06",
    "llm.is_streaming": False,
    "llm.usage.prompt_tokens": 1200,
    "llm.usage.completion_tokens": 80,
    "llm.usage.total_tokens": 1280,
    "llm.usage.cache_read_input_tokens": 1024,
    "llm.request.functions.0.name": "lookup",
    "llm.request.functions.0.parameters": '{"type": "object"}',
    "llm.prompts.0.role": "user",
    "llm.prompts.0.content": "How do I reset it?",
}


def test_a_traceloop_llm_span_is_a_row_with_its_llm_usage_counts(tmp_path: Path) -> None:
    row, result = _row(tmp_path, TRACELOOP)
    expected = {
        "provider": "openai",
        "host": "OpenAI",
        "model": "gpt-4o-2024-08-06",
        "requested_model": "gpt-4o",
        "input_tokens": 1200,
        "cache_read_tokens": 1024,
        "cache_write_tokens": None,
        "uncached_input_tokens": 176,
        "output_tokens": 80,
        "reasoning_tokens": None,
        "stream": False,
        "segment_count": 2,
        "usage_semantics": "otel_genai",
    }
    assert {k: row[k] for k in expected} == expected
    assert [(s.kind, s.role) for s in result.segments] == [("tool", None), ("message", "user")]


def test_a_traceloop_anthropic_span_with_an_exclusive_prompt_gets_the_cache_added(
    tmp_path: Path,
) -> None:
    attrs = {
        "llm.vendor": "Anthropic",
        "llm.request.model": "claude-sonnet-4-5",
        "llm.usage.prompt_tokens": 3,
        "llm.usage.cache_read_input_tokens": 1111,
        "llm.usage.cache_creation_input_tokens": 418,
        "llm.usage.completion_tokens": 33,
    }
    row, _ = _row(tmp_path, attrs)
    assert (row["provider"], row["input_tokens"], row["uncached_input_tokens"]) == (
        "anthropic",
        1532,
        3,
    )
    assert (row["cache_read_tokens"], row["cache_write_tokens"]) == (1111, 418)
    assert row["usage_semantics"] == "otel_exclusive_fixed"


@pytest.mark.parametrize(
    "kind", ["CHAIN", "TOOL", "RETRIEVER", "EMBEDDING", "AGENT", "RERANKER", "chain"]
)
def test_openinference_spans_that_are_not_llm_calls_are_skipped(tmp_path: Path, kind: str) -> None:
    # Even with token counts (an AGENT span repeats its LLM children's) or GenAI attributes a
    # translating processor copied: counting them would count the calls twice.
    attrs = {
        "openinference.span.kind": kind,
        "llm.token_count.prompt": 2006,
        "llm.token_count.completion": 300,
        "llm.usage.total_tokens": 2306,
        "gen_ai.operation.name": "invoke_agent",
        "input.value": "How do I reset it?",
        "session.id": "sess-42",
    }
    assert _read(tmp_path, _span(attrs)) == ["skip"]


def test_a_chain_span_beside_its_llm_span_leaves_one_row(tmp_path: Path) -> None:
    chain = _span({"openinference.span.kind": "CHAIN", "input.value": "q"}, "a1a1a1a1a1a1a1a1")
    results = _read(tmp_path, chain, _span(OPENAI))
    assert results[0] == "skip"
    assert isinstance(results[1], Normalised)
    assert results[1].row["input_tokens"] == 2006
