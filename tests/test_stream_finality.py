"""Which usage object of a stream is final, and what a stream's end says (Gemini usage metadata,
the last non-null usage of a stream, in-band errors).

- Gemini/Vertex: a `usageMetadata` without counts (`{"trafficType": "ON_DEMAND"}`) is no usage
  report; counts before the finish chunk are running totals, prompt included, so they are never
  final; a bare JSON error after the last SSE event is a stream error.
- Chat Completions: an all-zero usage placeholder on an early chunk is not a count; a refusal is
  answer text (time to first token), on the fast reader and the reference reader alike.
"""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fast_path_equivalence import PROPERTY, assert_same_response, both_rows, exchange_with

from pipeline.dialects import chat_completions as cc
from pipeline.dialects import generate_content as gc
from pipeline.normalise import Normalised, normalise
from pipeline.streams import trailing_json

VERTEX_URL = (
    "https://us-central1-aiplatform.googleapis.com/v1/projects/p/locations/us-central1/"
    "publishers/google/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
)
COUNTLESS = {"trafficType": "ON_DEMAND"}


def gemini_chunk(text: str, usage: Any = None, finish: str | None = None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": [{"text": text}]}}
    if finish:
        candidate["finishReason"] = finish
    chunk: dict[str, Any] = {"candidates": [candidate], "modelVersion": "gemini-2.5-flash"}
    if usage is not None:
        chunk["usageMetadata"] = usage
    return chunk


def gemini_sse(*chunks: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + orjson.dumps(c) + b"\r\n\r\n" for c in chunks)


def gemini_array(*chunks: dict[str, Any]) -> bytes:
    return b"[" + b",\r\n".join(orjson.dumps(c) for c in chunks) + b"]"


def gemini(body: bytes) -> Any:
    return gc.parse_response(200, body, "google", True)


def gemini_row(body: bytes) -> dict[str, Any]:
    norm = normalise(exchange_with(body, url=VERTEX_URL), "rid")
    assert isinstance(norm, Normalised), norm
    return norm.row


FINAL = {"promptTokenCount": 19, "candidatesTokenCount": 5, "totalTokenCount": 24, **COUNTLESS}


# --- Gemini: a usageMetadata without counts --------------------------------------------------


def test_a_vertex_stream_cut_before_its_counts_has_unknown_usage_not_zero() -> None:
    body = gemini_sse(gemini_chunk("1", COUNTLESS), gemini_chunk(", 2", COUNTLESS))
    row = gemini_row(body)
    assert (row["outcome"], row["usage_status"]) == ("interrupted", "missing")
    for column in ("input_tokens", "cache_read_tokens", "uncached_input_tokens", "output_tokens"):
        assert row[column] is None, column


def test_a_countless_usage_metadata_after_the_final_one_does_not_replace_it() -> None:
    body = gemini_sse(
        gemini_chunk("1", COUNTLESS),
        gemini_chunk("3", FINAL, "STOP"),
        {"candidates": [{"index": 0}], "usageMetadata": COUNTLESS},
    )
    info = gemini(body)
    assert info.outcome == "ok" and info.usage is not None
    assert (info.usage.input_tokens, info.usage.output_tokens) == (19, 5)


def test_a_countless_usage_metadata_is_no_usage_report_in_a_plain_response() -> None:
    body = orjson.dumps(gemini_chunk("x", COUNTLESS, "STOP"))
    assert gc.parse_response(200, body, "google", False).usage is None
    assert gc.normalise_usage(COUNTLESS) is None
    # proto3 zeros still hold for an object that carries the prompt or total count.
    usage = gc.normalise_usage({"totalTokenCount": 0})
    assert usage is not None and (usage.input_tokens, usage.output_tokens) == (0, 0)


# --- Gemini: counts before the finish chunk are not final ------------------------------------


def prompt_count_changes() -> list[dict[str, Any]]:
    """The real Gemini 2.0 sample: promptTokenCount 15 in early chunks, 13 in the last."""
    from conftest import SAMPLES

    raw = (SAMPLES / "gemini_2_0_stream_prompt_count_changes.sse").read_bytes()
    return [orjson.loads(e.strip()[5:]) for e in raw.split(b"\r\n\r\n") if e.strip()]


def test_a_gemini_stream_cut_before_its_last_chunk_has_unknown_prompt_count() -> None:
    chunks = prompt_count_changes()
    full = gemini(gemini_sse(*chunks))
    assert full.usage is not None and (full.usage.input_tokens, full.usage.output_tokens) == (13, 8)
    for body in (gemini_sse(*chunks[:2]), gemini_array(*chunks[:2])[:-1]):
        info = gemini(body)
        assert (info.outcome, info.usage) == ("interrupted", None)  # not the running 15


def test_a_gemini_stream_ended_by_an_error_before_its_finish_has_unknown_usage() -> None:
    usage = {"promptTokenCount": 2000, "candidatesTokenCount": 5, "thoughtsTokenCount": 150}
    error = {"error": {"code": 500, "status": "INTERNAL", "message": "Internal"}}
    info = gemini(gemini_sse(gemini_chunk("Hello", usage), error))
    assert (info.outcome, info.error_type, info.usage) == ("stream_error", "INTERNAL", None)


def test_a_complete_gemini_stream_whose_finish_chunk_has_no_usage_has_unknown_usage() -> None:
    running = {"promptTokenCount": 2000, "candidatesTokenCount": 5, "thoughtsTokenCount": 150}
    chunks = (gemini_chunk("Hello", running), gemini_chunk(" world", None, "STOP"))
    for body in (gemini_sse(*chunks), gemini_array(*chunks)):
        info = gemini(body)
        # The finish chunk added text: the running 155 is not the output count.
        assert (info.outcome, info.finish_reason, info.usage) == ("ok", "STOP", None)
    row = gemini_row(gemini_sse(*chunks))
    assert (row["outcome"], row["usage_status"], row["output_tokens"]) == ("ok", "missing", None)


def test_a_usage_only_chunk_after_the_finish_chunk_is_final() -> None:
    final = {"promptTokenCount": 2000, "candidatesTokenCount": 12, "thoughtsTokenCount": 150}
    info = gemini(
        gemini_sse(
            gemini_chunk("Hello", {"promptTokenCount": 2000, "candidatesTokenCount": 5}),
            gemini_chunk("!", None, "STOP"),
            {"usageMetadata": final, "modelVersion": "gemini-2.5-flash"},
        )
    )
    assert info.outcome == "ok" and info.usage is not None
    assert (info.usage.input_tokens, info.usage.output_tokens) == (2000, 162)


# --- Gemini: a bare JSON error after the events ----------------------------------------------

# vercel/ai's test body "captured from a real streamGenerateContent response" (Vertex).
BARE_ERROR = (
    b'{\n\n  "error": {\n\n    "code": 429,\n\n    "message": "Resource exhausted. Please try '
    b'again later.",\n\n    "status": "RESOURCE_EXHAUSTED"\n\n  }\n\n}\n\n\n'
)
THOUGHT = {
    "candidates": [{"content": {"role": "model", "parts": [{"text": "**A**", "thought": True}]}}],
    "usageMetadata": COUNTLESS,
    "modelVersion": "gemini-2.5-flash",
}


def test_a_bare_json_error_after_a_gemini_stream_is_a_stream_error() -> None:
    for sep in (b"\n\n", b"\r\n\r\n", b"\n"):
        body = b"data: " + orjson.dumps(THOUGHT) + sep + BARE_ERROR
        info = gemini(body)
        assert (info.outcome, info.error_type) == ("stream_error", "RESOURCE_EXHAUSTED"), sep
        assert info.error_message == "Resource exhausted. Please try again later."
        assert info.usage is None and info.first_reasoning_at is not None
    row = gemini_row(b"data: " + orjson.dumps(THOUGHT) + b"\n\n" + BARE_ERROR)
    assert (row["outcome"], row["error_type"], row["usage_status"]) == (
        "stream_error",
        "RESOURCE_EXHAUSTED",
        "missing",
    )


def test_a_bare_json_error_cut_short_leaves_the_stream_interrupted() -> None:
    body = b"data: " + orjson.dumps(THOUGHT) + b"\n\n" + BARE_ERROR[:60]
    assert gemini(body).outcome == "interrupted"


def test_trailing_json_reads_only_text_after_the_last_sse_line() -> None:
    event = b"data: " + orjson.dumps(THOUGHT)
    assert trailing_json(event + b"\r\n\r\n") is None  # an ordinary stream
    assert trailing_json(event) is None  # its last event without the blank line
    assert trailing_json(event + b"\n\n: keep-alive\n\n") is None
    assert trailing_json(event + b"\n\n" + BARE_ERROR[:60]) is None  # not JSON
    assert trailing_json(event + b"\r\n\r\n" + BARE_ERROR) == orjson.loads(BARE_ERROR)
    assert trailing_json(event + b"\r" + b'{"error": 1}') == {"error": 1}


def test_a_bare_json_object_that_is_not_an_error_is_not_a_chunk() -> None:
    body = b"data: " + orjson.dumps(gemini_chunk("x", FINAL)) + b"\n\n" + b'{"note": "x"}\n'
    info = gemini(body)
    assert (info.outcome, info.error_type) == ("interrupted", None)


# --- Chat Completions: an early zero placeholder ---------------------------------------------

ZERO = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


def chat(delta: dict[str, Any], finish: str | None = None, usage: Any = "omit") -> bytes:
    chunk: dict[str, Any] = {
        "id": "c",
        "object": "chat.completion.chunk",
        "model": "qwen3",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage != "omit":
        chunk["usage"] = usage
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


FINAL_USAGE = b'data: {"choices":[],"usage":{"prompt_tokens":38,"completion_tokens":4}}\n\n'
DONE = b"data: [DONE]\n\n"
PLACEHOLDER_CUT = (
    chat({"role": "assistant", "content": ""}, usage=ZERO)
    + chat({"content": "Hi"})
    + chat({"content": " there"})
)


def test_a_chat_stream_cut_after_a_zero_placeholder_usage_has_unknown_usage() -> None:
    assert cc._parse_plain_stream(PLACEHOLDER_CUT, "openai") is not None
    response = assert_same_response(PLACEHOLDER_CUT)
    assert (response.outcome, response.usage) == ("interrupted", None)
    row = both_rows(PLACEHOLDER_CUT)
    assert (row["usage_status"], row["input_tokens"], row["usage_semantics"]) == (
        "missing",
        None,
        None,
    )


def test_a_zero_placeholder_is_no_usage_in_a_complete_stream_either() -> None:
    for placeholder in (ZERO, {}, {"prompt_tokens": 0}):
        body = chat({"content": "Hi"}, usage=placeholder) + chat({}, "stop") + DONE
        response = assert_same_response(body)
        assert (response.outcome, response.usage) == ("ok", None), placeholder


def test_the_final_usage_after_a_placeholder_is_read() -> None:
    body = PLACEHOLDER_CUT + chat({}, "stop") + FINAL_USAGE + DONE
    response = assert_same_response(body)
    assert response.outcome == "ok" and response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens) == (38, 4)


def test_a_running_count_before_a_later_placeholder_is_still_the_last_usage() -> None:
    """A placeholder after a real running count does not hide it (the fast reader searches on
    past a skipped placeholder, as the reference reader keeps the earlier one)."""
    body = chat({"content": "a"}, usage={"prompt_tokens": 40, "completion_tokens": 1}) + chat(
        {"content": "b"}, usage=ZERO
    )
    response = assert_same_response(body)
    assert response.outcome == "interrupted" and response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens) == (40, None)


