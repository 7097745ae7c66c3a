"""Response side of every dialect beyond the samples: timing offsets, cut streams, in-band
errors, keep-alives, and arrival times from capture chunk timings."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
from conftest import SAMPLES

from pipeline.dialects import chat_completions, converse, generate_content, messages, responses
from pipeline.eventstream import encode_message
from pipeline.normalise import normalise
from pipeline.records import Exchange


def sse(*events: tuple[str | None, object]) -> bytes:
    out = b""
    for name, data in events:
        if name:
            out += b"event: " + name.encode() + b"\n"
        out += b"data: " + orjson.dumps(data) + b"\n\n"
    return out


def end_of(body: bytes, needle: bytes) -> int:
    """Offset just past the blank line that ends the event containing `needle`."""
    return body.index(b"\n\n", body.index(needle)) + 2


# --- Anthropic -------------------------------------------------------------------------------

START = {
    "type": "message_start",
    "message": {
        "model": "claude-x",
        "usage": {
            "input_tokens": 5,
            "cache_read_input_tokens": 100,
            "cache_creation_input_tokens": 0,
            "output_tokens": 1,
        },
    },
}


def test_anthropic_thinking_deltas_are_reasoning_and_text_deltas_are_answer() -> None:
    body = sse(
        ("message_start", START),
        (
            "content_block_delta",
            {"type": "content_block_delta", "delta": {"type": "thinking_delta", "thinking": ""}},
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "delta": {"type": "thinking_delta", "thinking": "hmm"}},
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "Hi"}},
        ),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 9},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    )
    info = messages.parse_response(200, body, "anthropic", True)
    assert info.first_reasoning_at == end_of(body, b'"hmm"')
    assert info.first_text_at == end_of(body, b'"Hi"')
    assert info.outcome == "ok"
    assert info.usage is not None
    assert (info.usage.input_tokens, info.usage.output_tokens) == (105, 9)


def test_an_anthropic_stream_cut_after_message_start_keeps_input_but_not_output() -> None:
    body = sse(("message_start", START))
    info = messages.parse_response(200, body, "anthropic", True)
    assert info.outcome == "interrupted"
    assert info.usage is not None
    assert info.usage.input_tokens == 105  # 5 + 0 + 100
    assert info.usage.cache_read_tokens == 100
    assert info.usage.output_tokens is None  # message_start's 1 is a placeholder


def test_an_anthropic_overloaded_error_event_on_a_200_stream_is_a_stream_error() -> None:
    body = sse(
        ("message_start", START),
        (
            "error",
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        ),
    )
    info = messages.parse_response(200, body, "anthropic", True)
    assert (info.outcome, info.error_type, info.error_message) == (
        "stream_error",
        "overloaded_error",
        "Overloaded",
    )


def test_an_anthropic_tool_use_block_start_counts_as_first_answer_output() -> None:
    body = (SAMPLES / "anthropic_messages_stream_max_tokens_partial_tool_json.sse").read_bytes()
    info = messages.parse_response(200, body, "anthropic", True)
    # The first non-empty text_delta ("I") comes before the tool_use block.
    assert info.first_text_at == end_of(body, b'"text":"I"')


# --- OpenAI Chat / DeepSeek --------------------------------------------------------------------


def test_deepseek_reasoning_content_comes_before_answer_content_in_the_sample() -> None:
    body = (SAMPLES / "deepseek_reasoner_stream_with_usage.sse").read_bytes()
    info = chat_completions.parse_response(200, body, "deepseek", True)
    # The first chunk carries reasoning_content "" (empty), so reasoning starts at the first
    # chunk with non-empty reasoning_content; the answer at the first non-empty content.
    first_reasoning = body.index(
        b'"reasoning_content":"', body.index(b'"reasoning_content":""') + 5
    )
    assert info.first_reasoning_at == end_of(body, body[first_reasoning : first_reasoning + 25])
    assert info.first_text_at is not None
    assert info.first_reasoning_at is not None
    assert info.first_text_at > info.first_reasoning_at


def test_deepseek_blank_line_and_comment_keepalives_before_a_json_body_are_skipped() -> None:
    raw = (SAMPLES / "deepseek_chat_reasoner_cache_hit.json").read_bytes()
    for prefix in (b"\n\n\n", b": keep-alive\n\n\n"):
        info = chat_completions.parse_response(200, prefix + raw, "deepseek", False)
        assert info.usage is not None
        assert (info.usage.input_tokens, info.usage.cache_read_tokens) == (563, 512)


def test_deepseek_keepalives_before_an_error_body_keep_the_error_type() -> None:
    body = b"\n\n" + (SAMPLES / "deepseek_responses_error_400.json").read_bytes()
    info = chat_completions.parse_response(400, body, "deepseek", False)
    assert (info.outcome, info.usage, info.error_type) == (
        "http_error",
        None,
        "invalid_request_error",
    )


def test_a_chat_stream_cut_before_usage_is_interrupted_with_null_usage() -> None:
    body = (SAMPLES / "openai_chat_stream_with_usage.sse").read_bytes()
    cut = body[: body.index(b'"finish_reason":"stop"') - 200]
    info = chat_completions.parse_response(200, cut, "openai", True)
    assert (info.outcome, info.usage) == ("interrupted", None)


def test_vllm_usage_without_cached_tokens_leaves_cache_read_unknown() -> None:
    usage = chat_completions.normalise_usage({"prompt_tokens": 100, "completion_tokens": 5})
    assert usage is not None
    assert (usage.input_tokens, usage.cache_read_tokens, usage.uncached_input_tokens) == (
        100,
        None,
        None,
    )


def test_dashscope_cache_creation_is_a_write_inside_prompt_tokens() -> None:
    raw = {
        "prompt_tokens": 1000,
        "completion_tokens": 3,
        "prompt_tokens_details": {
            "cached_tokens": 0,
            "cache_creation_input_tokens": 900,
            "cache_type": "ephemeral",
        },
    }
    usage = chat_completions.normalise_usage(raw)
    assert usage is not None
    assert (usage.cache_write_tokens, usage.uncached_input_tokens) == (900, 100)


def test_moonshot_top_level_cached_tokens_is_accepted() -> None:
    usage = chat_completions.normalise_usage(
        {"prompt_tokens": 50, "completion_tokens": 1, "cached_tokens": 32}
    )
    assert usage is not None
    assert usage.cache_read_tokens == 32


# --- Responses -------------------------------------------------------------------------------


def test_responses_first_text_is_the_first_output_text_delta() -> None:
    body = (SAMPLES / "openai_responses_stream_text.sse").read_bytes()
    info = responses.parse_response(200, body, "openai", True)
    assert info.first_text_at == end_of(body, b"response.output_text.delta")
    assert info.first_reasoning_at is None


def test_a_responses_stream_without_a_terminal_event_is_interrupted() -> None:
    body = (SAMPLES / "openai_responses_stream_text.sse").read_bytes()
    cut = body[: body.index(b"event: response.completed")]
    info = responses.parse_response(200, cut, "openai", True)
    assert (info.outcome, info.usage) == ("interrupted", None)


def test_a_responses_incomplete_event_still_carries_usage() -> None:
    resp = {
        "model": "gpt-5",
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
        "usage": {
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 4},
            "output_tokens": 7,
        },
    }
    body = sse(("response.incomplete", {"type": "response.incomplete", "response": resp}))
    info = responses.parse_response(200, body, "openai", True)
    assert info.outcome == "ok"
    assert info.finish_reason == "incomplete:max_output_tokens"
    assert info.usage is not None
    assert (info.usage.input_tokens, info.usage.cache_read_tokens) == (10, 4)


def test_a_responses_shell_call_counts_as_the_first_answer_like_any_tool_call() -> None:
    # shell_call was not in the list of tool items the response side knew, although the request
    # side already gave it the assistant role: one `*_call` rule for both now
    item = {"type": "shell_call", "id": "sh_1", "call_id": "c1", "action": {"commands": ["ls"]}}
    resp = {"model": "gpt-5.1", "status": "completed", "output": [item],
            "usage": {"input_tokens": 10, "output_tokens": 3}}  # fmt: skip
    body = sse(
        ("response.output_item.added", {"type": "response.output_item.added", "item": item}),
        ("response.completed", {"type": "response.completed", "response": resp}),
    )
    info = responses.parse_response(200, body, "openai", True)
    assert info.first_text_at == end_of(body, b"response.output_item.added")
    plain = responses.parse_response(200, orjson.dumps(resp), "openai", False)
    assert plain.first_text_at is not None


# --- Gemini ----------------------------------------------------------------------------------


def test_gemini_thought_parts_are_reasoning_and_function_calls_are_answer_output() -> None:
    chunk1 = {"candidates": [{"content": {"parts": [{"text": "plan", "thought": True}]}}]}
    chunk2 = {"candidates": [{"content": {"parts": [{"functionCall": {"name": "f"}}]}}]}
    chunk3 = {
        "candidates": [{"finishReason": "STOP", "content": {"parts": [{"text": ""}]}}],
        "usageMetadata": {"promptTokenCount": 4, "candidatesTokenCount": 2},
    }
    body = b"".join(b"data: " + orjson.dumps(c) + b"\r\n\r\n" for c in (chunk1, chunk2, chunk3))
    info = generate_content.parse_response(200, body, "google", True)
    first_end = body.index(b"\r\n\r\n") + 4
    assert info.first_reasoning_at == first_end
    assert info.first_text_at == body.index(b"\r\n\r\n", first_end) + 4
    assert info.usage is not None
    # usageMetadata present without thoughts/cached: proto3 zeros.
    assert (info.usage.output_tokens, info.usage.reasoning_tokens) == (2, 0)
    assert info.usage.cache_read_tokens == 0


def test_a_gemini_response_without_usage_metadata_has_unknown_usage() -> None:
    body = orjson.dumps(
        {"candidates": [{"finishReason": "STOP", "content": {"parts": [{"text": "x"}]}}]}
    )
    info = generate_content.parse_response(200, body, "google", False)
    assert info.usage is None


# --- Bedrock ---------------------------------------------------------------------------------


def event(kind: str, payload: dict[str, object]) -> bytes:
    return encode_message(
        {":event-type": kind, ":content-type": "application/json", ":message-type": "event"},
        orjson.dumps(payload),
    )


def test_bedrock_stream_first_text_is_the_first_text_delta_message() -> None:
    body = (SAMPLES / "bedrock_converse_stream.eventstream").read_bytes()
    info = converse.parse_response(200, body, "bedrock", True)
    # The first contentBlockDelta ("The") ends at byte 0x8f + 0xd6 (two messages' lengths).
    assert info.first_text_at == 0x8F + 0xD6
    assert info.finish_reason == "end_turn"


def test_bedrock_reasoning_deltas_and_cache_counts_in_the_metadata_event() -> None:
    body = (
        event("messageStart", {"role": "assistant"})
        + event("contentBlockDelta", {"delta": {"reasoningContent": {"text": "think"}}})
        + event("contentBlockDelta", {"delta": {"text": "ok"}})
        + event("messageStop", {"stopReason": "end_turn"})
        + event(
            "metadata",
            {
                "usage": {
                    "inputTokens": 3,
                    "outputTokens": 4,
                    "cacheReadInputTokens": 500,
                    "cacheWriteInputTokens": 20,
                }
            },
        )
    )
    info = converse.parse_response(200, body, "bedrock", True)
    assert info.usage is not None
    assert (
        info.usage.input_tokens,
        info.usage.cache_read_tokens,
        info.usage.cache_write_tokens,
        info.usage.uncached_input_tokens,
    ) == (523, 500, 20, 3)
    assert info.first_reasoning_at is not None
    assert info.first_text_at is not None
    assert info.first_reasoning_at < info.first_text_at


def test_a_bedrock_exception_message_mid_stream_is_a_stream_error() -> None:
    body = event("messageStart", {"role": "assistant"}) + encode_message(
        {":message-type": "exception", ":exception-type": "throttlingException"},
        b'{"message":"Too many requests"}',
    )
    info = converse.parse_response(200, body, "bedrock", True)
    assert (info.outcome, info.error_type, info.usage) == (
        "stream_error",
        "throttlingException",
        None,
    )


def test_a_bedrock_stream_cut_before_metadata_is_interrupted() -> None:
    body = event("messageStart", {"role": "assistant"}) + event(
        "contentBlockDelta", {"delta": {"text": "x"}}
    )
    info = converse.parse_response(200, body, "bedrock", True)
    assert (info.outcome, info.usage) == ("interrupted", None)


# --- arrival times ---------------------------------------------------------------------------


def test_ttft_comes_from_the_capture_chunk_that_held_the_first_text_event() -> None:
    body = (SAMPLES / "anthropic_messages_stream_basic.sse").read_bytes()
    first_text = end_of(body, b'"Hello"')
    # Three chunks: up to just before the first text event, the rest of it, and the tail.
    cut = first_text - 10
    chunks = [(120.0, cut), (250.0, first_text - cut), (400.0, len(body) - first_text)]
    ex = Exchange(
        source="t",
        index=1,
        started_at=datetime(2026, 1, 1, tzinfo=UTC),
        method="POST",
        url="https://api.anthropic.com/v1/messages",
        request_headers=[],
        request_body=b'{"model":"m","stream":true,"messages":[]}',
        status=200,
        response_headers=[("content-type", "text/event-stream")],
        response_body=body,
        chunks=chunks,
        end_ms=400.0,
    )
    row = normalise(ex, "r").row
    assert row["ttft_ms"] == 250.0
    assert row["first_reasoning_ms"] is None
