"""Property tests: usage arithmetic holds for any usage object, and no input crashes normalise."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.dialects import (
    chat_completions,
    converse,
    generate_content,
    interactions,
    messages,
    responses,
)
from pipeline.eventstream import encode_message
from pipeline.normalise import Normalised, RejectRecord, Skip, normalise
from pipeline.records import Exchange, Usage

counts = st.integers(min_value=0, max_value=10_000_000)
maybe = st.none() | counts


def present(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def check_sum(usage: Usage | None) -> None:
    assert usage is not None
    values = (usage.input_tokens, usage.cache_read_tokens, usage.uncached_input_tokens)
    if None not in values:
        write = usage.cache_write_tokens or 0
        assert usage.uncached_input_tokens + usage.cache_read_tokens + write == usage.input_tokens  # type: ignore[operator]


@given(miss=counts, hit=counts, write=maybe, deepseek=st.booleans(), out=counts)
def test_chat_completions_uncached_plus_read_plus_write_is_input(
    miss: int, hit: int, write: int | None, deepseek: bool, out: int
) -> None:
    prompt = miss + hit + (write or 0)  # every server here counts cache inside prompt_tokens
    raw: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": out}
    details = present({"cached_tokens": hit, "cache_write_tokens": write})
    raw["prompt_tokens_details"] = details
    if deepseek:
        raw["prompt_cache_hit_tokens"] = hit
        raw["prompt_cache_miss_tokens"] = miss
    usage = chat_completions.normalise_usage(raw)
    check_sum(usage)
    assert usage is not None
    assert usage.uncached_input_tokens == miss


@given(uncached=counts, read=maybe, write=maybe, w1h=maybe, out=counts)
def test_anthropic_uncached_is_the_raw_input_tokens(
    uncached: int, read: int | None, write: int | None, w1h: int | None, out: int
) -> None:
    raw = present(
        {
            "input_tokens": uncached,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": write,
            "output_tokens": out,
        }
    )
    if w1h is not None:
        raw["cache_creation"] = {"ephemeral_1h_input_tokens": w1h}
    usage = messages.normalise_usage(raw)
    check_sum(usage)
    assert usage is not None
    assert usage.input_tokens == uncached + (read or 0) + (write or 0)
    if read is not None:
        assert usage.uncached_input_tokens == uncached


@given(uncached=counts, read=maybe, write=maybe)
def test_bedrock_uncached_is_the_raw_input_tokens(
    uncached: int, read: int | None, write: int | None
) -> None:
    raw = present(
        {"inputTokens": uncached, "cacheReadInputTokens": read, "cacheWriteInputTokens": write}
    )
    usage = converse.normalise_usage(raw)
    check_sum(usage)
    assert usage is not None
    if read is not None:
        assert usage.uncached_input_tokens == uncached


@given(miss=counts, cached=maybe, cand=maybe, thoughts=maybe)
def test_gemini_missing_counts_in_present_metadata_are_zero(
    miss: int, cached: int | None, cand: int | None, thoughts: int | None
) -> None:
    raw = present(
        {
            "promptTokenCount": miss + (cached or 0),
            "cachedContentTokenCount": cached,
            "candidatesTokenCount": cand,
            "thoughtsTokenCount": thoughts,
        }
    )
    usage = generate_content.normalise_usage(raw)
    check_sum(usage)
    assert usage is not None
    assert usage.uncached_input_tokens == miss
    assert usage.output_tokens == (cand or 0) + (thoughts or 0)
    assert usage.cache_write_tokens is None


@given(miss=counts, cached=counts, write=maybe)
def test_responses_and_interactions_sums_hold(miss: int, cached: int, write: int | None) -> None:
    details = present({"cached_tokens": cached, "cache_write_tokens": write})
    raw = {"input_tokens": miss + cached + (write or 0), "input_tokens_details": details}
    check_sum(responses.normalise_usage(raw))
    inter = {"total_input_tokens": miss + cached, "total_cached_tokens": cached}
    check_sum(interactions.normalise_usage(inter))


# --- no normaliser raises on arbitrary input ---------------------------------------------------

URLS = [
    "https://api.deepseek.com/chat/completions",
    "https://api.openai.com/v1/responses",
    "https://api.anthropic.com/v1/messages",
    "https://generativelanguage.googleapis.com/v1beta/models/g:streamGenerateContent?alt=sse",
    "https://generativelanguage.googleapis.com/v1beta/models/g:generateContent",
    "https://generativelanguage.googleapis.com/v1beta/interactions",
    "https://bedrock-runtime.us-east-1.amazonaws.com/model/m/converse-stream",
    "https://bedrock-runtime.us-east-1.amazonaws.com/model/m/converse",
]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "usage",
                    "usageMetadata",
                    "type",
                    "error",
                    "choices",
                    "delta",
                    "message",
                    "response",
                    "candidates",
                    "content",
                    "messages",
                    "tools",
                    "system",
                    "input",
                    "model",
                    "stream",
                    "prompt_tokens",
                    "input_tokens",
                    "iterations",
                    "cache_creation",
                    "promptTokenCount",
                ]
            ),
            inner,
            max_size=5,
        )
    ),
    max_leaves=20,
)


def sse_of(values: list[Any]) -> bytes:
    return b"".join(b"data: " + orjson.dumps(v) + b"\n\n" for v in values)


def eventstream_of(values: list[Any]) -> bytes:
    return b"".join(
        encode_message({":message-type": "event", ":event-type": "metadata"}, orjson.dumps(v))
        for v in values
    )


bodies = (
    st.binary(max_size=300)
    | json_values.map(orjson.dumps)
    | st.lists(json_values, max_size=4).map(sse_of)
    | st.lists(json_values, max_size=3).map(eventstream_of)
)


def attempt(url: str, request: bytes, status: int, response: bytes, ctype: str) -> None:
    ex = Exchange(
        source="p",
        index=0,
        started_at=datetime(2026, 1, 1, tzinfo=UTC),
        method="POST",
        url=url,
        request_headers=[],
        request_body=request,
        status=status,
        response_headers=[("content-type", ctype)],
        response_body=response,
    )
    try:
        result = normalise(ex, "p")
    except Skip:
        return
    except RejectRecord as exc:
        # The catch-all in normalise() turns a dialect bug into a reject; the dialects
        # themselves must only ever give a reason, so that path must not be taken here.
        assert not str(exc).startswith("could not normalise"), str(exc)
        return
    assert isinstance(result, Normalised)
    assert result.row["outcome"] in ("ok", "http_error", "stream_error", "interrupted")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    url=st.sampled_from(URLS),
    request=bodies,
    status=st.sampled_from([200, 400, 429, 500, 529]),
    response=bodies,
    ctype=st.sampled_from(
        ["application/json", "text/event-stream", "application/vnd.amazon.eventstream"]
    ),
)
def test_no_normaliser_raises_on_arbitrary_bytes(
    url: str, request: bytes, status: int, response: bytes, ctype: str
) -> None:
    attempt(url, request, status, response, ctype)


@settings(max_examples=300, deadline=None)
@given(url=st.sampled_from(URLS), request=json_values, response=bodies, stream=st.booleans())
def test_no_normaliser_raises_on_well_formed_requests_with_odd_responses(
    url: str, request: Any, response: bytes, stream: bool
) -> None:
    body = request if isinstance(request, dict) else {"model": "m", "messages": request}
    body["stream"] = stream
    ctype = "text/event-stream" if stream else "application/json"
    attempt(url, orjson.dumps(body), 200, response, ctype)
