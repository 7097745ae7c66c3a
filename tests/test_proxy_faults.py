"""Faults become records, and the proxy keeps serving: an unreachable upstream, one that never
answers, one that dies mid-stream, and a client that hangs up mid-stream."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from fixtures.capture.fake_upstream import (
    OPENAI_JSON,
    OPENAI_STREAM,
    FakeUpstream,
    sample_bytes,
    sse_events,
)
from fixtures.capture.harness import (
    capture_lines,
    free_port,
    ingest_rows,
    recording_proxy,
    serving,
    wait_until,
)

CHAT = "/v1/chat/completions"
STREAM_BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "stream": True}
PLAIN_BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[Any, FakeUpstream]]:
    fake = FakeUpstream(first_pause_ms=10, gap_ms=2)
    with serving(fake) as server:
        yield server, fake


def _records(out: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in capture_lines(out)]


def _still_serves(proxy_url: str) -> None:
    response = httpx.post(proxy_url + CHAT, json=PLAIN_BODY, timeout=10)
    assert response.status_code == 200
    assert response.content == sample_bytes(OPENAI_JSON)


def test_an_unreachable_upstream_gives_502_and_an_upstream_unreachable_record(
    tmp_path: Path,
) -> None:
    out = tmp_path / "capture"
    with recording_proxy(f"http://127.0.0.1:{free_port()}", out) as (proxy, app):
        response = httpx.post(proxy.url + CHAT, json=PLAIN_BODY, timeout=10)
        assert response.status_code == 502
        assert response.json()["error"]["type"] == "upstream_unreachable"
        path = app.writer.current_path
    [record] = _records(out)
    assert record["outcome"] == "upstream_unreachable"
    assert record["response"] is None
    assert "ConnectError" in record["error"]
    assert orjson.loads(record["request"]["body"]) == PLAIN_BODY
    _, [row] = ingest_rows([path], tmp_path / "wh")
    assert row["status_code"] is None
    assert row["error_type"] == "upstream_unreachable"
    assert row["input_tokens"] is None


def test_an_upstream_that_never_answers_gives_504_and_the_proxy_keeps_serving(
    tmp_path: Path, upstream: tuple[Any, FakeUpstream]
) -> None:
    server, _ = upstream
    out = tmp_path / "capture"
    with recording_proxy(server.url, out, read_timeout=0.3) as (proxy, _app):
        slow = httpx.post(
            proxy.url + CHAT, json=PLAIN_BODY, headers={"x-fake-header-delay": "2000"}, timeout=10
        )
        assert slow.status_code == 504
        assert slow.json()["error"]["type"] == "upstream_timeout"
        _still_serves(proxy.url)
    timed_out, ok = _records(out)
    assert timed_out["outcome"] == "upstream_timeout"
    assert timed_out["response"] is None
    # Gave up after the 0.3 s read timeout, well before the upstream's 2 s delay.
    assert 300 <= timed_out["timing"]["end_ms"] < 2000
    assert ok["outcome"] == "complete"


def test_an_upstream_dying_mid_stream_cuts_the_clients_stream_and_is_recorded_interrupted(
    tmp_path: Path, upstream: tuple[Any, FakeUpstream]
) -> None:
    server, _ = upstream
    out = tmp_path / "capture"
    events = sse_events(sample_bytes(OPENAI_STREAM))
    headers = {"x-fake-die-after": "5"}
    # Without the proxy, the client's HTTP library raises on the cut chunked stream.
    with (
        pytest.raises(httpx.RemoteProtocolError, match="incomplete chunked read"),
        httpx.stream("POST", server.url + CHAT, json=STREAM_BODY, headers=headers) as direct,
    ):
        b"".join(direct.iter_bytes())
    with recording_proxy(server.url, out) as (proxy, app):
        received = b""
        # Through the proxy too: the cut is not turned into a clean end of stream, which an
        # SDK would take for a complete (truncated) answer.
        with (
            pytest.raises(httpx.RemoteProtocolError, match="incomplete chunked read"),
            httpx.stream("POST", proxy.url + CHAT, json=STREAM_BODY, headers=headers) as response,
        ):
            for chunk in response.iter_bytes():
                received += chunk
        assert received == b"".join(events[:5])
        _still_serves(proxy.url)
        path = app.writer.current_path
    died, ok = _records(out)
    assert died["outcome"] == "interrupted"
    assert "RemoteProtocolError" in died["error"]
    assert died["response"]["body"].encode() == b"".join(events[:5])
    assert [n for _, n in died["response"]["chunks"]] == [len(e) for e in events[:5]]
    assert ok["outcome"] == "complete"
    _, rows = ingest_rows([path], tmp_path / "wh")
    row = next(r for r in rows if r["request_id"] == died["id"])
    assert row["outcome"] == "interrupted"
    assert row["output_tokens"] is None  # the usage chunk never came


def test_a_client_hanging_up_mid_stream_cancels_the_upstream_and_keeps_what_arrived(
    tmp_path: Path, upstream: tuple[Any, FakeUpstream]
) -> None:
    server, fake = upstream
    out = tmp_path / "capture"
    events = sse_events(sample_bytes(OPENAI_STREAM))
    cancelled_before = fake.cancelled
    with recording_proxy(server.url, out) as (proxy, app):
        got = b""
        with httpx.stream(
            "POST", proxy.url + CHAT, json=STREAM_BODY, headers={"x-fake-gap": "50"}
        ) as response:
            for chunk in response.iter_raw():
                got += chunk
                if got.count(b"\n\n") >= 3:
                    break  # leaving the block closes the connection mid-stream
        wait_until(lambda: app.writer.records >= 1, what="the record")
        # The upstream saw its client (the proxy) go away long before its ~1.7 s stream ended.
        wait_until(lambda: fake.cancelled > cancelled_before, timeout=1.0, what="cancellation")
        _still_serves(proxy.url)
        path = app.writer.current_path
    gone, ok = _records(out)
    assert gone["outcome"] == "client_disconnected"
    body = gone["response"]["body"].encode()
    assert body.startswith(got)
    assert 3 <= body.count(b"\n\n") < len(events)
    assert ok["outcome"] == "complete"
    _, rows = ingest_rows([path], tmp_path / "wh")
    row = next(r for r in rows if r["request_id"] == gone["id"])
    assert row["outcome"] == "interrupted"  # no [DONE], no finish_reason, no usage


def test_a_gzip_body_reaches_the_client_as_sent_and_is_recorded_decoded(
    tmp_path: Path, upstream: tuple[Any, FakeUpstream]
) -> None:
    server, _ = upstream
    out = tmp_path / "capture"
    with (
        recording_proxy(server.url, out) as (proxy, _app),
        httpx.stream(
            "POST", proxy.url + CHAT, json=PLAIN_BODY, headers={"x-fake-gzip": "1"}
        ) as response,
    ):
        raw = b"".join(response.iter_raw())
    assert response.headers["content-encoding"] == "gzip"
    assert gzip.decompress(raw) == sample_bytes(OPENAI_JSON)  # still compressed on the wire
    [record] = _records(out)
    assert record["response"]["body"].encode() == sample_bytes(OPENAI_JSON)
    assert sum(n for _, n in record["response"]["chunks"]) == len(sample_bytes(OPENAI_JSON))
