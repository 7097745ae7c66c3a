"""Keys planted in Authorization, x-api-key and `?key=` never reach a capture file or the
proxy's log, whichever way the exchange was captured; the upstream still gets them."""

from __future__ import annotations

import base64
from pathlib import Path

import httpx
import orjson
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


AUTH_TOKEN = "sk-planted-xauthtoken-5e81c0d2"
SEMI_KEY = "planted-semicolon-key-a4f7"
ENCODED_KEY = "planted-encoded-key-93b1"
GATEWAY_PLANTED = (AUTH_TOKEN, SEMI_KEY, ENCODED_KEY)


def _gateway_request(client: httpx.Client, base: str) -> None:
    """A gateway-style call: the key in `X-Auth-Token`, more in `;key=` and `%3Bkey%3D`."""
    response = client.post(
        f"{base}/v1/chat/completions?alt=sse;key={SEMI_KEY}&x=1%3Bkey%3D{ENCODED_KEY}",
        headers={"X-Auth-Token": AUTH_TOKEN, "x-request-id": "req-kept-1"},
        json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert response.status_code == 200


def _assert_no_gateway_secret_in(directory: Path, extra: str = "") -> bytes:
    blob = b"".join(p.read_bytes() for p in directory.rglob("*") if p.is_file())
    blob += extra.encode()
    for secret in GATEWAY_PLANTED:
        for form in (secret.encode(), base64.b64encode(secret.encode())):
            assert form not in blob, f"{secret} leaked"
    return blob


def test_the_proxy_writes_and_logs_no_auth_token_header_or_semicolon_key(tmp_path: Path) -> None:
    out = tmp_path / "capture"
    log: list[str] = []
    upstream = FakeUpstream()
    with (
        serving(upstream) as up,
        recording_proxy(up.url, out, log=log, verbose=True) as (proxy, _app),
        httpx.Client() as client,
    ):
        _gateway_request(client, proxy.url)
    seen = upstream.seen[-1]
    assert ("x-auth-token", AUTH_TOKEN) in seen.headers  # forwarded unchanged
    assert f";key={SEMI_KEY}" in seen.query
    assert any("/v1/chat/completions" in line for line in log)  # the --verbose line exists
    blob = _assert_no_gateway_secret_in(out, "\n".join(log))
    assert b"req-kept-1" in blob  # ordinary headers keep their value
    assert f'"account":"{fingerprint(AUTH_TOKEN)}"'.encode() in blob


def test_a_key_shaped_part_of_the_url_path_is_not_in_the_proxys_verbose_line(
    tmp_path: Path,
) -> None:
    # a gateway or an SDK that puts the key in the path: the record masks it by its shape, and
    # so must the line printed for the exchange
    key = "sk-proj-" + "Wq3Lz8Rv1Nx6Tb4Ym9Kc2Hd7"
    out = tmp_path / "capture"
    log: list[str] = []
    with (
        serving(FakeUpstream()) as up,
        recording_proxy(up.url, out, log=log, verbose=True) as (proxy, _app),
        httpx.Client() as client,
    ):
        client.get(f"{proxy.url}/v1/models/{key}")
    (line,) = [line for line in log if "/v1/models/" in line]  # the --verbose line
    assert key[8:] not in line
    assert "/v1/models/[REDACTED]" in line
    assert key[8:] not in next(out.glob("*.jsonl")).read_text()


def test_the_hooks_write_no_auth_token_header_or_semicolon_key(tmp_path: Path) -> None:
    out = tmp_path / "capture"
    with serving(FakeUpstream()) as up, recording_client(out) as client:
        _gateway_request(client, up.url)
    shared_writer(out).flush()
    assert b"req-kept-1" in _assert_no_gateway_secret_in(out)


def test_a_mitmproxy_flow_with_an_auth_token_and_semicolon_key_is_written_without_them(
    tmp_path: Path,
) -> None:
    snap = FlowSnapshot(
        started_at=1_767_000_000.0,
        method="POST",
        url=f"https://gw.example/v1/chat/completions?alt=sse;key={SEMI_KEY}"
        f"&x=1%3Bkey%3D{ENCODED_KEY}",
        request_headers=[("X-Auth-Token", AUTH_TOKEN)],
        request_body=b"{}",
        error=f"GET https://gw.example/v1?x=1;key={SEMI_KEY} failed",
    )
    with CaptureWriter(tmp_path) as writer:
        writer.write_record(snapshot_record(snap))
    _assert_no_gateway_secret_in(tmp_path)


PASTED_KEY = "sk-proj-" + "Pq7Rs8Tu9Vw0Xy1Z" * 3


def test_a_key_in_a_body_that_is_not_utf8_or_is_compressed_reaches_no_file(
    tmp_path: Path,
) -> None:
    # a Latin-1 byte makes the body base64 in the record, where the writer's masking of the
    # line cannot see the key; a gzip body was kept compressed. Both are masked before that.
    import gzip

    out = tmp_path / "capture"
    log: list[str] = []
    latin1 = (
        b'{"model":"gpt-4o","messages":[{"role":"user","content":"caf\xe9 ' + PASTED_KEY.encode()
    )
    latin1 += b'"}]}'
    text = b'{"model":"gpt-4o","messages":[{"role":"user","content":"key ' + PASTED_KEY.encode()
    upstream = FakeUpstream()
    with (
        serving(upstream) as up,
        recording_proxy(up.url, out, log=log) as (proxy, _app),
        httpx.Client() as client,
    ):
        url = f"{proxy.url}/v1/chat/completions"
        client.post(url, content=latin1)  # the fake upstream cannot parse it (500): recorded
        zipped = gzip.compress(text + b'"}]}')
        client.post(url, content=zipped, headers={"content-encoding": "gzip"})
        # a UTF-8 header value (X-Title: café) is forwarded as sent, not answered with a 500
        titled = client.post(url, content=b"{}", headers={"x-title": "caf\u00e9".encode()})
        assert titled.status_code == 200
    assert ("x-title", "caf\u00e9") in upstream.seen[-1].headers  # the client's UTF-8 bytes
    records = [orjson.loads(line) for line in next(out.glob("*.jsonl")).read_bytes().splitlines()]
    assert [r["request"]["body_encoding"] for r in records] == ["base64", "utf-8", "utf-8"]
    assert PASTED_KEY[8:].encode() not in base64.b64decode(records[0]["request"]["body"])
    assert records[1]["request"]["body"].startswith('{"model":"gpt-4o"')  # decoded, readable
    assert PASTED_KEY[8:] not in records[1]["request"]["body"]


def test_a_key_in_the_path_of_a_request_no_route_takes_is_not_logged_or_answered(
    tmp_path: Path,
) -> None:
    from pipeline.capture.config import ProxyConfig, UpstreamRoute
    from pipeline.capture.proxy import CaptureProxy, ProxyOptions

    key = "AIza" + "SyB4cD5eF6gH7iJ8kL9mN0oP1qR2sT3u"
    log: list[str] = []
    writer = CaptureWriter(tmp_path / "capture")
    config = ProxyConfig(routes=[UpstreamRoute(url="http://127.0.0.1:9", prefix="/openai")])
    app = CaptureProxy(config, writer, ProxyOptions(), log=log.append)
    try:
        with serving(app) as proxy, httpx.Client() as client:
            path = f"/v1beta/models/gemini-pro:generateContent;key={key}"
            answer = client.post(proxy.url + path, json={})
    finally:
        writer.close()
    assert answer.status_code == 404 and key not in answer.text
    assert any("no upstream configured" in line for line in log)
    assert key not in "\n".join(log)
