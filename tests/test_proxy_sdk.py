"""The official OpenAI and Anthropic SDKs through the recording proxy, against a fake upstream
that replays the reference samples on a known schedule (first event 80 ms after the headers,
then one every 5 ms)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import anthropic
import openai
import orjson
import pytest
from fixtures.capture.fake_upstream import (
    ANTHROPIC_JSON,
    ANTHROPIC_STREAM,
    OPENAI_JSON,
    OPENAI_STREAM,
    FakeUpstream,
    sample_bytes,
)
from fixtures.capture.harness import capture_lines, ingest_rows, recording_proxy, serving

from pipeline.dialects import DIALECTS

FIRST_PAUSE_MS = 80.0
GAP_MS = 5.0
# The recorded ttft must match when the upstream really sent the first text event (on a busy
# machine that can be later than its schedule) to within this, and never undercut the schedule.
# Idle, the difference is about 1 ms; the slack absorbs CPU starvation on a shared 2-core box.
TTFT_SLACK_MS = 15.0
MESSAGES = [{"role": "user", "content": "Say hello"}]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    out = tmp_path_factory.mktemp("capture")
    upstream = FakeUpstream(first_pause_ms=FIRST_PAUSE_MS, gap_ms=GAP_MS)
    with serving(upstream) as up, recording_proxy(up.url, out) as (proxy, app):
        # Warm the proxy's upstream connection pool so the first timed call is a steady state.
        _openai(proxy.url).chat.completions.create(model="warmup", messages=MESSAGES)
        yield {"up": up, "proxy": proxy, "app": app, "out": out, "upstream": upstream}


def _records(out: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in capture_lines(out)]


def _openai(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key="sk-test-0123456789abcdef", max_retries=0)


def _anthropic(base: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=base, api_key="sk-ant-test-0123456789", max_retries=0)


def _openai_stream_bytes(client: openai.OpenAI) -> bytes:
    with client.chat.completions.with_streaming_response.create(
        model="gpt-4o", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    ) as response:
        return b"".join(response.iter_bytes())


def _sent_offset_ms(record: dict[str, Any], sent_at: list[float], event: int) -> float:
    """When the fake upstream handed over event `event`, in ms after the record's start."""
    start = datetime.fromisoformat(record["started_at"].replace("Z", "+00:00")).timestamp()
    return (sent_at[event] - start) * 1000.0


def _latest(out: Path, path_end: str) -> dict[str, Any]:
    records = [r for r in _records(out) if r["request"]["url"].endswith(path_end)]
    return records[-1]


def test_an_openai_stream_through_the_proxy_is_byte_identical_and_records_its_timing(
    stack: dict[str, Any], tmp_path: Path
) -> None:
    direct = _openai_stream_bytes(_openai(stack["up"].url))
    proxied = _openai_stream_bytes(_openai(stack["proxy"].url))
    assert proxied == direct == sample_bytes(OPENAI_STREAM)

    record = _latest(stack["out"], "/v1/chat/completions")
    assert record["outcome"] == "complete"
    assert record["response"]["status"] == 200
    assert record["response"]["body"].encode() == sample_bytes(OPENAI_STREAM)
    chunks = record["response"]["chunks"]
    # One SSE event per chunk as the fake upstream sent them: 33 events in the sample.
    assert len(chunks) == sample_bytes(OPENAI_STREAM).count(b"\n\n")
    assert sum(n for _, n in chunks) == len(sample_bytes(OPENAI_STREAM))
    assert [t for t, _ in chunks] == sorted(t for t, _ in chunks)
    timing = record["timing"]
    assert timing["response_headers_ms"] <= timing["first_byte_ms"] <= timing["end_ms"]
    assert timing["first_byte_ms"] >= FIRST_PAUSE_MS

    _, rows = ingest_rows([stack["app"].writer.current_path], tmp_path / "wh")
    row = next(r for r in rows if r["request_id"] == record["id"])
    # Sample's final chunk: usage {"prompt_tokens":14,"completion_tokens":30}, no cached field.
    assert (row["input_tokens"], row["output_tokens"]) == (14, 30)
    assert row["cache_read_tokens"] is None
    assert row["outcome"] == "ok"
    # First answer text ("I'm") is the 2nd event: 80 ms pause + one 5 ms gap.
    assert row["ttft_ms"] >= FIRST_PAUSE_MS + GAP_MS
    sent = _sent_offset_ms(record, stack["upstream"].sent_at[-1], 1)
    assert abs(row["ttft_ms"] - sent) <= TTFT_SLACK_MS


def test_an_openai_non_stream_call_through_the_proxy_returns_the_same_completion(
    stack: dict[str, Any], tmp_path: Path
) -> None:
    direct = _openai(stack["up"].url).chat.completions.with_raw_response.create(
        model="gpt-4.1-nano", messages=MESSAGES
    )
    proxied = _openai(stack["proxy"].url).chat.completions.with_raw_response.create(
        model="gpt-4.1-nano", messages=MESSAGES
    )
    assert proxied.http_response.content == direct.http_response.content
    assert proxied.http_response.content == sample_bytes(OPENAI_JSON)
    assert proxied.parse().model_dump() == direct.parse().model_dump()

    record = _latest(stack["out"], "/v1/chat/completions")
    assert orjson.loads(record["request"]["body"]) == {
        "messages": MESSAGES,
        "model": "gpt-4.1-nano",
    }
    _, rows = ingest_rows([stack["app"].writer.current_path], tmp_path / "wh")
    row = next(r for r in rows if r["request_id"] == record["id"])
    # Sample usage: prompt 16 (cached_tokens 0), completion 363 (reasoning 0).
    assert (row["input_tokens"], row["cache_read_tokens"], row["output_tokens"]) == (16, 0, 363)
    assert row["stream"] is False


