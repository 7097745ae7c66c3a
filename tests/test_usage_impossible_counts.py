"""Impossible token counts are unknown, never priced: a negative count (or cost) makes its column
NULL in every dialect and in OTel spans, and cache read + write above the cache-inclusive input
makes the cache columns and the uncached count NULL (usage_semantics `inconsistent`), so no
negative uncached count or hit ratio above 100% reaches the views."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson

from pipeline import otel
from pipeline.dialects import chat_completions, messages
from pipeline.normalise import normalise
from pipeline.records import Exchange

AT = datetime(2026, 11, 16, 9, 0, tzinfo=UTC)


def _span_row(attributes: dict[str, Any]) -> dict[str, Any]:
    exchange = Exchange(
        source="spans.jsonl", index=0, started_at=AT, method="POST", url="", request_headers=[],
        request_body=b"", status=None, response_headers=[], response_body=b"",
        span={"attributes": {"gen_ai.provider.name": "openai", **attributes}, "status_code": 0},
    )  # fmt: skip
    return otel.normalise_span(exchange, "span").row


def _chat_row(usage: dict[str, Any]) -> dict[str, Any]:
    body = {"model": "gpt-4.1", "messages": [{"role": "user", "content": "hi"}]}
    answer = {
        "model": "gpt-4.1",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}],
        "usage": usage,
    }
    exchange = Exchange(
        source="capture.jsonl", index=1, started_at=AT, method="POST",
        url="https://api.openai.com/v1/chat/completions",
        request_headers=[("content-type", "application/json")], request_body=orjson.dumps(body),
        status=200, response_headers=[("content-type", "application/json")],
        response_body=orjson.dumps(answer),
    )  # fmt: skip
    return normalise(exchange, "chat").row


def test_a_span_with_negative_input_tokens_has_unknown_input_not_a_negative_one() -> None:
    row = _span_row(
        {
            "gen_ai.usage.input_tokens": -5,
            "gen_ai.usage.output_tokens": 7,
            "gen_ai.usage.cache_read.input_tokens": 0,
        }
    )
    assert row["input_tokens"] is None and row["uncached_input_tokens"] is None
    assert row["output_tokens"] == 7  # the other counts stand
    assert row["usage_semantics"] == "otel_genai"  # not "exclusive_fixed" because 0 > -5


def test_a_negative_count_is_null_without_falling_back_to_another_field_or_to_zero() -> None:
    usage = chat_completions.normalise_usage(
        {
            "prompt_tokens": 100,
            "prompt_cache_hit_tokens": -1,
            "prompt_tokens_details": {"cached_tokens": 50},
        }
    )
    assert usage is not None and usage.cache_read_tokens is None
    # a sum with a negative addend (Anthropic input = input + writes + reads) is unknown too
    anthropic = messages.normalise_usage(
        {"input_tokens": 10, "cache_creation_input_tokens": -3, "cache_read_input_tokens": 0}
    )
    assert anthropic is not None and anthropic.input_tokens is None


def test_a_cache_read_above_the_prompt_leaves_cache_and_uncached_counts_unknown() -> None:
    row = _chat_row(
        {
            "prompt_tokens": 1533,
            "completion_tokens": 4,
            "prompt_tokens_details": {"cached_tokens": 1536},
        }
    )
    assert row["input_tokens"] == 1533
    assert (row["cache_read_tokens"], row["uncached_input_tokens"]) == (None, None)  # was -3
    assert row["usage_semantics"] == "inconsistent"
    assert orjson.loads(row["raw_usage"])["prompt_tokens_details"]["cached_tokens"] == 1536


def test_consistent_usage_is_kept_as_reported() -> None:
    row = _chat_row(
        {
            "prompt_tokens": 1536,
            "completion_tokens": 4,
            "prompt_tokens_details": {"cached_tokens": 1536},
        }
    )
    assert (row["cache_read_tokens"], row["uncached_input_tokens"]) == (1536, 0)
    assert row["usage_semantics"] == "openai_inclusive"
