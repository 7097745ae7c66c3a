"""The mitmproxy addon's flow -> record conversion (pure, no mitmproxy needed), and the addon
module itself when mitmproxy is installed (an optional extra)."""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import pytest

from pipeline.capture.exchange import Hints
from pipeline.capture.mitm_flow import ChunkTap, FlowSnapshot, outcome_for, snapshot_record, wanted
from pipeline.capture_format import parse_record

SAMPLES = Path(__file__).resolve().parent.parent.parent / "shared" / "reference" / "samples"
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def test_a_streamed_flow_becomes_a_record_with_offsets_from_the_request_start() -> None:
    sse = (SAMPLES / "openai_chat_stream_with_usage.sse").read_bytes()
    clock = iter([T0 + 0.250, T0 + 0.300, T0 + 0.400])
    tap = ChunkTap(None, clock=lambda: next(clock))
    assert tap(sse[:100]) == sse[:100]  # passed on unchanged
    assert tap(sse[100:]) == sse[100:]
    assert tap(b"") == b""  # mitmproxy's end-of-stream call
    snap = FlowSnapshot(
        started_at=T0,
        method="POST",
        url="https://api.openai.com/v1/chat/completions",
        request_headers=[("content-type", "application/json")],
        request_body=b'{"model":"gpt-4o","stream":true,"messages":[]}',
        status=200,
        response_headers=[("content-type", "text/event-stream")],
        response_headers_at=T0 + 0.200,
        response_body=bytes(tap.body),
        chunks=tap.chunks,
        ended_at=tap.ended_at,
        record_id="flow-1",
    )
    record = snapshot_record(snap, Hints(agent="mitm"))
    assert record["started_at"] == "2026-01-01T00:00:00.000000Z"
    assert record["timing"] == {
        "response_headers_ms": 200.0,
        "first_byte_ms": 250.0,
        "end_ms": 400.0,
    }
    assert record["response"]["chunks"] == [[250.0, 100], [300.0, len(sse) - 100]]
    assert record["outcome"] == "complete"
    exchange = parse_record(record, "mitm", 1)
    assert exchange.response_body == sse
    assert exchange.agent == "mitm"


def test_a_gzip_response_is_recorded_decoded_while_the_client_gets_the_gzip_bytes() -> None:
    body = (SAMPLES / "openai_chat_nonstream.json").read_bytes()
    packed = gzip.compress(body)
    tap = ChunkTap("gzip", clock=lambda: T0 + 0.1)
    assert tap(packed[:10]) + tap(packed[10:]) + tap(b"") == packed
    assert bytes(tap.body) == body
    assert sum(n for _, n in tap.chunks) == len(body)


def test_mitmproxy_errors_map_to_capture_outcomes() -> None:
    assert outcome_for(None, True) == "complete"
    assert outcome_for("Client disconnected.", True) == "client_disconnected"
    assert outcome_for("Server disconnected.", True) == "interrupted"
    assert outcome_for("[Errno 111] Connection refused", False) == "upstream_unreachable"
    assert outcome_for("Connection timed out", False) == "upstream_timeout"


def test_a_flow_that_never_got_a_response_has_a_null_response() -> None:
    snap = FlowSnapshot(
        started_at=T0,
        method="POST",
        url="https://api.anthropic.com/v1/messages",
        request_headers=[],
        request_body=b"{}",
        error="[Errno 111] Connection refused",
    )
    record = snapshot_record(snap)
    assert record["response"] is None
    assert record["outcome"] == "upstream_unreachable"


def test_only_llm_api_calls_are_recorded_unless_asked_for_everything() -> None:
    assert wanted("POST", "/v1/chat/completions", False)
    assert wanted("POST", "/v1/messages?beta=true", False)
    assert not wanted("GET", "/v1/models", False)
    assert not wanted("POST", "/upload", False)
    assert wanted("GET", "/index.html", True)


def test_the_addon_module_loads_under_mitmproxy() -> None:
    if importlib.util.find_spec("mitmproxy") is None:
        pytest.skip("mitmproxy is not installed (optional extra: pip install 'cacheaudit[mitm]')")
    from pipeline.capture import mitm_addon

    assert [type(a).__name__ for a in mitm_addon.addons] == ["CacheauditRecorder"]
