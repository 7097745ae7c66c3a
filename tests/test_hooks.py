"""The httpx recording clients inside the official SDKs: what the application sees is
unchanged, and every exchange lands in the capture as the application consumes it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
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
from fixtures.capture.harness import capture_lines, free_port, ingest_rows, serving

from pipeline.capture.hooks import (
    async_recording_client,
    async_recording_httpx2_client,
    recording_client,
    recording_httpx2_client,
)
from pipeline.capture.writer import shared_writer

MESSAGES = [{"role": "user", "content": "Say hello"}]


@pytest.fixture(scope="module")
def upstream() -> Iterator[Any]:
    with serving(FakeUpstream(first_pause_ms=30, gap_ms=2)) as server:
        yield server


def _records(out: Path) -> list[dict[str, Any]]:
    shared_writer(out).flush()
    return [orjson.loads(line) for line in capture_lines(out)]


def test_a_recording_client_is_accepted_by_the_openai_sdk_and_records_a_stream(
    upstream: Any, tmp_path: Path
) -> None:
    out = tmp_path / "capture"
    http_client = recording_client(out, session_id="s1", agent="tester", tags=["a", "b"])
    assert isinstance(http_client, httpx.Client)
    client = openai.OpenAI(
        base_url=upstream.url + "/v1", api_key="sk-test-0123456789abcdef", http_client=http_client
    )
    with client.chat.completions.with_streaming_response.create(
        model="gpt-4o", messages=MESSAGES, stream=True
    ) as response:
        seen = b"".join(response.iter_bytes())
    assert seen == sample_bytes(OPENAI_STREAM)
    chunks = list(client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True))
    assert chunks[1].choices[0].delta.content == "I'm"

    raw, parsed = _records(out)
    for record in (raw, parsed):
        assert record["outcome"] == "complete"  # the SDK stops at [DONE]; still complete
        assert record["response"]["body"].encode() == sample_bytes(OPENAI_STREAM)
        assert record["hints"] == {"session_id": "s1", "agent": "tester", "tags": ["a", "b"]}
        assert record["timing"]["first_byte_ms"] >= 30
    _, rows = ingest_rows(shared_writer(out).paths, tmp_path / "wh")
    assert {(r["input_tokens"], r["output_tokens"], r["session_id"]) for r in rows} == {
        (14, 30, "s1")
    }


def test_an_async_recording_client_records_a_non_stream_call(upstream: Any, tmp_path: Path) -> None:
    out = tmp_path / "capture"

    async def call() -> Any:
        client = openai.AsyncOpenAI(
            base_url=upstream.url + "/v1",
            api_key="sk-test-0123456789abcdef",
            http_client=async_recording_client(out),
        )
        return await client.chat.completions.with_raw_response.create(
            model="gpt-4.1-nano", messages=MESSAGES
        )

    response = asyncio.run(call())
    assert response.http_response.content == sample_bytes(OPENAI_JSON)
    [record] = _records(out)
    assert record["response"]["body"].encode() == sample_bytes(OPENAI_JSON)
    assert orjson.loads(record["request"]["body"])["model"] == "gpt-4.1-nano"


def test_the_anthropic_sdk_takes_the_httpx2_recording_client_sync_and_async(
    upstream: Any, tmp_path: Path
) -> None:
    out = tmp_path / "capture"
    client = anthropic.Anthropic(
        base_url=upstream.url,
        api_key="sk-ant-test-0123456789",
        http_client=recording_httpx2_client(out, agent="claude"),
    )
    with client.messages.stream(model="claude", max_tokens=16, messages=MESSAGES) as stream:
        assert stream.get_final_text() == "Hello there!"

    async def call() -> Any:
        aclient = anthropic.AsyncAnthropic(
            base_url=upstream.url,
            api_key="sk-ant-test-0123456789",
            http_client=async_recording_httpx2_client(out),
        )
        return await aclient.messages.create(model="claude", max_tokens=16, messages=MESSAGES)

    message = asyncio.run(call())
    assert message.usage.output_tokens == 29
    stream_record, plain_record = _records(out)
    assert stream_record["response"]["body"].encode() == sample_bytes(ANTHROPIC_STREAM)
    assert stream_record["outcome"] == "complete"
    assert stream_record["hints"]["agent"] == "claude"
    assert plain_record["response"]["body"].encode() == sample_bytes(ANTHROPIC_JSON)


def test_an_application_that_stops_reading_early_leaves_a_client_disconnected_record(
    upstream: Any, tmp_path: Path
) -> None:
    out = tmp_path / "capture"
    with (
        recording_client(out) as client,
        client.stream(
            "POST",
            upstream.url + "/v1/chat/completions",
            json={"model": "m", "messages": MESSAGES, "stream": True},
        ) as response,
    ):
        first = next(response.iter_raw())
    [record] = _records(out)
    assert record["outcome"] == "client_disconnected"
    assert record["response"]["body"].encode() == first


def test_an_unreachable_upstream_raises_as_usual_and_is_recorded(tmp_path: Path) -> None:
    out = tmp_path / "capture"
    with recording_client(out) as client, pytest.raises(httpx.ConnectError):
        client.post(f"http://127.0.0.1:{free_port()}/v1/chat/completions", json={"model": "m"})
    [record] = _records(out)
    assert record["outcome"] == "upstream_unreachable"
    assert record["response"] is None


def test_the_hooks_honour_the_hint_headers_and_do_not_send_them_upstream(tmp_path: Path) -> None:
    """As through the proxy: an agent moved from the proxy to the hooks keeps its sessions."""
    out = tmp_path / "capture"
    hint_headers = {
        "x-cacheaudit-session": "epoch-2",
        "x-cacheaudit-agent": "planner",
        "X-Cacheaudit-Tags": "exp1, arm-b",
    }
    fake = FakeUpstream(first_pause_ms=0, gap_ms=0)
    with serving(fake) as up:
        client = openai.OpenAI(
            base_url=up.url + "/v1",
            api_key="sk-test-0123456789abcdef",
            http_client=recording_client(out, session_id="from-client", tags=["t0"]),
        )
        client.chat.completions.create(
            model="gpt-4o", messages=MESSAGES, extra_headers=hint_headers
        )
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES)  # the client's hints

        async def call() -> Any:
            aclient = anthropic.AsyncAnthropic(
                base_url=up.url,
                api_key="sk-ant-test-0123456789",
                http_client=async_recording_httpx2_client(out, agent="claude"),
                default_headers={"x-cacheaudit-session": "epoch-3"},
            )
            return await aclient.messages.create(model="claude", max_tokens=16, messages=MESSAGES)

        asyncio.run(call())
    assert len(fake.seen) == 3
    for seen in fake.seen:
        assert not [name for name, _ in seen.headers if name.lower().startswith("x-cacheaudit")]
    with_headers, without, anthropic_record = _records(out)
    assert with_headers["hints"] == {
        "session_id": "epoch-2",
        "agent": "planner",
        "tags": ["exp1", "arm-b"],
    }
    assert without["hints"] == {"session_id": "from-client", "agent": None, "tags": ["t0"]}
    assert anthropic_record["hints"] == {"session_id": "epoch-3", "agent": "claude", "tags": []}
    for record in (with_headers, anthropic_record):  # recorded as hints, not as headers
        assert "x-cacheaudit" not in orjson.dumps(record["request"]["headers"]).decode().lower()