def test_zero_usage_on_the_finish_chunk_is_what_the_server_reported() -> None:
    body = chat({"content": "Hi"}) + chat({}, "stop", ZERO) + DONE
    response = assert_same_response(body)
    assert response.usage is not None and response.usage.input_tokens == 0


# --- Chat Completions: a refusal is answer text ----------------------------------------------


def test_a_streamed_refusal_is_the_first_answer_text_on_both_paths() -> None:
    body = (
        chat({"role": "assistant", "content": None, "refusal": None})
        + chat({"refusal": "I can't"})
        + chat({"refusal": " help"})
        + chat({}, "stop")
        + FINAL_USAGE
        + DONE
    )
    assert cc._parse_plain_stream(body, "openai") is not None
    response = assert_same_response(body)
    second_event_end = body.index(b"\n\n", body.index(b"\n\n") + 2) + 2
    assert response.first_text_at == second_event_end
    row = both_rows(body)
    assert row["ttft_ms"] == 5.0 * -(-second_event_end // 97)  # 97-byte chunks, 5 ms apart


def test_a_non_streamed_refusal_is_answer_text() -> None:
    body = orjson.dumps(
        {
            "model": "gpt-4o",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": None, "refusal": "I can't."},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 3},
        }
    )
    info = cc.parse_response(200, body, "openai", False)
    assert info.first_text_at == len(body)


# --- both chat readers agree on placeholders and refusals ------------------------------------

CHAT_EVENTS = [
    chat({"role": "assistant", "content": ""}, usage=ZERO),
    chat({"content": None, "refusal": "No"}),
    chat({"refusal": ""}),
    chat({"content": "Hi"}),
    chat({"content": "a"}, usage={"prompt_tokens": 40, "completion_tokens": 1}),
    chat({}, usage={}),
    chat({}, "stop"),
    chat({}, "stop", ZERO),
    chat({}, "stop", {"prompt_tokens": 40, "completion_tokens": 9}),
    FINAL_USAGE,
    b'data: {"choices":[],"usage":{"prompt_tokens":0,"completion_tokens":0}}\n\n',
    DONE,
]


@settings(PROPERTY, max_examples=200)
@given(
    events=st.lists(st.sampled_from(CHAT_EVENTS), max_size=8),
    cut=st.integers(0, 100),
    cut_it=st.booleans(),
)
def test_both_chat_readers_agree_on_placeholders_and_refusals(
    events: list[bytes], cut: int, cut_it: bool
) -> None:
    body = b"".join(events)
    if cut_it:
        body = body[: len(body) * cut // 100]
    assert_same_response(body)
