"""The fast reader of chat-completions streams gives the same normalised row as the general
reader, whatever the stream: generated streams written byte by byte (spacing, key order,
duplicate and nested keys, escapes, every framing quirk), real streams cut at every byte offset,
and real streams rewritten (CRLF, BOM, no `[DONE]`, no usage chunk, an error chunk, vLLM usage
without cached counts, DeepSeek hit/miss counts).

The general reader is forced without touching the code: `_parse_stream` asks
`_parse_plain_stream` first and falls back to `_parse_any_stream` when it returns None, so
patching `_parse_plain_stream` to return None gives the general path's row.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_samples import exchange_for, response_for

from pipeline.dialects import chat_completions as cc
from pipeline.normalise import Normalised, RejectRecord, normalise
from pipeline.records import Exchange
from pipeline.streams import is_plain_data_stream

# Deterministic for CI: the same examples on every run, no example database on disk.
PROPERTY = settings(
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Chat-completions stream samples; the plain ones are the fast path's own ground.
CHAT_STREAMS = [
    "alibaba_qwen_compat_stream.chunks.jsonl",
    "deepseek_reasoner_stream_tool_call_cache_hit.chunks.jsonl",
    "deepseek_reasoner_stream_with_usage.sse",
    "deepseek_v4_flash_stream_usage_on_finish_chunk.chunks.jsonl",
    "groq_stream_midstream_error_no_done.sse",
    "openai_chat_stream_2026.chunks.jsonl",
    "openai_chat_stream_n3_with_usage.sse",
    "openai_chat_stream_with_usage.sse",
    "openrouter_chat_stream_cache.sse",
    "openrouter_chat_stream_midstream_error.sse",
    "zhipu_glm_stream_with_usage.sse",
]
# Comment lines or `event:` fields (not plain), or error objects: always the general reader.
GENERAL_ONLY = {
    "groq_stream_midstream_error_no_done.sse",
    "openrouter_chat_stream_cache.sse",
    "openrouter_chat_stream_midstream_error.sse",
}
PLAIN_STREAMS = [n for n in CHAT_STREAMS if n not in GENERAL_ONLY]


# --- the two paths -----------------------------------------------------------------------------


@contextmanager
def general_path() -> Iterator[None]:
    """Every chat-completions stream read by the general (reference) reader."""
    with mock.patch.object(cc, "_parse_plain_stream", lambda body, provider: None):
        yield


def fast_row(exchange: Exchange) -> Normalised | str:
    try:
        return normalise(exchange, "rid")
    except RejectRecord as exc:
        return f"reject: {exc}"


def general_row(exchange: Exchange) -> Normalised | str:
    with general_path():
        return fast_row(exchange)


def assert_same_response(body: bytes, provider: str = "openai") -> Any:
    """Both readers on one body: the dispatching reader's answer is the general reader's, and
    the fast reader either declines (None) or gives that same answer."""
    reference = cc._parse_any_stream(body, provider)
    fast = cc._parse_plain_stream(body, provider)
    assert fast is None or fast == reference, (body, fast, reference)
    assert cc._parse_stream(body, provider) == reference, body
    return reference


def exchange_with(
    body: bytes, *, url: str = "https://api.openai.com/v1/chat/completions"
) -> Exchange:
    """A streamed chat-completions exchange whose body arrived in 97-byte chunks, 5 ms apart (so
    first-token offsets become distinct arrival times in the row)."""
    chunks = [
        (5.0 * (i + 1), min(97, len(body) - pos)) for i, pos in enumerate(range(0, len(body), 97))
    ]
    request = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    return Exchange(
        source="t",
        index=1,
        started_at=exchange_for("openai_chat_stream_with_usage.sse").started_at,
        method="POST",
        url=url,
        request_headers=[],
        request_body=orjson.dumps(request),
        status=200,
        response_headers=[("content-type", "text/event-stream")],
        response_body=body,
        end_ms=1000.0,
        chunks=chunks or None,
    )


def assert_same_row(exchange: Exchange) -> Normalised | str:
    fast, general = fast_row(exchange), general_row(exchange)
    assert fast == general, exchange.response_body
    return fast


# --- streams written byte by byte ----------------------------------------------------------------


class Obj:
    """A JSON object as written: its (key, value) pairs in order, duplicates allowed."""

    def __init__(self, *pairs: tuple[str, Any]) -> None:
        self.pairs = list(pairs)


def write(value: Any, rnd: random.Random, escape_keys: bool) -> str:
    """JSON text with the liberties servers take: spacing (never a newline), `\\/` and `\\u`
    escapes in strings, key letters escaped when `escape_keys`."""

    def ws() -> str:
        return rnd.choice(["", "", "", " ", "  ", "\t"])

    def string(s: str, key: bool = False) -> str:
        out = []
        for ch in s:
            if ch in '"\\':
                out.append("\\" + ch)
            elif ch == "\n":
                out.append("\\n")
            elif ch == "/" and rnd.random() < 0.5:
                out.append("\\/")
            elif ord(ch) > 127 and rnd.random() < 0.5:
                out.append(f"\\u{ord(ch):04x}" if ord(ch) < 0x10000 else ch)
            elif key and escape_keys and rnd.random() < 0.3:
                out.append(f"\\u{ord(ch):04X}" if rnd.random() < 0.5 else f"\\u{ord(ch):04x}")
            else:
                out.append(ch)
        return '"' + "".join(out) + '"'

    if isinstance(value, Obj):
        items = [
            ws() + string(k, key=True) + ws() + ":" + ws() + write(v, rnd, escape_keys) + ws()
            for k, v in value.pairs
        ]
        return "{" + (",".join(items) if items else ws()) + "}"
    if isinstance(value, dict):
        return write(Obj(*value.items()), rnd, escape_keys)
    if isinstance(value, list):
        inner = ",".join(ws() + write(v, rnd, escape_keys) + ws() for v in value)
        return "[" + (inner if value else ws()) + "]"
    if isinstance(value, str):
        return string(value)
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


TEXTS = [
    *("", "Hi", " there", "é", "你好", "🙂", "a/b", "[DONE]", "data: [DONE]", "\n\n", "error"),
    *('say "usage":{"prompt_tokens":1}', '"finish_reason":"stop"', '"content":"x"'),
]
FALSY = [None, "", [], {}, False, 0, 0.0]

usage_values = st.one_of(
    # OpenAI: cached count in details (2026: a write count too), reasoning in details.
    st.builds(
        lambda p, c, cached, write_, r: {
            "prompt_tokens": p,
            "completion_tokens": c,
            "total_tokens": p + c,
            "prompt_tokens_details": {"cached_tokens": cached, **write_},
            "completion_tokens_details": {"reasoning_tokens": r},
        },
        st.integers(0, 90000),
        st.integers(0, 9000),
        st.integers(0, 90000),
        st.sampled_from([{}, {"cache_write_tokens": 0}, {"cache_write_tokens": 1024}]),
        st.integers(0, 900),
    ),
    # DeepSeek: hit + miss = prompt, cached_tokens mirrors hit.
    st.builds(
        lambda hit, miss, c: {
            "prompt_tokens": hit + miss,
            "completion_tokens": c,
            "prompt_cache_hit_tokens": hit,
            "prompt_cache_miss_tokens": miss,
            "prompt_tokens_details": {"cached_tokens": hit},
        },
        st.integers(0, 9000),
        st.integers(0, 9000),
        st.integers(0, 900),
    ),
    # vLLM / SGLang / Groq: no cached count at all (unknown, not 0), or details null.
    st.builds(
        lambda p, c, details: {"prompt_tokens": p, "completion_tokens": c, **details},
        st.integers(0, 9000),
        st.integers(0, 900),
        st.sampled_from([{}, {"prompt_tokens_details": None}, {"prompt_tokens_details": {}}]),
    ),
    # OpenRouter (cost), DashScope (creation count), Moonshot (top-level cached).
    st.builds(
        lambda p, extra: {"prompt_tokens": p, "completion_tokens": 3, **extra},
        st.integers(0, 9000),
        st.sampled_from(
            [
                {"cost": 0.000837, "is_byok": False},
                {"prompt_tokens_details": {"cached_tokens": 0, "cache_creation_input_tokens": 7}},
                {"cached_tokens": 5},
            ]
        ),
    ),
    # What a broken server may send.
    st.sampled_from([False, 0, [], "usage", {}, {"prompt_tokens": None}]),
)
tool_call_deltas = st.sampled_from(
    [
        [
            {
                "index": 0,
                "id": "call_1",
                "type": "function",
                "function": {"name": "f", "arguments": ""},
            }
        ],
        [{"index": 0, "function": {"arguments": '{"q":'}}],
        [{"index": 1, "id": "call_2", "function": {"name": "g"}}],
        [],
        None,
    ]
)


@st.composite
def choice(draw: st.DrawFn, index: int) -> dict[str, Any]:
    kind = draw(st.sampled_from(["text", "reasoning", "tool", "role", "finish", "empty", "msg"]))
    delta: dict[str, Any] = {}
    if kind == "role":
        delta = {"role": "assistant", "content": draw(st.sampled_from(["", None]))}
    elif kind == "text":
        delta = {"content": draw(st.sampled_from(TEXTS + FALSY))}
    elif kind == "reasoning":
        key = draw(st.sampled_from(["reasoning_content", "reasoning"]))
        delta = {key: draw(st.sampled_from(TEXTS + FALSY))}
        if draw(st.booleans()):
            delta["content"] = None
    elif kind == "tool":
        delta = {"tool_calls": draw(tool_call_deltas)}
        if draw(st.booleans()):
            delta["content"] = None
    elif kind == "msg":  # a non-streamed `message` inside a chunk (some gateways)
        delta = {
            "content": draw(st.sampled_from(TEXTS)),
            "function_call": draw(st.sampled_from([None, {"name": "f"}])),
        }
    out: dict[str, Any] = {"index": index, "message" if kind == "msg" else "delta": delta}
    if kind == "msg" and draw(st.booleans()):
        out["delta"] = {"content": "shadowed by message"}
    if draw(st.booleans()):
        out["logprobs"] = draw(
            st.sampled_from([None, {"content": [{"token": "x"}]}, {"content": []}])
        )
    if kind == "finish" or draw(st.integers(0, 5)) == 0:
        out["finish_reason"] = draw(
            st.sampled_from(
                ["stop", "length", "tool_calls", "content_filter", "error", "", None, 1, True]
            )
        )
    elif draw(st.booleans()):
        out["finish_reason"] = None
    if draw(st.integers(0, 9)) == 0:  # a decoy: the keys the fast path searches, nested
        out["extra"] = {"usage": {"prompt_tokens": 999}, "finish_reason": "stop", "model": "decoy",
                        "content": "x", "reasoning_content": "y", "tool_calls": [1]}  # fmt: skip
    return out


@st.composite
def chunk(draw: st.DrawFn, running: bool) -> Obj | str:
    """One event's data: mostly chunks real servers send, some odd ones. `running`: usage on
    every chunk, running totals (vLLM `continuous_usage_stats`)."""
    kind = draw(
        st.sampled_from(
            ["delta"] * 5 + ["usage_only", "finish_usage", "odd_choices", "error", "raw"]
        )
    )
    if kind == "raw":
        return draw(
            st.sampled_from(["[DONE]", "", "{not json", "[1,2]", "null", '"s"', "{}", " [DONE] "])
        )
    pairs: list[tuple[str, Any]] = [("id", "chatcmpl-1"), ("object", "chat.completion.chunk")]
    if draw(st.integers(0, 4)):
        pairs.append(("model", draw(st.sampled_from(["gpt-4o", "deepseek-v4-flash", "", 7, None]))))
    n = draw(st.integers(1, 3)) if draw(st.integers(0, 3)) == 0 else 1
    if kind == "usage_only":
        pairs.append(("choices", []))
    elif kind == "odd_choices":
        pairs.append(
            ("choices", draw(st.sampled_from([5, "abc", {"a": 1}, True, [1, "x", None], None])))
        )
    else:
        pairs.append(("choices", [draw(choice(i)) for i in range(n)]))
    if kind in ("usage_only", "finish_usage") or running:
        pairs.append(("usage", draw(usage_values)))
    elif draw(st.booleans()):
        pairs.append(("usage", None))
    if kind == "error":  # OpenRouter: an error object inside a 200 stream
        pairs.append(
            ("error", draw(st.sampled_from([{"message": "overloaded", "code": 502}, None])))
        )
    if draw(st.integers(0, 12)) == 0:  # a duplicate key: orjson keeps the last
        key = draw(st.sampled_from(["usage", "model", "choices"]))
        pairs.append((key, draw(st.sampled_from([None, {"prompt_tokens": 1}, "m2", []]))))
    if draw(st.booleans()):
        head, tail = pairs[:2], pairs[2:]
        pairs = head + draw(st.permutations(tail))
    return Obj(*pairs)


COMMENTS = [
    ": keep-alive",
    ": OPENROUTER PROCESSING",
    ":",
    # Comments holding what a data line would: only a reader of SSE fields skips them.
    ": -- [DONE]",
    ':    {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}',
]
FRAMINGS = ["plain"] * 6 + [
    "crlf",
    "cr",
    "bom",
    "comment",
    "event",
    "id",
    "two_lines",
    "triple",
    "leading_nl",
]


@st.composite
def streams(draw: st.DrawFn) -> bytes:
    rnd = draw(st.randoms(use_true_random=False))
    escape_keys = draw(st.integers(0, 15)) == 0
    prefix = draw(st.sampled_from(["data: ", "data: ", "data:", "data:  ", "data:\t"]))
    events = []
    running = draw(st.integers(0, 3)) == 0
    for c in draw(st.lists(chunk(running), max_size=9)):
        data = c if isinstance(c, str) else write(c, rnd, escape_keys)
        events.append(prefix + data)
    if draw(st.booleans()):
        events.append(prefix + draw(st.sampled_from(["[DONE]", "[DONE] ", " [DONE]"])))
    framing = draw(st.sampled_from(FRAMINGS))
    body = "".join(e + "\n\n" for e in events)
    if events and framing != "plain":
        i = draw(st.integers(0, len(events) - 1))
        if framing == "crlf":
            body = body.replace("\n", "\r\n")
        elif framing == "cr":
            body = body.replace("\n", "\r")
        elif framing == "bom":
            body = "\ufeff" + body
        elif framing == "comment":
            events.insert(i, draw(st.sampled_from(COMMENTS)))
            body = "".join(e + "\n\n" for e in events)
        elif framing == "event":
            events[i] = draw(st.sampled_from(["event: error\n", "event: message\n"])) + events[i]
            body = "".join(e + "\n\n" for e in events)
        elif framing == "id":
            events[i] = "id: 7\n" + events[i]
            body = "".join(e + "\n\n" for e in events)
        elif framing == "two_lines":  # one JSON value split over two data lines
            e = events[i]
            cut = e.find(",")
            if cut > 0:
                events[i] = e[:cut] + "\n" + prefix + e[cut:]
            body = "".join(e + "\n\n" for e in events)
        elif framing == "triple":
            body = body.replace("\n\n", "\n\n\n", 1)
        else:
            body = "\n" + body
    ending = draw(st.sampled_from(["\n\n", "\n\n", "\n", ""]))
    if body.endswith("\n\n") and ending != "\n\n":
        body = body[: len(body) - 2] + ending
    raw = body.encode()
    if raw and draw(st.integers(0, 2)) == 0:
        raw = raw[: draw(st.integers(0, len(raw)))]  # the connection dropped here
    return raw


@settings(PROPERTY, max_examples=250)
@given(body=streams())
def test_both_readers_give_the_same_response_on_generated_streams(body: bytes) -> None:
    assert_same_response(body)


@settings(PROPERTY, max_examples=120)
@given(body=streams())
def test_both_paths_give_the_same_normalised_row_on_generated_streams(body: bytes) -> None:
    assert_same_row(exchange_with(body))


@settings(PROPERTY, max_examples=100)
@given(body=streams())
def test_a_plain_stream_without_errors_or_escaped_keys_takes_the_fast_path(body: bytes) -> None:
    if (
        is_plain_data_stream(body)
        and b'"error"' not in body
        and b"\\u00" not in body  # any \u00XX may be an escaped key letter
    ):
        assert cc._parse_plain_stream(body, "openai") is not None


# --- what the row says, whichever path read it ---------------------------------------------------

OPENAI_FINISH = (
    b'data: {"id":"c","model":"gpt-4o","choices":[{"index":0,"delta":{"content":"Hi"},'
    b'"finish_reason":null}]}\n\n'
    b'data: {"id":"c","model":"gpt-4o","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}'
    b"\n\n"
)
OPENAI_USAGE = (
    b'data: {"id":"c","model":"gpt-4o","choices":[],"usage":{"prompt_tokens":2006,'
    b'"completion_tokens":300,"prompt_tokens_details":{"cached_tokens":1920},'
    b'"completion_tokens_details":{"reasoning_tokens":64}}}\n\n'
)
DONE = b"data: [DONE]\n\n"


def both_rows(
    body: bytes, url: str = "https://api.openai.com/v1/chat/completions"
) -> dict[str, Any]:
    norm = assert_same_row(exchange_with(body, url=url))
    assert isinstance(norm, Normalised), norm
    return norm.row


def test_a_complete_stream_reports_its_usage_on_both_paths() -> None:
    body = OPENAI_FINISH + OPENAI_USAGE + DONE
    assert cc._parse_plain_stream(body, "openai") is not None
    row = both_rows(body)
    assert (row["outcome"], row["usage_status"], row["finish_reason"]) == ("ok", "reported", "stop")
    assert (row["input_tokens"], row["cache_read_tokens"], row["uncached_input_tokens"]) == (
        2006,
        1920,
        86,
    )
    assert (row["output_tokens"], row["reasoning_tokens"]) == (300, 64)
    first_event_end = body.index(b"\n\n") + 2  # arrived in 97-byte chunks, 5 ms apart
    assert row["ttft_ms"] == 5.0 * -(-first_event_end // 97)


def test_a_stream_cut_before_its_usage_chunk_has_unknown_usage_not_zero() -> None:
    for body in (OPENAI_FINISH, OPENAI_FINISH + OPENAI_USAGE[:-40]):
        row = both_rows(body)
        assert row["outcome"] == "interrupted"
        assert row["usage_status"] == "missing"
        for column in ("input_tokens", "cache_read_tokens", "output_tokens", "reasoning_tokens"):
            assert row[column] is None, column


def test_a_stream_without_done_but_with_usage_after_the_finish_is_complete() -> None:
    row = both_rows(OPENAI_FINISH + OPENAI_USAGE)
    assert (row["outcome"], row["input_tokens"], row["output_tokens"]) == ("ok", 2006, 300)


def test_a_stream_whose_server_sends_no_usage_chunk_has_unknown_usage() -> None:
    row = both_rows(OPENAI_FINISH + DONE)
    assert (row["outcome"], row["usage_status"], row["input_tokens"]) == ("ok", "missing", None)


def test_vllm_usage_without_cached_counts_leaves_them_unknown() -> None:
    usage = b'data: {"choices":[],"usage":{"prompt_tokens":50,"completion_tokens":7}}\n\n'
    row = both_rows(OPENAI_FINISH + usage + DONE)
    assert (row["input_tokens"], row["output_tokens"]) == (50, 7)
    assert row["cache_read_tokens"] is None and row["uncached_input_tokens"] is None


def test_deepseek_hit_and_miss_counts_give_cache_read_and_uncached_input() -> None:
    finish_with_usage = (
        b'data: {"model":"deepseek-chat","choices":[{"index":0,"delta":{"content":"x"},'
        b'"finish_reason":"stop"}],"usage":{"prompt_tokens":563,"completion_tokens":9,'
        b'"prompt_cache_hit_tokens":512,"prompt_cache_miss_tokens":51}}\n\n'
    )
    row = both_rows(finish_with_usage + DONE, url="https://api.deepseek.com/chat/completions")
    assert (row["input_tokens"], row["cache_read_tokens"], row["uncached_input_tokens"]) == (
        563,
        512,
        51,
    )
    assert row["usage_semantics"] == "deepseek_hit_miss"
    cut = both_rows(finish_with_usage[:-30], url="https://api.deepseek.com/chat/completions")
    assert (cut["usage_status"], cut["cache_read_tokens"]) == ("missing", None)


def test_reasoning_before_text_is_timed_separately_on_both_paths() -> None:
    reasoning = (
        b'data: {"choices":[{"index":0,"delta":{"reasoning_content":"think"}}],"usage":null}\n\n'
    )
    body = reasoning * 3 + OPENAI_FINISH + OPENAI_USAGE + DONE
    row = both_rows(body)
    assert row["first_reasoning_ms"] == 5.0
    assert row["ttft_ms"] is not None and row["ttft_ms"] > row["first_reasoning_ms"]


def test_tool_call_deltas_count_as_the_first_answer_on_both_paths() -> None:
    tool = (
        b'data: {"choices":[{"index":0,"delta":{"content":null,"tool_calls":[{"index":0,'
        b'"id":"call_1","function":{"name":"f","arguments":""}}]}}]}\n\n'
    )
    response = assert_same_response(tool + OPENAI_USAGE + DONE)
    assert response.first_text_at == len(tool)


def test_choices_of_several_completions_finish_in_their_own_chunks() -> None:
    def finish(i: int, reason: str) -> bytes:
        return b'data: {"choices":[{"index":%d,"delta":{},"finish_reason":"%s"}]}\n\n' % (
            i,
            reason.encode(),
        )

    body = finish(0, "stop") + finish(1, "length") + finish(2, "stop") + OPENAI_USAGE + DONE
    response = assert_same_response(body)
    assert (response.outcome, response.finish_reason) == ("ok", "stop")
    assert assert_same_response(body[: body.index(b"[DONE]") - 6]).outcome == "ok"


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"\xef\xbb\xbf" + OPENAI_FINISH + OPENAI_USAGE + DONE, id="bom"),
        pytest.param((OPENAI_FINISH + OPENAI_USAGE + DONE).replace(b"\n", b"\r\n"), id="crlf"),
        pytest.param(b": keep-alive\n\n" + OPENAI_FINISH + OPENAI_USAGE + DONE, id="comment"),
        pytest.param(
            OPENAI_FINISH.replace(b"data: ", b"data:") + OPENAI_USAGE + DONE, id="no-space"
        ),
    ],
)
def test_every_framing_of_a_stream_gives_the_rows_of_the_plain_framing(body: bytes) -> None:
    plain = both_rows(OPENAI_FINISH + OPENAI_USAGE + DONE)
    row = both_rows(body)
    same = (
        "outcome",
        "usage_status",
        "input_tokens",
        "cache_read_tokens",
        "output_tokens",
        "model",
    )
    assert {k: row[k] for k in same} == {k: plain[k] for k in same}


def test_an_error_event_makes_a_stream_error_on_both_paths() -> None:
    openrouter = b'data: {"error":{"message":"overloaded","code":502},"choices":[]}\n\n'
    groq = b'event: error\ndata: {"error":{"message":"x","type":"internal_server_error"}}\n\n'
    for body in (OPENAI_FINISH + openrouter, OPENAI_FINISH[:60] + b"\n\n" + groq):
        row = both_rows(body)
        assert row["outcome"] == "stream_error"


# --- real streams ---------------------------------------------------------------------------------


def sample_exchange(name: str, body: bytes) -> Exchange:
    exchange = exchange_for(name)
    step = max(1, len(body) // 40)
    chunks = [
        (float(i + 1), min(step, len(body) - p)) for i, p in enumerate(range(0, len(body), step))
    ]
    return replace(exchange, response_body=body, chunks=chunks or None)


@pytest.mark.parametrize("name", PLAIN_STREAMS)
def test_a_plain_real_stream_takes_the_fast_path_and_gives_the_general_row(name: str) -> None:
    body = response_for(name)[2]
    assert cc._parse_plain_stream(body, "openai") is not None, "fast path not taken"
    norm = assert_same_row(sample_exchange(name, body))
    assert isinstance(norm, Normalised) and norm.row["usage_status"] == "reported"


def event_ends(body: bytes) -> list[int]:
    """Offsets just past each `\\n\\n` event separator."""
    ends, pos = [], 0
    while (pos := body.find(b"\n\n", pos)) >= 0:
        pos += 2
        ends.append(pos)
    return ends


# Every byte offset of these three (577, 1315 and 8761 bytes; the OpenRouter one with its
# comment lines and also with them removed, so that it is plain).
EVERY_BYTE = [
    "deepseek_v4_flash_stream_usage_on_finish_chunk.chunks.jsonl",
    "openrouter_chat_stream_cache.sse",
    "openai_chat_stream_with_usage.sse",
]


def plain_without_comments(body: bytes) -> bytes:
    events = [e for e in body.split(b"\n\n") if e and not e.startswith(b":")]
    return b"".join(e + b"\n\n" for e in events)


@pytest.mark.parametrize("name", EVERY_BYTE)
def test_a_real_stream_cut_at_every_byte_gives_the_same_response_on_both_paths(name: str) -> None:
    body = response_for(name)[2]
    bodies = [body]
    if body.startswith(b":"):
        bodies.append(plain_without_comments(body))
        assert is_plain_data_stream(bodies[-1])
    full = assert_same_response(body)
    assert full.usage is not None
    for whole in bodies:
        # The one chunk with usage is whole once its closing brace has arrived.
        usage_complete = whole.index(b"\n\n", whole.rindex(b'"usage":{'))
        for cut in range(len(whole) + 1):
            response = assert_same_response(whole[:cut])
            # Before that, usage is unknown (NULL), never a guessed 0.
            assert (response.usage is None) == (cut < usage_complete), (name, cut)


def head_and_tail(body: bytes, events: int = 3) -> bytes:
    """The stream's first and last `events` events, the middle left out: still a real stream
    (role chunk, first reasoning or text, finish, usage, [DONE]), short enough to cut at every
    byte."""
    ends = event_ends(body)
    if len(ends) <= 2 * events:
        return body
    return body[: ends[events - 1]] + body[ends[-events - 1] :]


@pytest.mark.parametrize("name", [n for n in CHAT_STREAMS if n not in EVERY_BYTE])
def test_a_real_stream_cut_at_every_event_and_its_ends_at_every_byte_agrees(name: str) -> None:
    body = response_for(name)[2]
    ends = event_ends(body)
    for cut in sorted({*ends, *(e - 1 for e in ends)}):
        assert_same_response(body[:cut])
    short = head_and_tail(body)
    for cut in range(len(short) + 1):
        assert_same_response(short[:cut])


@pytest.mark.parametrize(
    "name", ["openai_chat_stream_with_usage.sse", "zhipu_glm_stream_with_usage.sse"]
)
def test_a_real_stream_cut_anywhere_gives_the_same_normalised_row_on_both_paths(name: str) -> None:
    body = response_for(name)[2]
    ends = event_ends(body)
    cuts = sorted(
        {
            *range(0, len(body) + 1, 211),
            *(e - 1 for e in ends),
            *ends,
            *range(len(body) - 400, len(body) + 1, 7),
        }
    )
    for cut in cuts:
        assert_same_row(sample_exchange(name, body[:cut]))


def rewrites(body: bytes) -> dict[str, bytes]:
    """A real stream as other servers would send it."""
    done = body.replace(b"data: [DONE]\n\n", b"")
    last_usage = body.rfind(b'"usage":{')
    usage_event = body.rfind(b"\n\n", 0, last_usage) + 2
    no_usage_chunk = body[:usage_event] + body[body.index(b"\n\n", last_usage) + 2 :]
    return {
        "as-sent": body,
        "no-done": done,
        "no-usage-chunk": no_usage_chunk,
        "no-usage-chunk-no-done": no_usage_chunk.replace(b"data: [DONE]\n\n", b""),
        "crlf": body.replace(b"\n", b"\r\n"),
        "bom": b"\xef\xbb\xbf" + body,
        "no-space": body.replace(b"data: ", b"data:"),
        "spaced-keys": body.replace(b'":', b'" : ').replace(b',"', b', "'),
        "keep-alive": body.replace(b"\n\n", b"\n\n: keep-alive\n\n", 3),
        "error-chunk": body[:usage_event]
        + b'data: {"error":{"message":"upstream died","code":502},"choices":[]}\n\n',
        "vllm-no-cached": body.replace(
            b'"prompt_tokens_details":{"cached_tokens":', b'"x":{"y":'
        ).replace(b'"prompt_cache_hit_tokens"', b'"x_hit"'),
        "usage-null": body.replace(b'"usage":{', b'"usage":null,"u":{'),
        "model-missing": body.replace(b'"model":', b'"m":'),
        "escaped-key": body.replace(b'"usage":{', b'"\\u0075sage":{'),
    }


@pytest.mark.parametrize("name", PLAIN_STREAMS)
def test_a_real_stream_rewritten_as_other_servers_send_it_gives_the_same_row(name: str) -> None:
    for variant, body in rewrites(response_for(name)[2]).items():
        fast, general = (
            fast_row(sample_exchange(name, body)),
            general_row(sample_exchange(name, body)),
        )
        assert fast == general, variant
        for cut in range(max(0, len(body) - 600), len(body) + 1, 53):
            assert_same_response(body[:cut])


# --- the cases a random stream rarely hits -----------------------------------------------------

KEYED = (
    b'data: {"model":"m1","choices":[{"index":0,"delta":{"reasoning_content":"r"}}]}\n\n'
    b'data: {"choices":[{"index":0,"delta":{"reasoning":"r2","content":"c"}}]}\n\n'
    b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0}],"function_call":{"a":1}},'
    b'"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1}}\n\n'
    b'data: {"model":"m2","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2}}\n\n'
)
KEYS = (b"model", b"reasoning_content", b"reasoning", b"content", b"tool_calls", b"function_call",
        b"finish_reason", b"usage", b"error")  # fmt: skip


@pytest.mark.parametrize("key", KEYS, ids=[k.decode() for k in KEYS])
def test_a_key_with_any_one_letter_escaped_is_read_the_same_on_both_paths(key: bytes) -> None:
    """A byte search cannot see `"\\u0075sage"`: such a body must not be read by it."""
    quoted = b'"' + key + b'"'
    base = KEYED + b'data: {"error":{"message":"x"}}\n\n' if key == b"error" else KEYED
    assert key == b"error" or cc._parse_plain_stream(base, "openai") is not None
    for body in (base, base + DONE):
        hits = [i for i in range(len(body)) if body.startswith(quoted, i)]
        for at in range(len(key)):
            for form in (b"\\u%04x", b"\\u%04X"):
                escaped = b'"' + key[:at] + form % key[at] + key[at + 1 :] + b'"'
                for hit in hits:  # one occurrence at a time
                    assert_same_response(body[:hit] + escaped + body[hit + len(quoted) :])


def test_usage_before_the_finish_of_a_cut_stream_is_running_totals_on_both_paths() -> None:
    """Usage on every chunk (running totals): the last one came before the finish chunk and no
    [DONE] followed, so the output count is not final: NULL, the input count kept."""
    running = (
        b'data: {"choices":[{"index":0,"delta":{"content":"a"}}],'
        b'"usage":{"prompt_tokens":40,"completion_tokens":1}}\n\n'
        b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    )
    response = assert_same_response(running)
    assert response.outcome == "interrupted"
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens) == (40, None)
    done = assert_same_response(running + DONE)
    assert done.outcome == "ok" and done.usage is not None and done.usage.output_tokens == 1
