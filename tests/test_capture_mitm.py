"""The mitmproxy addon's flow -> record conversion (pure, no mitmproxy needed), the addon module
when mitmproxy is installed here, and the addon inside a real `mitmdump` (reverse mode, in front of
the fake upstream) from its own environment, as docs/capture.md recommends."""

from __future__ import annotations

import gzip
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import openai
import orjson
import pytest
from conftest import SAMPLES
from fixtures.capture.fake_upstream import OPENAI_JSON, OPENAI_STREAM, FakeUpstream, sample_bytes
from fixtures.capture.harness import capture_lines, free_port, ingest_rows, serving, wait_until

from pipeline.capture.exchange import Hints
from pipeline.capture.mitm_flow import ChunkTap, FlowSnapshot, outcome_for, snapshot_record, wanted
from pipeline.capture_format import parse_record

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


# --- the addon inside a real mitmdump ----------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
ADDON = ROOT / "pipeline" / "capture" / "mitm_addon.py"


def _mitmdump() -> str | None:
    """mitmdump from CACHEAUDIT_MITMDUMP, the Makefile's own environment (.venv-mitm, where
    `make test` installs it), or PATH."""
    for candidate in (os.environ.get("CACHEAUDIT_MITMDUMP"), ROOT / ".venv-mitm/bin/mitmdump"):
        if candidate and Path(candidate).exists():
            return str(candidate)
    return shutil.which("mitmdump")


@contextmanager
def _mitmdump_reverse(upstream: str, out: Path, confdir: Path) -> Iterator[str]:
    binary = _mitmdump()
    if binary is None:
        pytest.skip("mitmdump not found (make test installs it in .venv-mitm)")
    port = free_port()
    proc = subprocess.Popen(
        [
            binary, "--mode", f"reverse:{upstream}", "--listen-host", "127.0.0.1",
            "--listen-port", str(port), "-s", str(ADDON), "--set", f"confdir={confdir}",
            "--set", f"cacheaudit_out={out}", "--set", "cacheaudit_agent=mitm-e2e", "-q",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )  # fmt: skip

    def listening() -> bool:
        if proc.poll() is not None:
            output = proc.stdout.read().decode() if proc.stdout else ""
            raise AssertionError(f"mitmdump exited with {proc.returncode}: {output}")
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    try:
        wait_until(listening, timeout=30.0, what="mitmdump to listen")
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGINT)  # graceful: the addon's done() closes the capture file
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_mitmdump_with_the_addon_records_sdk_calls_that_ingest_to_the_samples_usage(
    tmp_path: Path,
) -> None:
    out = tmp_path / "capture"
    key = "sk-mitm-e2e-0123456789abcdef"
    messages = [{"role": "user", "content": "Say hello"}]
    with (
        serving(FakeUpstream(first_pause_ms=20.0, gap_ms=2.0)) as up,
        _mitmdump_reverse(up.url, out, tmp_path / "mitm-conf") as proxy_url,
    ):
        client = openai.OpenAI(base_url=proxy_url + "/v1", api_key=key, max_retries=0)
        with client.chat.completions.with_streaming_response.create(
            model="gpt-4o", messages=messages, stream=True,  # type: ignore[arg-type]
            stream_options={"include_usage": True},
        ) as response:  # fmt: skip
            streamed = b"".join(response.iter_bytes())
        plain = client.chat.completions.with_raw_response.create(
            model="gpt-4.1-nano",
            messages=messages,  # type: ignore[arg-type]
        ).http_response.content
    # The client saw the upstream's bytes unchanged, streamed and not.
    assert streamed == sample_bytes(OPENAI_STREAM)
    assert plain == sample_bytes(OPENAI_JSON)

    records = [orjson.loads(line) for line in capture_lines(out)]
    stream_record = next(r for r in records if b'"stream":true' in r["request"]["body"].encode())
    # Streamed, not buffered: one recorded chunk per SSE event the upstream sent.
    chunks = stream_record["response"]["chunks"]
    assert len(chunks) == sample_bytes(OPENAI_STREAM).count(b"\n\n")
    assert [t for t, _ in chunks] == sorted(t for t, _ in chunks)

    written = b"".join(p.read_bytes() for p in out.rglob("*") if p.is_file())
    assert key.encode() not in written and b"0123456789abcdef" not in written

    _, rows = ingest_rows(out, tmp_path / "wh")
    by_stream = {row["stream"]: row for row in rows}
    assert len(rows) == 2 and set(by_stream) == {True, False}
    # Sample usage: the stream's last chunk has prompt 14 / completion 30 and no cached field
    # (unknown, not 0); the plain body has prompt 16, cached_tokens 0, completion 363.
    s, p = by_stream[True], by_stream[False]
    assert (s["input_tokens"], s["cache_read_tokens"], s["output_tokens"]) == (14, None, 30)
    assert (p["input_tokens"], p["cache_read_tokens"], p["output_tokens"]) == (16, 0, 363)
    assert s["outcome"] == p["outcome"] == "ok"
    assert s["agent"] == "mitm-e2e" and s["account"] is not None
    # Each SSE event's arrival was recorded, so the answer's first text has a time.
    assert s["ttft_ms"] is not None and s["ttft_ms"] >= 20.0


def test_mitmdump_with_the_addon_honours_the_hint_headers_and_does_not_forward_them(
    tmp_path: Path,
) -> None:
    out = tmp_path / "capture"
    messages = [{"role": "user", "content": "Say hello"}]
    fake = FakeUpstream(first_pause_ms=0.0, gap_ms=0.0)
    with serving(fake) as up, _mitmdump_reverse(up.url, out, tmp_path / "mitm-conf") as proxy_url:
        client = openai.OpenAI(base_url=proxy_url + "/v1", api_key="sk-test-x", max_retries=0)
        client.chat.completions.create(
            model="gpt-4.1-nano",
            messages=messages,  # type: ignore[arg-type]
            extra_headers={
                "x-cacheaudit-session": "epoch-9",
                "x-cacheaudit-agent": "planner",
                "x-cacheaudit-tags": "exp1, arm-b",
            },
        )
        client.chat.completions.create(model="gpt-4.1-nano", messages=messages)  # type: ignore[arg-type]
    assert len(fake.seen) == 2
    for seen in fake.seen:
        assert not [name for name, _ in seen.headers if name.lower().startswith("x-cacheaudit")]
    hinted, plain = (orjson.loads(line) for line in capture_lines(out))
    # The header wins over --set cacheaudit_agent; without headers the option applies.
    assert hinted["hints"] == {
        "session_id": "epoch-9",
        "agent": "planner",
        "tags": ["exp1", "arm-b"],
    }
    assert plain["hints"] == {"session_id": None, "agent": "mitm-e2e", "tags": []}
    assert "x-cacheaudit" not in orjson.dumps(hinted["request"]["headers"]).decode().lower()
