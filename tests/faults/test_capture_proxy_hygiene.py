"""The proxy refuses ambiguous framing and does not hold half-open connections: a request with
both Content-Length and Transfer-Encoding gets 400 and is neither forwarded nor recorded; a
connection that sends no complete request head (an HTTP/0.9 line, nothing at all) is closed
after the header timeout. Raw sockets on 127.0.0.1, every wait bounded."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fixtures.capture.harness import serving

from pipeline.capture.config import ProxyConfig, UpstreamRoute
from pipeline.capture.proxy import CaptureProxy, ProxyOptions, header_timeout_protocol
from pipeline.capture.writer import CaptureWriter

HEADER_TIMEOUT = 0.5


class Upstream:
    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        self.calls += 1
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[tuple[Any, CaptureProxy, Upstream]]:
    upstream = Upstream()
    with serving(upstream) as up:
        writer = CaptureWriter(tmp_path / "capture")
        app = CaptureProxy(
            ProxyConfig(routes=[UpstreamRoute(url=up.url)]),
            writer,
            ProxyOptions(header_timeout=HEADER_TIMEOUT),
            log=lambda _line: None,
        )
        try:
            with serving(app, http=header_timeout_protocol(HEADER_TIMEOUT)) as server:
                yield server, app, upstream
        finally:
            writer.close()


def _connect(server: Any) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    sock.settimeout(5)
    return sock


def _read_until_closed(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_a_request_with_both_content_length_and_chunked_gets_400_and_is_not_forwarded(
    proxy: tuple[Any, CaptureProxy, Upstream],
) -> None:
    server, app, upstream = proxy
    with _connect(server) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 2\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
        )
        answer = _read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert b"Transfer-Encoding both present" in answer
    assert upstream.calls == 0
    assert app.writer.records == 0


@pytest.mark.parametrize(
    "sent", [b"GET /\r\n", b"", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"]
)
def test_a_connection_without_a_whole_request_head_is_closed_after_the_header_timeout(
    proxy: tuple[Any, CaptureProxy, Upstream], sent: bytes
) -> None:
    server, _, upstream = proxy
    with _connect(server) as sock:
        started = time.monotonic()
        if sent:
            sock.sendall(sent)
        answer = _read_until_closed(sock)  # socket timeout 5 s: raises if never closed
        waited = time.monotonic() - started
    assert answer == b""
    assert HEADER_TIMEOUT * 0.8 <= waited < HEADER_TIMEOUT + 2
    assert upstream.calls == 0


def test_a_slow_but_complete_request_within_the_header_timeout_is_served(
    proxy: tuple[Any, CaptureProxy, Upstream],
) -> None:
    server, _, upstream = proxy
    with _connect(server) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        time.sleep(HEADER_TIMEOUT / 4)
        sock.sendall(b"Content-Length: 2\r\nConnection: close\r\n\r\n{}")
        answer = _read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert upstream.calls == 1
