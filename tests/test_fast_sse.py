"""The fast reader of plain chat-completions streams gives exactly what the reference reader
gives: on generated streams (cut anywhere, usage on every chunk or only the last, tool calls,
reasoning, `data:` without a space, errors, odd values) and on every stream sample."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from conftest import SAMPLES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_samples import response_for

from pipeline.dialects import chat_completions as cc
from pipeline.streams import is_plain_data_stream, plain_frame_at

STREAM_SAMPLES = sorted(
    p.name for p in SAMPLES.iterdir() if p.name.endswith((".sse", ".chunks.jsonl"))
)


def both(body: bytes) -> tuple[Any, Any]:
    return cc._parse_stream(body, "openai"), cc._parse_any_stream(body, "openai")


# --- generated streams ------------------------------------------------------------------------

texts = st.sampled_from(["", "Hi", " there", "é", "你好", 'say "usage":{', "[DONE]", "\n"])
falsy_or_text = st.one_of(st.none(), texts, st.sampled_from([[], {}, False, 0, 0.0]))
finish_values = st.one_of(
    st.none(), st.sampled_from(["stop", "length", "tool_calls", "", 1, True, 0])
)
usages = st.fixed_dictionaries(
    {"prompt_tokens": st.integers(0, 9000), "completion_tokens": st.integers(0, 900)},
    optional={
        "prompt_cache_hit_tokens": st.integers(0, 9000),
        "prompt_tokens_details": st.fixed_dictionaries({"cached_tokens": st.integers(0, 9000)}),
        "completion_tokens_details": st.fixed_dictionaries(
            {"reasoning_tokens": st.integers(0, 900)}
        ),
    },
)
tool_calls = st.one_of(
    st.none(),
    st.just([]),
    st.just([{"index": 0, "id": "call_1", "function": {"name": "f", "arguments": ""}}]),
)


@st.composite
def delta(draw: st.DrawFn, keys: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in keys:
        if draw(st.integers(0, 3)):
            out[key] = draw(tool_calls if key == "tool_calls" else falsy_or_text)
    return out


@st.composite
def chunk(draw: st.DrawFn, null_usage: bool) -> Any:
    """One chunk of a chat stream, mostly the kinds real servers send, some odd ones."""
    kind = draw(
        st.sampled_from(
            ["text", "reasoning", "tool", "finish", "usage", "finish_usage", "message", "odd"]
        )
    )
    out: dict[str, Any] = {"id": "c1", "object": "chat.completion.chunk"}
    if draw(st.integers(0, 5)):
        out["model"] = draw(st.sampled_from(["deepseek-v4", "gpt-4.1", 7]))
    keys = {
        "text": ("content",),
        "reasoning": ("reasoning_content", "reasoning", "content"),
        "tool": ("tool_calls", "content"),
        "message": ("content", "reasoning_content", "tool_calls"),
    }.get(kind, ())
    choice: dict[str, Any] = {"index": 0, "message" if kind == "message" else "delta": {}}
    if keys:
        choice["message" if kind == "message" else "delta"] = draw(delta(keys))
    if kind in ("finish", "finish_usage") or draw(st.integers(0, 4)) == 0:
        choice["finish_reason"] = draw(finish_values)
    elif draw(st.booleans()):
        choice["finish_reason"] = None
    out["choices"] = [] if kind == "usage" else [choice] * draw(st.integers(1, 2))
    if kind == "odd":
        out["choices"] = draw(st.sampled_from([5, "abc", {"a": 1}, True, [1, "x", None], None]))
    if kind in ("usage", "finish_usage"):
        out["usage"] = draw(usages)
    elif null_usage:
        out["usage"] = None
    if draw(st.integers(0, 20)) == 0:
        out["error"] = {"message": "overloaded", "type": "server_error"}
    return out


@st.composite
def chunks(draw: st.DrawFn) -> list[Any]:
    out: list[Any] = draw(st.lists(chunk(draw(st.booleans())), max_size=10))
    if draw(st.integers(0, 10)) == 0:
        out.insert(
            draw(st.integers(0, len(out))), draw(st.sampled_from(["{not json", "[1,2]", ""]))
        )
    return out


def encode(chunk: Any, style: str) -> bytes:
    if isinstance(chunk, str):
        return chunk.encode()
    if style == "spaced":  # Python's json.dumps defaults, as some servers send
        return json.dumps(chunk).encode()
    if style == "ascii":
        return json.dumps(chunk, separators=(",", ":"), ensure_ascii=True).encode()
    return orjson.dumps(chunk)


@st.composite
def streams(draw: st.DrawFn) -> bytes:
    style = draw(st.sampled_from(["compact", "compact", "spaced", "ascii"]))
    prefix = draw(st.sampled_from([b"data: ", b"data: ", b"data:", b"data:  "]))
    frames = [prefix + encode(c, style) + b"\n\n" for c in draw(chunks())]
    if draw(st.booleans()):
        frames.append(prefix + b"[DONE]" + draw(st.sampled_from([b"", b"  "])) + b"\n\n")
    odd = draw(st.sampled_from([None] * 6 + ["comment", "event", "crlf", "two_lines", "triple"]))
    if odd and frames:
        i = draw(st.integers(0, len(frames) - 1))
        if odd == "comment":
            frames.insert(i, b": keep-alive\n\n")
        elif odd == "event":
            frames[i] = b"event: error\n" + frames[i]
        elif odd == "crlf":
            frames[i] = frames[i].replace(b"\n", b"\r\n")
        elif odd == "two_lines":
            frames[i] = frames[i][:-2] + b"\ndata: {}\n\n"
        else:
            frames[i] += b"\n"
    body = b"".join(frames)
    if body and draw(st.booleans()):
        body = body[: draw(st.integers(1, len(body)))]  # the connection dropped here
    return body or b"data: "


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=streams())
def test_the_fast_reader_agrees_with_the_reference_reader_on_generated_streams(
    body: bytes,
) -> None:
    fast, reference = both(body)
    assert fast == reference


@settings(max_examples=200, deadline=None)
@given(body=streams())
def test_plain_compact_streams_without_errors_take_the_fast_path(body: bytes) -> None:
    *frames, tail = body.split(b"\n\n")
    plain = (
        all(f.startswith(b"data:") and b"\n" not in f for f in frames)
        and (not tail or (tail.startswith(b"data:") and b"\n" not in tail.rstrip(b"\n")))
        and tail.count(b"\n") <= 1
        and b"\r" not in body
    )
    if plain and b'"error"' not in body and b"\\u00" not in body:
        assert cc._parse_plain_stream(body, "openai") is not None


# --- hand-made cases --------------------------------------------------------------------------


def test_a_plain_stream_is_recognised_and_other_framings_are_not() -> None:
    assert is_plain_data_stream(b'data: {"a":1}\n\ndata: [DONE]\n\n')
    assert is_plain_data_stream(b'data: {"a":1}\n\ndata: {"b"')  # cut mid-event
    assert is_plain_data_stream(b'data:{"a":1}\n')
    assert not is_plain_data_stream(b'data: {"a":1}\n\n: keep-alive\n\n')
    assert not is_plain_data_stream(b'event: x\ndata: {"a":1}\n\n')
    assert not is_plain_data_stream(b'data: {"a":1}\ndata: {"b":2}\n\n')
    assert not is_plain_data_stream(b'data: {"a":1}\r\n\r\n')
    assert not is_plain_data_stream(b'data: {"a":1}\n\n\ndata: {"b":2}\n\n')


def test_the_event_around_a_byte_ends_past_its_blank_line_or_at_the_end_of_the_body() -> None:
    body = b'data: {"a":1}\n\ndata:  {"b":2} \n\ndata: {"c"'
    assert plain_frame_at(body, 3) == (0, b'{"a":1}', 15)
    assert plain_frame_at(body, 20) == (15, b'{"b":2}', 32)
    assert plain_frame_at(body, len(body) - 1) == (32, b'{"c"', len(body))


def test_usage_is_taken_from_the_last_chunk_that_has_it_not_from_a_key_inside_content() -> None:
    body = (
        b'data: {"choices":[{"delta":{"content":"\\"usage\\":{\\"prompt_tokens\\":1}"}}],'
        b'"usage":null}\n\n'
        b'data: {"choices":[{"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,'
        b'"completion_tokens":3}}\n\n'
        b'data: {"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":5}}\n\n'
    )
    fast = cc._parse_plain_stream(body, "openai")
    assert fast is not None and fast.usage is not None
    assert (fast.usage.input_tokens, fast.usage.output_tokens) == (40, 5)
    assert fast.outcome == "ok"  # the usage chunk came after the finish chunk
    assert fast.first_text_at == body.index(b"\n\n") + 2
    assert fast == cc._parse_any_stream(body, "openai")


def test_a_stream_with_an_error_chunk_or_an_escaped_key_is_left_to_the_reference_reader() -> None:
    error = b'data: {"error":{"message":"x"}}\n\n'
    escaped = b'data: {"\\u0075sage":{"prompt_tokens":1}}\n\n'
    assert cc._parse_plain_stream(error, "openai") is None
    assert cc._parse_plain_stream(escaped, "openai") is None
    assert cc._parse_stream(error, "openai").outcome == "stream_error"


# --- every stream sample, whole and cut ---------------------------------------------------------


@pytest.mark.parametrize("name", STREAM_SAMPLES)
def test_the_fast_reader_agrees_with_the_reference_reader_on_every_stream_sample(
    name: str,
) -> None:
    body = response_for(name)[2]
    cuts = sorted({len(body), *range(1, len(body), max(1, len(body) // 97))})
    for cut in cuts:
        fast, reference = both(body[:cut])
        assert fast == reference, (name, cut)
