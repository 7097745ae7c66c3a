"""Bedrock InvokeModel / InvokeModelWithResponseStream with a Claude (Anthropic Messages) body.

The streams are real AWS event-stream frames built with pipeline.eventstream.encode_message (the
encoder the ConverseStream tests use): each `chunk` message's payload is `{"bytes": base64 of one
Anthropic stream event}`, the last event carrying `amazon-bedrock-invocationMetrics`.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from pipeline.capture_format import dumps_record, make_record
from pipeline.dialects import DIALECTS, invoke_model, messages
from pipeline.eventstream import encode_message
from pipeline.normalise import normalise
from pipeline.providers import Route, route
from pipeline.records import Exchange

HOST = "bedrock-runtime.us-east-1.amazonaws.com"
MODEL_ID = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
ENCODED_ID = "us.anthropic.claude-sonnet-4-5-20250929-v1%3A0"
INVOKE_URL = f"https://{HOST}/model/{ENCODED_ID}/invoke"
STREAM_URL = f"https://{HOST}/model/{ENCODED_ID}/invoke-with-response-stream"

REQUEST: dict[str, Any] = {
    "anthropic_version": "bedrock-2023-05-31",
    "max_tokens": 1024,
    "tools": [{"name": "bash", "input_schema": {"type": "object"}}],
    "system": [
        {"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}
    ],
    "messages": [
        {"role": "user", "content": "list the files"},
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "now", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
            ],
        },
    ],
}

# The usage block of a real Messages response (field names per the Anthropic reference).
CACHE_READ_MESSAGE: dict[str, Any] = {
    "id": "msg_bdrk_01",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5-20250929",
    "content": [{"type": "text", "text": "Here they are."}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 12,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 4200,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
        "output_tokens": 35,
    },
}


def chunk(event: dict[str, Any], **outer: Any) -> bytes:
    """One InvokeModelWithResponseStream `chunk` message holding one Anthropic event."""
    payload = {"bytes": base64.b64encode(orjson.dumps(event)).decode(), "p": "abcdef", **outer}
    return encode_message(
        {":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"},
        orjson.dumps(payload),
    )


METRICS = {
    "inputTokenCount": 9,
    "outputTokenCount": 40,
    "invocationLatency": 1800,
    "firstByteLatency": 600,
    "cacheReadInputTokenCount": 0,
    "cacheWriteInputTokenCount": 5000,
}

START = {
    "type": "message_start",
    "message": {
        "id": "msg_bdrk_02",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": [],
        "usage": {
            "input_tokens": 9,
            "cache_creation_input_tokens": 5000,
            "cache_read_input_tokens": 0,
            "cache_creation": {
                "ephemeral_5m_input_tokens": 4000,
                "ephemeral_1h_input_tokens": 1000,
            },
            "output_tokens": 1,
        },
    },
}
BLOCK_START = {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}
TEXT = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}}
BLOCK_STOP = {"type": "content_block_stop", "index": 0}
DELTA = {
    "type": "message_delta",
    "delta": {"stop_reason": "end_turn", "stop_sequence": None},
    "usage": {"output_tokens": 40},
}
STOP = {"type": "message_stop", "amazon-bedrock-invocationMetrics": METRICS}


def cache_write_stream() -> bytes:
    return b"".join(chunk(e) for e in (START, BLOCK_START, TEXT, BLOCK_STOP, DELTA, STOP))


def usage_tuple(info: Any) -> tuple[Any, ...]:
    u = info.usage
    return (
        u.input_tokens,
        u.cache_read_tokens,
        u.cache_write_tokens,
        u.cache_write_1h_tokens,
        u.output_tokens,
        u.uncached_input_tokens,
        u.semantics,
    )


# --- routing and request ---------------------------------------------------------------------


def test_invoke_paths_route_to_the_invoke_model_dialect_of_bedrock() -> None:
    for path in (f"/model/{ENCODED_ID}/invoke", f"/model/{MODEL_ID}/invoke-with-response-stream"):
        assert route(HOST, path) == Route("bedrock", "invoke_model")
    assert DIALECTS["invoke_model"] is invoke_model


def test_an_invoke_path_without_a_model_segment_is_not_taken_for_bedrock() -> None:
    # LangServe and similar servers expose `/{chain}/invoke`; that is not an LLM call we know.
    assert route("langserve.local:8000", "/my-chain/invoke") is None
    assert route("bedrock-runtime.us-east-1.amazonaws.com", "/invoke") is None


def test_the_url_encoded_model_id_is_decoded_and_streaming_is_told_by_the_path() -> None:
    info = invoke_model.parse_request(REQUEST, STREAM_URL)
    assert (info.model, info.stream) == (MODEL_ID, True)
    # The Anthropic SDK quotes the id with safe=":", so a raw colon arrives too.
    raw = invoke_model.parse_request(REQUEST, f"https://{HOST}/model/{MODEL_ID}/invoke")
    assert (raw.model, raw.stream) == (MODEL_ID, False)


def test_segments_and_cache_breakpoints_are_exactly_the_messages_dialects() -> None:
    ours = invoke_model.parse_request(REQUEST, INVOKE_URL)
    theirs = messages.parse_request(REQUEST, "https://api.anthropic.com/v1/messages")
    assert ours.segments == theirs.segments
    assert [s.kind for s in ours.segments] == ["tool", "system", "message", "message", "message"]
    assert (ours.cache_breakpoints, ours.cache_ttls) == ([1, 4], ["5m", "1h"])


# --- responses -------------------------------------------------------------------------------


def test_a_non_streamed_response_with_a_cache_read_adds_the_cache_to_the_input() -> None:
    info = invoke_model.parse_response(200, orjson.dumps(CACHE_READ_MESSAGE), "bedrock", False)
    assert info.outcome == "ok"
    assert usage_tuple(info) == (4212, 4200, 0, 0, 35, 12, "anthropic_exclusive")
    assert info.finish_reason == "end_turn"
    assert info.model == "claude-sonnet-4-5-20250929"


def test_a_stream_with_a_cache_write_takes_message_start_then_the_last_message_delta() -> None:
    body = cache_write_stream()
    info = invoke_model.parse_response(200, body, "bedrock", True)
    assert info.outcome == "ok"
    assert usage_tuple(info) == (5009, 0, 5000, 1000, 40, 9, "anthropic_exclusive")
    assert info.finish_reason == "end_turn"
    # The first text arrived in the third frame: its end offset is the TTFT position.
    assert info.first_text_at == len(chunk(START) + chunk(BLOCK_START) + chunk(TEXT))
    # The Anthropic usage won, so raw_usage is the Anthropic block, not the metrics.
    assert info.usage is not None and "inputTokenCount" not in info.usage.raw


def test_the_anthropic_usage_wins_over_differing_invocation_metrics() -> None:
    odd = {**METRICS, "inputTokenCount": 999, "outputTokenCount": 999}
    odd_stop = {"type": "message_stop", "amazon-bedrock-invocationMetrics": odd}
    body = b"".join(chunk(e) for e in (START, TEXT, DELTA, odd_stop))
    info = invoke_model.parse_response(200, body, "bedrock", True)
    assert usage_tuple(info)[:5] == (5009, 0, 5000, 1000, 40)


def test_the_invocation_metrics_are_used_when_no_event_carried_usage() -> None:
    bare_start = {"type": "message_start", "message": {"model": "claude-sonnet-4-5-20250929"}}
    bare_delta = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}
    body = b"".join(chunk(e) for e in (bare_start, TEXT, bare_delta, STOP))
    info = invoke_model.parse_response(200, body, "bedrock", True)
    assert info.outcome == "ok"
    # inputTokenCount excludes the cache, like Anthropic's input_tokens; no TTL split reported.
    assert usage_tuple(info) == (5009, 0, 5000, None, 40, 9, "anthropic_exclusive")
    assert info.usage is not None and info.usage.raw == METRICS


def test_invocation_metrics_beside_the_bytes_field_are_read_too() -> None:
    # Unconfirmed shape (every fixture found has them inside the event): accepted anyway.
    bare_stop = {"type": "message_stop"}
    body = chunk({"type": "message_start", "message": {}}) + chunk(
        bare_stop, **{"amazon-bedrock-invocationMetrics": METRICS}
    )
    info = invoke_model.parse_response(200, body, "bedrock", True)
    assert (info.outcome, usage_tuple(info)[:5]) == ("ok", (5009, 0, 5000, None, 40))


def test_a_non_streamed_body_without_usage_falls_back_to_the_token_count_headers() -> None:
    headers = [
        ("X-Amzn-Bedrock-Input-Token-Count", "7"),
        ("X-Amzn-Bedrock-Output-Token-Count", "20"),
        ("X-Amzn-Bedrock-Cache-Read-Input-Token-Count", "300"),
        ("X-Amzn-Bedrock-Cache-Write-Input-Token-Count", "0"),
    ]
    llama = b'{"generation":"hi","stop_reason":"stop"}'
    info = invoke_model.parse_response(200, llama, "bedrock", False, headers)
    assert usage_tuple(info)[:5] == (307, 300, 0, None, 20)
    # The body's own usage wins over the headers.
    body = orjson.dumps(CACHE_READ_MESSAGE)
    info = invoke_model.parse_response(200, body, "bedrock", False, headers)
    assert usage_tuple(info)[:5] == (4212, 4200, 0, 0, 35)
    # No usage anywhere: unknown, not zero.
    assert invoke_model.parse_response(200, llama, "bedrock", False).usage is None


def test_a_stream_cut_before_any_usage_has_unknown_usage_and_is_interrupted() -> None:
    first = chunk(START)
    info = invoke_model.parse_response(200, first[: len(first) // 2], "bedrock", True)
    assert (info.outcome, info.usage) == ("interrupted", None)


def test_a_stream_cut_mid_way_keeps_only_message_starts_input_side_as_messages_does() -> None:
    body = cache_write_stream()
    cut = len(chunk(START) + chunk(BLOCK_START) + chunk(TEXT)) + 7  # inside BLOCK_STOP's frame
    info = invoke_model.parse_response(200, body[:cut], "bedrock", True)
    assert info.outcome == "interrupted"
    # Output is NULL (message_start's 1 is a placeholder); input and cache are known.
    assert usage_tuple(info)[:5] == (5009, 0, 5000, 1000, None)


def test_an_exception_message_mid_stream_is_a_stream_error_with_its_type() -> None:
    body = chunk(START) + encode_message(
        {
            ":message-type": "exception",
            ":exception-type": "modelStreamErrorException",
            ":content-type": "application/json",
        },
        b'{"message":"Model stream error","originalStatusCode":529}',
    )
    info = invoke_model.parse_response(200, body, "bedrock", True)
    assert (info.outcome, info.error_type, info.error_message) == (
        "stream_error",
        "modelStreamErrorException",
        "Model stream error",
    )


def test_an_http_error_takes_its_type_from_the_amzn_errortype_header() -> None:
    info = invoke_model.parse_response(
        400,
        b'{"message":"The provided model identifier is invalid."}',
        "bedrock",
        False,
        [("x-amzn-errortype", "ValidationException:http://internal.amazon.com/coral/x/")],
    )
    assert (info.outcome, info.error_type, info.usage) == (
        "http_error",
        "ValidationException",
        None,
    )


def test_a_binary_stream_without_a_content_type_header_is_still_read() -> None:
    exchange = Exchange(
        source="t.jsonl",
        index=1,
        started_at=datetime(2026, 12, 1, tzinfo=UTC),
        method="POST",
        url=STREAM_URL,
        request_headers=[],
        request_body=orjson.dumps(REQUEST),
        status=200,
        response_headers=[],
        response_body=cache_write_stream() + b"\xff",  # trailing junk: not UTF-8, not a frame
    )
    norm = normalise(exchange, "r1")
    assert (norm.row["api"], norm.row["provider"], norm.row["stream"]) == (
        "invoke_model",
        "bedrock",
        True,
    )
    assert norm.row["cache_write_tokens"] == 5000


# --- end to end ------------------------------------------------------------------------------

QUERY = (
    "SELECT path, provider, api, model, requested_model, stream, outcome, usage_status, "
    "input_tokens, cache_read_tokens, cache_write_tokens, cache_write_1h_tokens, "
    "uncached_input_tokens, output_tokens, usage_semantics, finish_reason, segment_count, "
    "cache_breakpoints, cache_ttls FROM requests ORDER BY started_at"
)


def test_cacheaudit_ingest_of_an_invoke_capture_gives_the_expected_requests_rows(
    tmp_path: Path, cli: Any
) -> None:
    t0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    source = tmp_path / "bedrock.jsonl"
    with source.open("wb") as fh:
        for i, (url, ctype, body) in enumerate(
            [
                (INVOKE_URL, "application/json", orjson.dumps(CACHE_READ_MESSAGE)),
                (STREAM_URL, "application/vnd.amazon.eventstream", cache_write_stream()),
            ]
        ):
            record = make_record(
                started_at=t0 + timedelta(seconds=i),
                method="POST",
                url=url,
                request_headers=[("content-type", "application/json")],
                request_body=orjson.dumps(REQUEST),
                status=200,
                response_headers=[("content-type", ctype)],
                response_body=body,
                end_ms=900.0,
                record_id=f"invoke-{i}",
            )
            fh.write(dumps_record(record))
    wh = tmp_path / "wh"
    result = cli("ingest", str(source), "--warehouse", str(wh))
    assert result.returncode == 0, result.stderr
    out = cli("sql", QUERY, "--format", "json", "--warehouse", str(wh))
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert len(rows) == 2
    common = {
        "provider": "bedrock",
        "api": "invoke_model",
        "model": "claude-sonnet-4-5-20250929",
        "requested_model": MODEL_ID,
        "outcome": "ok",
        "usage_status": "reported",
        "usage_semantics": "anthropic_exclusive",
        "finish_reason": "end_turn",
        "segment_count": 5,
        "cache_breakpoints": [1, 4],
        "cache_ttls": ["5m", "1h"],
    }
    assert rows[0] == {
        **common,
        "path": f"/model/{ENCODED_ID}/invoke",
        "stream": False,
        "input_tokens": 4212,
        "cache_read_tokens": 4200,
        "cache_write_tokens": 0,
        "cache_write_1h_tokens": 0,
        "uncached_input_tokens": 12,
        "output_tokens": 35,
    }
    assert rows[1] == {
        **common,
        "path": f"/model/{ENCODED_ID}/invoke-with-response-stream",
        "stream": True,
        "input_tokens": 5009,
        "cache_read_tokens": 0,
        "cache_write_tokens": 5000,
        "cache_write_1h_tokens": 1000,
        "uncached_input_tokens": 9,
        "output_tokens": 40,
    }
