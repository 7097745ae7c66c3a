"""Regressions found in an independent review of the usage semantics: each test names the
mistake it guards against."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson

from pipeline.dialects import chat_completions, converse, generate_content, responses
from pipeline.normalise import normalise
from pipeline.records import Exchange
from pipeline.redact import REDACTED, redact_text, redact_url


def sse(*chunks: object) -> bytes:
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks)


def chunk(delta: dict[str, object], finish: str | None = None, usage: object = None) -> dict:
    return {
        "model": "gpt-x",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        "usage": usage,
    }


USAGE = {"prompt_tokens": 38, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 0}}


def test_an_openai_stream_cut_between_finish_and_usage_chunk_is_interrupted() -> None:
    body = sse(chunk({"content": "Hi"}), chunk({}, "stop"))
    info = chat_completions.parse_response(200, body, "openai", True)
    assert info.outcome == "interrupted"
    assert info.usage is None


def test_running_usage_on_every_chunk_of_a_cut_stream_does_not_pass_as_final_output() -> None:
    body = sse(
        chunk({"content": "a"}, usage={**USAGE, "completion_tokens": 1}),
        chunk({"content": "b"}, usage={**USAGE, "completion_tokens": 2}),
    )
    info = chat_completions.parse_response(200, body, "vllm", True)
    assert info.outcome == "interrupted"
    assert info.usage is not None
    assert info.usage.input_tokens == 38
    assert info.usage.output_tokens is None


def test_a_json_answer_to_a_streaming_request_keeps_its_usage() -> None:
    body = orjson.dumps(
        {
            "model": "gpt-x",
            "choices": [{"index": 0, "message": {"content": "ok"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2},
        }
    )
    info = chat_completions.parse_response(200, body, "openai", True)
    assert (info.outcome, info.usage and info.usage.input_tokens) == ("ok", 10)


def test_bedrock_cache_counts_under_their_alias_names_are_added_to_input() -> None:
    usage = converse.normalise_usage(
        {"inputTokens": 2, "outputTokens": 5, "cacheReadInputTokenCount": 1322}
    )
    assert usage is not None
    assert (usage.input_tokens, usage.cache_read_tokens, usage.uncached_input_tokens) == (
        1324,
        1322,
        2,
    )


def test_a_flat_responses_error_event_keeps_its_code_as_the_error_type() -> None:
    body = (
        b"event: error\n"
        b'data: {"type":"error","code":"server_error","message":"boom","param":null}\n\n'
    )
    info = responses.parse_response(200, body, "openai", True)
    assert (info.outcome, info.error_type) == ("stream_error", "server_error")


def test_a_gemini_error_after_partial_output_leaves_usage_unknown() -> None:
    # The counts of a chunk before the finish chunk are running totals, the prompt count too
    # (Gemini's prompt count can drop in the last chunk), so none of them is final.
    usage = {"promptTokenCount": 7, "candidatesTokenCount": 10}
    body = sse(
        {"candidates": [{"content": {"parts": [{"text": "x"}]}}], "usageMetadata": usage},
        {"error": {"code": 500, "status": "INTERNAL", "message": "fail"}},
    )
    info = generate_content.parse_response(200, body, "google", True)
    assert (info.outcome, info.error_type) == ("stream_error", "INTERNAL")
    assert info.usage is None


def test_a_byte_order_mark_does_not_hide_the_first_event() -> None:
    body = b"\xef\xbb\xbf" + sse(chunk({"content": "Hi"}, "stop", USAGE)) + b"data: [DONE]\n\n"
    info = chat_completions.parse_response(200, body, "openai", True)
    assert info.usage is not None and info.usage.input_tokens == 38


def test_secrets_in_free_text_are_masked() -> None:
    cases = [
        "Invalid API Key: gsk_abcdefghijklmnopqrstuvwxyz0123456789",
        "<a href='https://x/v1?alt=sse&key=plainsecret123'>",
        "Authorization: Basic dXNlcjpwYXNzd29yZA==",
        "api-key: 0123456789abcdef",
        "see https://user:hunter2secret@gw.example/v1",
    ]
    for text in cases:
        out = redact_text(text)
        for secret in ("gsk_abc", "plainsecret123", "dXNlcjpw", "0123456789abcdef", "hunter2"):
            assert secret not in out, (text, out)
        assert REDACTED in out
    assert redact_text("model not found: gpt-4o") == "model not found: gpt-4o"


def test_a_password_in_the_url_never_reaches_the_host_column() -> None:
    url = "https://user:sk-supersecretpassword123456@api.openai.com/v1/chat/completions"
    assert "supersecret" not in redact_url(url)
    body = orjson.dumps({"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]})
    exchange = Exchange(
        source="t",
        index=1,
        started_at=datetime(2026, 11, 30, tzinfo=UTC),
        method="POST",
        url=url,
        request_headers=[],
        request_body=body,
        status=200,
        response_headers=[("content-type", "application/json")],
        response_body=orjson.dumps({"choices": [], "usage": USAGE}),
    )
    row = normalise(exchange, "r1").row
    assert row["host"] == "api.openai.com"
    assert row["provider"] == "openai"
