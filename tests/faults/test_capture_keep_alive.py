"""A client's kept-alive connection must outlive the client's own idle expiry at the recording
proxy and at the OTLP receiver: the client, not the server, gives up on an idle connection.

Under load ~1 in 2,000 requests through the proxy failed with `httpx.ReadError` and left no
record: uvicorn's default keep-alive (5 s) is httpx's pool expiry (5 s), so a client reusing its
connection just under 5 s met the server closing it, with its request unread. Here a client
reuses its connection after httpx's expiry plus a margin, so without the longer keep-alive the
connection is certainly closed (not a timing lottery). Raw sockets on 127.0.0.1."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h11
import httpx
from fixtures.capture.harness import serving

from pipeline.capture import otlp_receiver, proxy
from pipeline.capture.config import ProxyConfig, UpstreamRoute
from pipeline.capture.otlp_receiver import OtlpReceiver
from pipeline.capture.proxy import CaptureProxy, ProxyOptions, header_timeout_protocol
from pipeline.capture.writer import CaptureWriter

# httpx's pool drops a connection idle this long (the OpenAI and Anthropic Python SDKs keep the
# default); a second past it, the server must still have the connection open.
CLIENT_IDLE = httpx.Limits().keepalive_expiry + 1.0
BODY = b"{}"


async def _upstream(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    headers = [(b"content-type", b"application/json"), (b"content-length", b"2")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": BODY})


def _exchange(sock: socket.socket, conn: h11.Connection, path: bytes) -> int:
    """One POST on the kept-alive connection; its status (raises if the server closed it)."""
    headers = [
        (b"host", b"127.0.0.1"),
        (b"content-type", b"application/json"),
        (b"content-length", str(len(BODY)).encode()),
    ]
    sock.sendall(conn.send(h11.Request(method=b"POST", target=path, headers=headers)))
    sock.sendall(conn.send(h11.Data(data=BODY)) + conn.send(h11.EndOfMessage()))
    status = 0
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(sock.recv(65536))  # b"" (closed) makes h11 raise below
        elif isinstance(event, h11.Response):
            status = event.status_code
        elif isinstance(event, h11.EndOfMessage):
            conn.start_next_cycle()
            return status


def _reuse_after_client_idle(port: int, path: bytes) -> tuple[int, int]:
    conn = h11.Connection(h11.CLIENT)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        first = _exchange(sock, conn, path)
        time.sleep(CLIENT_IDLE)
        try:
            second = _exchange(sock, conn, path)
        except (h11.RemoteProtocolError, ConnectionError) as exc:
            raise AssertionError(
                f"the server closed a connection idle {CLIENT_IDLE:g} s: {exc!r}"
            ) from exc
    return first, second


def test_a_client_reusing_its_connection_after_httpx_idle_expiry_is_served_and_recorded(
    tmp_path: Path,
) -> None:
    writer = CaptureWriter(tmp_path / "capture")
    options = ProxyOptions(header_timeout=0.5)  # shorter than the idle: not what closes it
    app = CaptureProxy(ProxyConfig(), writer, options, log=lambda _line: None)
    config: Callable[[Any], Any] = lambda a: proxy.server_config(  # noqa: E731
        a, grace_seconds=2, http=header_timeout_protocol(options.header_timeout)
    )
    try:
        with serving(_upstream) as up:
            app.config.routes.append(UpstreamRoute(url=up.url))
            with serving(app, config=config) as server:
                statuses = _reuse_after_client_idle(server.port, b"/v1/chat/completions")
        assert statuses == (200, 200)
        assert writer.records == 2  # both exchanges recorded, once each
    finally:
        writer.close()


def test_an_exporter_reusing_its_connection_after_httpx_idle_expiry_is_served(
    tmp_path: Path,
) -> None:
    writer = CaptureWriter(tmp_path / "otlp", prefix="otlp")
    app = OtlpReceiver(writer, log=lambda _line: None)
    try:
        with serving(app, config=otlp_receiver.server_config) as server:
            statuses = _reuse_after_client_idle(server.port, b"/v1/traces")
        assert statuses == (200, 200)
        assert app.exports == 2
    finally:
        writer.close()


def test_the_keep_alive_outlasts_the_longest_common_client_idle_expiry() -> None:
    # Go's net/http and Rust's hyper (reqwest) keep an idle connection 90 s, the longest of
    # the clients LLM tools are built on (httpx 5 s, undici 4 s, aiohttp 15 s).
    assert proxy.KEEP_ALIVE_SECONDS > 90


def test_the_proxy_drops_an_idle_upstream_connection_before_a_5_second_server_would(
    tmp_path: Path,
) -> None:
    # uvicorn (vLLM, SGLang) and Node close a connection idle 5 s: the proxy must not reuse one
    # that old, or a request can meet the server's close unread (502 to the client). A request
    # 4.5 s after the last must reach the upstream on a new connection (the upstream sees
    # another client port); with httpx's default 5 s expiry it came on the old one.
    ports: list[int] = []

    async def upstream(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            ports.append(scope["client"][1])
        await _upstream(scope, receive, send)

    writer = CaptureWriter(tmp_path / "capture")
    app = CaptureProxy(ProxyConfig(), writer, ProxyOptions(), log=lambda _line: None)
    try:
        with serving(upstream) as up:
            app.config.routes.append(UpstreamRoute(url=up.url))
            with serving(app) as server:
                url = f"http://127.0.0.1:{server.port}/v1/chat/completions"
                assert httpx.post(url, content=BODY).status_code == 200
                assert httpx.post(url, content=BODY).status_code == 200  # at once: reused
                time.sleep(proxy.UPSTREAM_IDLE_SECONDS + 0.5)
                assert httpx.post(url, content=BODY).status_code == 200
        assert ports[0] == ports[1] != ports[2]
        assert writer.records == 3
    finally:
        writer.close()