def test_an_anthropic_stream_through_the_proxy_is_byte_identical(
    stack: dict[str, Any], tmp_path: Path
) -> None:
    def events(client: anthropic.Anthropic) -> tuple[bytes, list[dict[str, Any]]]:
        with client.messages.with_streaming_response.create(
            model="claude-3-opus-latest", max_tokens=64, messages=MESSAGES, stream=True
        ) as response:
            raw = b"".join(response.iter_bytes())
        with client.messages.stream(
            model="claude-3-opus-latest", max_tokens=64, messages=MESSAGES
        ) as stream:
            parsed = [e.model_dump() for e in stream]
        return raw, parsed

    direct_raw, direct_events = events(_anthropic(stack["up"].url))
    proxied_raw, proxied_events = events(_anthropic(stack["proxy"].url))
    assert proxied_raw == direct_raw == sample_bytes(ANTHROPIC_STREAM)
    assert proxied_events == direct_events
    assert any(e.get("delta", {}).get("text") == "Hello" for e in proxied_events)

    record = _latest(stack["out"], "/v1/messages")
    assert record["outcome"] == "complete"
    assert record["response"]["body"].encode() == sample_bytes(ANTHROPIC_STREAM)
    # Anthropic SDK 2.x sends the key as `authorization` (1.x used x-api-key).
    assert ["authorization", "[REDACTED]"] in record["request"]["headers"]

    result, rows = ingest_rows([stack["app"].writer.current_path], tmp_path / "wh")
    row = next((r for r in rows if r["request_id"] == record["id"]), None)
    if "messages" not in DIALECTS:
        # The Anthropic dialect is not registered yet: ingest skips the call, cleanly.
        assert row is None
        assert result.total("rejected") == 0
        return
    assert row is not None
    # message_start usage input_tokens 11; message_delta output_tokens 6.
    assert row["output_tokens"] == 6
    # First text ("Hello") is the 4th event: 80 ms + 3 x 5 ms.
    assert row["ttft_ms"] >= FIRST_PAUSE_MS + 3 * GAP_MS
    sent = _sent_offset_ms(record, stack["upstream"].sent_at[-1], 3)
    assert abs(row["ttft_ms"] - sent) <= TTFT_SLACK_MS


def test_an_anthropic_non_stream_call_through_the_proxy_returns_the_same_message(
    stack: dict[str, Any], tmp_path: Path
) -> None:
    direct = _anthropic(stack["up"].url).messages.with_raw_response.create(
        model="claude-sonnet-4-5", max_tokens=64, messages=MESSAGES
    )
    proxied = _anthropic(stack["proxy"].url).messages.with_raw_response.create(
        model="claude-sonnet-4-5", max_tokens=64, messages=MESSAGES
    )
    assert proxied.http_response.content == direct.http_response.content
    assert proxied.http_response.content == sample_bytes(ANTHROPIC_JSON)
    assert proxied.parse().usage.output_tokens == 29

    record = _latest(stack["out"], "/v1/messages")
    assert record["response"]["status"] == 200
    assert record["outcome"] == "complete"
    _, rows = ingest_rows([stack["app"].writer.current_path], tmp_path / "wh")
    row = next((r for r in rows if r["request_id"] == record["id"]), None)
    if "messages" in DIALECTS:
        assert row is not None
        # input_tokens 12 + cache_creation 0 + cache_read 0 = 12 prompt tokens in all.
        assert (row["input_tokens"], row["cache_read_tokens"], row["output_tokens"]) == (12, 0, 29)
    else:
        assert row is None


def test_hint_headers_are_recorded_and_not_forwarded(stack: dict[str, Any]) -> None:
    client = openai.OpenAI(
        base_url=stack["proxy"].url + "/v1",
        api_key="sk-test-0123456789abcdef",
        default_headers={
            "x-cacheaudit-session": "sess-42",
            "x-cacheaudit-agent": "planner",
            "x-cacheaudit-tags": "exp1, arm-b",
        },
    )
    client.chat.completions.create(model="gpt-4.1-nano", messages=MESSAGES)
    seen = stack["upstream"].seen[-1]
    assert not any(name.startswith("x-cacheaudit") for name, _ in seen.headers)
    assert ("authorization", "Bearer sk-test-0123456789abcdef") in seen.headers
    record = _latest(stack["out"], "/v1/chat/completions")
    assert record["hints"] == {
        "session_id": "sess-42",
        "agent": "planner",
        "tags": ["exp1", "arm-b"],
    }


def test_the_openai_sdk_raises_when_the_upstream_dies_mid_stream_behind_the_proxy(
    stack: dict[str, Any],
) -> None:
    # Were the cut turned into a clean end of stream, the SDK would hand the agent a truncated
    # answer (no finish_reason, no usage) as complete, and it would not retry.
    stream = _openai(stack["proxy"].url).chat.completions.create(
        model="gpt-4o", messages=MESSAGES, stream=True, extra_headers={"x-fake-die-after": "5"}
    )
    chunks = []
    with pytest.raises(openai.APIConnectionError):
        for chunk in stream:
            chunks.append(chunk)
    assert len(chunks) == 5
    assert all(c.choices[0].finish_reason is None for c in chunks if c.choices)
    record = _latest(stack["out"], "/chat/completions")
    assert record["outcome"] == "interrupted"
    assert record["response"]["body"].count("data: ") == 5
