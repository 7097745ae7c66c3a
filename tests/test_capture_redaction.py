"""Keys planted in Authorization, x-api-key and `?key=` never reach a capture file or the
proxy's log, whichever way the exchange was captured; the upstream still gets them."""

from __future__ import annotations

import base64
from pathlib import Path

import httpx
from fixtures.capture.fake_upstream import FakeUpstream
from fixtures.capture.harness import recording_proxy, serving

from pipeline.capture.hooks import recording_client
from pipeline.capture.mitm_flow import FlowSnapshot, snapshot_record
from pipeline.capture.writer import CaptureWriter, shared_writer
from pipeline.redact import fingerprint

BEARER = "sk-planted-bearer-7f3a9c1e5b2d4f60"
X_API_KEY = "sk-ant-planted-xapikey-91c4e2a7"
QUERY_KEY = "planted-query-key-0d8e6b3f"
PLANTED = (BEARER, X_API_KEY, QUERY_KEY)


def _planted_request(client: httpx.Client, base: str) -> None:
    response = client.post(
        f"{base}/v1/chat/completions?key={QUERY_KEY}&alt=sse",
        headers={"authorization": f"Bearer {BEARER}", "x-api-key": X_API_KEY},
        json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert response.status_code == 200


def _assert_no_key_in(directory: Path, extra: str = "") -> int:
    files = [p for p in directory.rglob("*") if p.is_file()]
    blob = b"".join(p.read_bytes() for p in files) + extra.encode()
    for key in PLANTED:
        for form in (key.encode(), base64.b64encode(key.encode())):
            assert form not in blob, f"{key} leaked"
    return len(files)


def test_the_proxy_forwards_planted_keys_but_writes_and_logs_none(tmp_path: Path) -> None:
    out = tmp_path / "capture"
    log: list[str] = []
    upstream = FakeUpstream()
    with (
        serving(upstream) as up,
        recording_proxy(up.url, out, log=log) as (proxy, _app),
        httpx.Client() as client,
    ):
        _planted_request(client, proxy.url)
    seen = upstream.seen[-1]
    assert ("authorization", f"Bearer {BEARER}") in seen.headers
    assert ("x-api-key", X_API_KEY) in seen.headers
    assert f"key={QUERY_KEY}" in seen.query
    assert _assert_no_key_in(out, "\n".join(log)) == 1
    text = next(out.glob("*.jsonl")).read_text()
    # x-api-key is preferred for the fingerprint when both are present.
    assert f'"account":"{fingerprint(X_API_KEY)}"' in text
    assert "key=%5BREDACTED%5D" in text or "key=[REDACTED]" in text


def test_the_hooks_write_no_planted_key(tmp_path: Path) -> None:
    out = tmp_path / "capture"
    with serving(FakeUpstream()) as up, recording_client(out) as client:
        _planted_request(client, up.url)
    shared_writer(out).flush()
    assert _assert_no_key_in(out) == 1


def test_a_mitmproxy_flow_with_planted_keys_is_written_without_them(tmp_path: Path) -> None:
    snap = FlowSnapshot(
        started_at=1_767_000_000.0,
        method="POST",
        url=f"https://generativelanguage.googleapis.com/v1beta/models/g:generateContent?key={QUERY_KEY}",
        request_headers=[("Authorization", f"Bearer {BEARER}"), ("X-Api-Key", X_API_KEY)],
        request_body=b"{}",
        error=f"upstream said: bad key Bearer {BEARER}",
    )
    with CaptureWriter(tmp_path) as writer:
        writer.write_record(snapshot_record(snap))
    assert _assert_no_key_in(tmp_path) == 1
