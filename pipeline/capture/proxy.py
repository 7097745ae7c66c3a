"""The recording reverse proxy: a raw ASGI app served by uvicorn, forwarding with httpx.

Each request is forwarded unchanged (hop-by-hop headers aside) to the upstream its route names;
the response is passed back chunk by chunk the moment each chunk arrives, and recorded on the
side. Faults become records, not crashes:
- upstream unreachable -> 502 to the client, record outcome `upstream_unreachable`;
- no response headers within the read timeout -> 504, `upstream_timeout`;
- upstream dies or stalls mid-body -> the client's connection is cut as the upstream's was (no
  clean end, so its HTTP library raises), `interrupted` with what arrived;
- client goes away -> the upstream request is cancelled, `client_disconnected`.

Clients may add `x-cacheaudit-session`, `x-cacheaudit-agent` and `x-cacheaudit-tags` (comma
separated) headers; they become the record's hints and are not forwarded.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import errno
import http.cookiejar
import logging
import signal
import socket
import sys
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import orjson
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from pipeline.capture.config import ProxyConfig, UpstreamRoute, exposure_warning, parse_listen
from pipeline.capture.exchange import (
    CLIENT_DISCONNECTED,
    COMPLETE,
    HINT_HEADERS,
    HOP_BY_HOP,
    INTERRUPTED,
    UPSTREAM_TIMEOUT,
    UPSTREAM_UNREACHABLE,
    ExchangeRecorder,
    Hints,
    header_value,
    hints_from_headers,
)
from pipeline.capture.writer import DEFAULT_ROTATE_BYTES, CaptureWriter, FsyncPolicy
from pipeline.errors import NetworkError
from pipeline.redact import redact_text, shown_url
from pipeline.reports.numbers import count

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Log = Callable[[str], None]

_DROP_REQUEST = HOP_BY_HOP | {"host", "content-length", *HINT_HEADERS}
# True in an exchange's task once the proxy has left the client's response unfinished on purpose
# (the upstream's broke off mid-body): uvicorn then closes the connection, and `_UvicornLines`
# drops its complaint about the unfinished response, which is no fault of ours.
_CUT: contextvars.ContextVar[bool] = contextvars.ContextVar("cacheaudit_cut", default=False)


def stderr_log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass
class ProxyOptions:
    connect_timeout: float = 10.0
    # Reasoning models can think for minutes before the first byte; 10 minutes without a byte
    # is treated as an upstream timeout.
    read_timeout: float = 600.0
    verbose: bool = False
    summary_every: float = 60.0
    # A client that opens a connection and does not finish its request line and headers in this
    # many seconds (an HTTP/0.9 line, an idle socket) is disconnected instead of held open.
    header_timeout: float = 60.0


# the outcome counted for an exchange whose record the writer could not write
UNRECORDED = "not recorded"


@dataclass
class Stats:
    outcomes: Counter[str] = field(default_factory=Counter)
    since_summary: Counter[str] = field(default_factory=Counter)
    # records are written (and counted) in worker threads as well as on the event loop
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def recorded(self) -> int:
        """Exchanges whose record was written."""
        return sum(n for k, n in self.outcomes.items() if k != UNRECORDED)

    def add(self, outcome: str) -> None:
        with self.lock:
            self.outcomes[outcome] += 1
            self.since_summary[outcome] += 1

    def summary(self, seconds: float, where: str) -> str | None:
        with self.lock:
            if not self.since_summary:
                return None
            recent = sum(self.since_summary.values())
            detail = ", ".join(f"{n} {k}" for k, n in sorted(self.since_summary.items()))
            total = sum(self.outcomes.values())
            self.since_summary.clear()
        recent_text = count(recent, "exchange", grouping=False)
        head = f"capture: {recent_text} in the last {seconds:g}s ({detail})"
        return f"{head}; {total} total -> {where}"


class _NoCookies(http.cookiejar.DefaultCookiePolicy):
    """The proxy serves many clients: a cookie one upstream sets must never ride on another
    client's request, so the forwarding client stores none."""

    def set_ok(self, cookie: http.cookiejar.Cookie, request: Any) -> bool:
        return False


def _error_body(kind: str, message: str) -> bytes:
    return orjson.dumps({"error": {"type": kind, "message": f"cacheaudit proxy: {message}"}})


class CaptureProxy:
    """ASGI app. `writer` receives one record per forwarded exchange."""

    def __init__(
        self,
        config: ProxyConfig,
        writer: CaptureWriter,
        options: ProxyOptions | None = None,
        log: Log = stderr_log,
    ) -> None:
        self.config = config
        self.writer = writer
        self.options = options or ProxyOptions()
        self.log = log
        self.stats = Stats()
        self._emit_lock = threading.Lock()
        self._client: httpx.AsyncClient | None = None
        self._summary_task: asyncio.Task[None] | None = None
        self._inflight: set[asyncio.Task[bool]] = set()

    # -- lifecycle --------------------------------------------------------------------------

    def _make_client(self) -> httpx.AsyncClient:
        o = self.options
        return httpx.AsyncClient(
            timeout=httpx.Timeout(o.read_timeout, connect=o.connect_timeout, pool=None),
            limits=httpx.Limits(
                max_connections=None,
                max_keepalive_connections=200,
                keepalive_expiry=UPSTREAM_IDLE_SECONDS,
            ),
            follow_redirects=False,  # the client sees redirects, as it would without us
            cookies=http.cookiejar.CookieJar(policy=_NoCookies()),
        )

    async def startup(self) -> None:
        self._client = self._make_client()
        if not self.options.verbose and self.options.summary_every > 0:
            self._summary_task = asyncio.create_task(self._summaries())

    async def shutdown(self) -> None:
        if self._inflight:  # exchanges cancelled at the end of the grace time: let them record
            await asyncio.wait(self._inflight, timeout=5)
        if self._summary_task is not None:
            self._summary_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._summary_task
        if self._client is not None:
            await self._client.aclose()
        self.writer.flush()
        self._print_summary(0.0, final=True)

    async def _summaries(self) -> None:
        every = self.options.summary_every
        while True:
            await asyncio.sleep(every)
            self._print_summary(every)

    def _print_summary(self, seconds: float, final: bool = False) -> None:
        where = str(self.writer.current_path or self.writer.out_dir)
        if final:
            lost = self.stats.outcomes[UNRECORDED]
            total = self.stats.recorded
            kinds = sorted((k, n) for k, n in self.stats.outcomes.items() if k != UNRECORDED and n)
            detail = ", ".join(f"{n} {k}" for k, n in kinds)
            tail = f"; {lost} not recorded (the file could not be written)" if lost else ""
            recorded = f"{count(total, 'exchange', grouping=False)} recorded"
            self.log(f"capture: stopped; {recorded} ({detail or 'none'}){tail}")
            return
        line = self.stats.summary(seconds, where)
        if line:
            self.log(line)

    # -- ASGI -------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            # uvicorn cancels the exchanges still running when the shutdown grace time ends:
            # `_http` has recorded them as interrupted; re-raised, uvicorn would print the
            # cancellation as a traceback.
            with contextlib.suppress(asyncio.CancelledError):
                await self._http(scope, receive, send)
        # websockets are not LLM API calls we record; uvicorn rejects them for us

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await self.startup()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw_headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]]
        path = scope.get("raw_path", scope["path"].encode()).decode("latin-1").split("?")[0]
        route = self.config.route_for(scope["path"], header_value(raw_headers, "host"))
        if route is None:
            # the path may carry a key (`...:generateContent;key=...`): shown redacted
            shown = shown_url(scope["path"])
            await _respond(send, 404, _error_body("no_route", f"no upstream for {shown}"))
            self.log(f"capture: no upstream configured for {shown!r}; answered 404")
            return
        if header_value(raw_headers, "content-length") is not None and header_value(
            raw_headers, "transfer-encoding"
        ):
            # Both framings at once is how request smuggling starts; HTTP/1.1 (RFC 9112, section
            # 6.1) lets a server reject it, and forwarding either reading would guess the body.
            await _respond(
                send,
                400,
                _error_body("bad_request", "Content-Length and Transfer-Encoding both present"),
                close=True,
            )
            self.log(
                "capture: a request with both Content-Length and Transfer-Encoding; answered 400"
            )
            return
        body = await _read_body(receive)
        if body is None:
            return  # the client left before sending its request; nothing was forwarded
        query = scope.get("query_string", b"").decode("latin-1")
        # The clock starts once the whole request is here: the client's upload to us on this
        # machine is not upstream time.
        rec = ExchangeRecorder(
            method=scope["method"],
            url=route.target(path, query),
            request_headers=[(k, v) for k, v in raw_headers if k.lower() not in _DROP_REQUEST],
            request_body=body,
            hints=_hints(raw_headers, route),
        )
        forward = asyncio.create_task(self._forward(rec, send))
        self._inflight.add(forward)
        forward.add_done_callback(self._inflight.discard)
        watch = asyncio.create_task(_wait_disconnect(receive))
        try:
            await asyncio.wait({forward, watch}, return_when=asyncio.FIRST_COMPLETED)
            if not forward.done() and rec.outcome is None:  # the client went away first
                if rec.saw_stream_end():  # an SDK closing right after the final event
                    rec.finish(COMPLETE)
                else:
                    rec.finish(
                        CLIENT_DISCONNECTED, "client disconnected; upstream request cancelled"
                    )
                forward.cancel()
            cut = False
            with contextlib.suppress(asyncio.CancelledError):
                cut = await forward
            if cut:
                _CUT.set(True)
        except asyncio.CancelledError:  # server shutdown ran out of grace time
            rec.finish(INTERRUPTED, "proxy shut down before the exchange finished")
            forward.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await forward
            if rec.status is None:  # no response headers yet: the client gets an answer
                body = _error_body("proxy_shutdown", "shut down before the upstream answered")
                with contextlib.suppress(Exception):
                    await _respond(send, 503, body)
            raise
        finally:
            watch.cancel()

    async def _forward(self, rec: ExchangeRecorder, send: Send) -> bool:
        """Forward one exchange. The record is written BEFORE the client sees the end of the
        response, so an exchange the client saw finish is already on disk (in the kernel).
        True when the response is left unfinished on purpose, for uvicorn to cut."""
        assert self._client is not None, "lifespan startup did not run"
        response: httpx.Response | None = None
        emitted = False
        try:
            # as bytes: the headers were read as Latin-1, so this gives back the client's bytes
            # (a UTF-8 `X-Title: café` included; httpx encodes text headers as ASCII)
            raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in rec.request_headers]
            request = httpx.Request(rec.method, rec.url, headers=raw, content=rec.request_body)
            try:
                response = await self._client.send(request, stream=True)
            except httpx.HTTPError as exc:
                timeout = isinstance(exc, httpx.TimeoutException)
                outcome = UPSTREAM_TIMEOUT if timeout else UPSTREAM_UNREACHABLE
                rec.finish(outcome, f"{type(exc).__name__}: {exc}")
                emitted = await self._emit_off_loop(rec)
                await _respond(
                    send, 504 if timeout else 502, _error_body(outcome, _describe(exc, rec))
                )
                return False
            headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.headers.raw]
            rec.on_response_headers(response.status_code, headers)
            forwarded = [
                (k, v)
                for k, v in response.headers.raw
                if k.decode("latin-1").lower() not in HOP_BY_HOP
            ]
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status_code,
                    "headers": forwarded,
                }
            )
            declared = header_value(headers, "content-length")
            remaining = int(declared) if declared and declared.isdigit() else None
            try:
                async for chunk in response.aiter_raw():
                    rec.on_chunk(chunk)
                    if remaining is not None:
                        remaining -= len(chunk)
                        if remaining <= 0 and not emitted:  # this chunk completes the body
                            rec.finish(COMPLETE)
                            emitted = await self._emit_off_loop(rec)
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            except httpx.HTTPError as exc:
                rec.finish(INTERRUPTED, f"upstream stream ended early: {type(exc).__name__}: {exc}")
                # The client must see the break as it would without us, not a clean end: left
                # unfinished, the response is cut by uvicorn closing the connection (a chunked
                # body without its last chunk, a fixed-length one short), as at shutdown, and
                # the client's HTTP library raises. The record is written first (finally).
                return True
            rec.finish(COMPLETE)
            if not emitted:
                emitted = await self._emit_off_loop(rec)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return False
        finally:
            if not emitted:
                self._emit(rec)
            if response is not None:
                await response.aclose()

    def _claim(self, rec: ExchangeRecorder) -> bool:
        """True the first time a record is to be written, False after (exactly once). An
        exchange cancelled without a reason recorded is finished as interrupted first."""
        if rec.outcome is None:
            rec.finish(INTERRUPTED, "exchange cancelled")
        with self._emit_lock:
            if rec.emitted:
                return False
            rec.emitted = True
            return True

    async def _emit_off_loop(self, rec: ExchangeRecorder) -> bool:
        """`_emit` in a worker thread: building, masking and writing a record costs ~26 ms per
        MB of it, which on the event loop paused every other stream for as long. The exchange
        waits for it (its record is on disk before its client sees the end); a cancel meanwhile
        leaves the thread to finish, and the record, claimed, is not written again."""
        if self._claim(rec):
            await asyncio.to_thread(self._write, rec)
        return True

    def _emit(self, rec: ExchangeRecorder) -> bool:
        if self._claim(rec):
            self._write(rec)
        return True

    def _write(self, rec: ExchangeRecorder) -> None:
        written = self.writer.write_record(rec.record())
        outcome = rec.outcome or INTERRUPTED
        # an exchange whose record could not be written is not counted as recorded (the
        # writer says why on stderr); the final line gives both counts
        self.stats.add(outcome if written else UNRECORDED)
        if self.options.verbose:
            status = rec.status if rec.status is not None else "---"
            ttfb = f"{rec.first_byte_ms:.0f}" if rec.first_byte_ms is not None else "-"
            self.log(
                f"{status} {rec.method} {shown_url(rec.url)} {rec.body_bytes} B"
                f" ttfb {ttfb} ms total {rec.end_ms or 0:.0f} ms {outcome}"
            )


def _describe(exc: Exception, rec: ExchangeRecorder) -> str:
    return redact_text(f"{type(exc).__name__} talking to {shown_url(rec.url)}: {exc}")


def _hints(headers: list[tuple[str, str]], route: UpstreamRoute) -> Hints:
    return hints_from_headers(headers, Hints(agent=route.agent))


async def _read_body(receive: Receive) -> bytes | None:
    parts: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(parts)


async def _wait_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _respond(send: Send, status: int, body: bytes, *, close: bool = False) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def header_timeout_protocol(seconds: float) -> type[H11Protocol]:
    """uvicorn's HTTP/1.1 protocol, closing a connection whose first request has not arrived
    (request line and headers) within `seconds`: uvicorn's own keep-alive timeout only starts
    after a response, so without this an idle or HTTP/0.9 client holds a connection forever."""

    class HeaderTimeoutProtocol(H11Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)  # type: ignore[arg-type]
            self._header_timer = self.loop.call_later(seconds, self._no_request_in_time)

        def connection_lost(self, exc: Exception | None) -> None:
            self._header_timer.cancel()
            super().connection_lost(exc)

        def _no_request_in_time(self) -> None:
            if self.cycle is None and not self.transport.is_closing():
                self.transport.close()

    return HeaderTimeoutProtocol


# How long an idle kept-alive client connection stays open. uvicorn's default, 5 s, is the idle
# expiry of httpx's pool (the OpenAI and Anthropic Python SDKs'), and uvicorn's clock starts when
# it sends a response, before the client has read it: a client reusing its connection just
# under its own 5 s met a server closing that connection, its request was never read (the close
# resets it), the client raised `httpx.ReadError` and nothing was recorded (~1 in 2,000 requests
# under load, where the event loop lags). A client must always give up on an idle connection
# first: this is longer than common clients' idle expiry (httpx 5 s, undici 4 s, aiohttp 15 s,
# Go's and hyper's 90 s); an idle connection costs only a file descriptor.
KEEP_ALIVE_SECONDS = 120


# How long the proxy keeps an idle upstream connection for reuse: under the 5 s keep-alive of
# upstreams served by uvicorn (vLLM, SGLang, `simulate serve`) and Node (5 s), so the proxy gives
# up on a connection before such a server closes it (the race KEEP_ALIVE_SECONDS avoids on the
# client side; here it would answer the client 502 for a request the upstream never read).
UPSTREAM_IDLE_SECONDS = 4.0


def server_config(app: Any, *, grace_seconds: float, http: Any = "auto") -> uvicorn.Config:
    """The uvicorn configuration the recording proxy runs with (`capture proxy`, `capture run`)."""
    return uvicorn.Config(
        app,
        log_level="warning",
        lifespan="on",
        server_header=False,  # pass the upstream's own Server and Date headers through
        date_header=False,
        timeout_graceful_shutdown=max(1, round(grace_seconds)),
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        access_log=False,
        http=http,
    )


def bind(listen: str) -> socket.socket:
    """A listening socket for `listen`; failures become a NetworkError with a hint."""
    host, port = parse_listen(listen)
    return listening_socket(
        host,
        port,
        hint="another process may use the port; pick another with --listen 127.0.0.1:PORT",
    )


def url_host(host: str) -> str:
    """A host as a URL writes it: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host else host


def listening_socket(host: str, port: int, *, hint: str) -> socket.socket:
    """A TCP socket listening on host:port for uvicorn (named host:port in the error); a
    failure to bind (port in use, address not here, no permission) is a NetworkError, with
    `hint` when the port may be taken and a hint about the host when it is not this machine's."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP matters: asyncio only sets TCP_NODELAY on accepted sockets whose proto
    # says TCP, and without it Nagle holds a small SSE chunk back ~40 ms behind delayed ACKs.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
            hint = f"{host} is not an address of this machine; use 127.0.0.1 to stay local"
        raise NetworkError(
            f"cannot listen on {url_host(host)}:{port}: {exc.strerror or exc}", hint=hint
        ) from exc
    sock.listen(1024)
    sock.set_inheritable(True)
    return sock


class _Server(uvicorn.Server):
    """uvicorn's server, minus re-raising the stop signal after a graceful shutdown (which would
    kill the process before the last records are written): SIGTERM/SIGINT stop it cleanly, a
    second SIGINT forces the exit."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        else:
            self.should_exit = True


class _UvicornLines(logging.Filter):
    """On uvicorn's error logger. Its complaint that an exchange returned without completing
    its response is dropped when the proxy cut it on purpose (the client must see a cut
    stream, not a clean end): an upstream that broke off mid-body (`_CUT`), or any exchange
    while the server stops. Then its line about cancelling the exchanges left when the grace
    time ends becomes one line of ours. Other lines pass."""

    CUT_PREFIX = "Cancel "
    UNFINISHED = (
        "ASGI callable returned without completing response.",
        "ASGI callable returned without starting response.",
    )

    def __init__(self, server: uvicorn.Server, log: Log) -> None:
        super().__init__()
        self.server = server
        self.log = log

    def filter(self, record: logging.LogRecord) -> bool:
        if _CUT.get() and str(record.msg) in self.UNFINISHED:
            return False
        if not self.server.should_exit:
            return True
        msg = str(record.msg)
        if msg.startswith(self.CUT_PREFIX) and "graceful shutdown" in msg:
            cut = record.args[0] if isinstance(record.args, tuple) and record.args else "the"
            self.log(
                f"capture: shutdown grace time over; cutting {cut} exchange(s) still in"
                " flight (recorded as interrupted)"
            )
            return False
        return msg not in self.UNFINISHED


def serve(
    config: ProxyConfig,
    out_dir: Path,
    listen: str,
    options: ProxyOptions | None = None,
    *,
    fsync: FsyncPolicy = "interval",
    rotate_bytes: int | None = None,
    log: Log = stderr_log,
    grace_seconds: float = 10.0,
) -> int:
    """Run the proxy until SIGINT/SIGTERM; returns the number of exchanges recorded.

    On a signal uvicorn stops accepting, lets exchanges in flight finish for `grace_seconds`,
    then cancels the rest (recorded as interrupted); the writer is synced and closed last.
    """
    host, _ = parse_listen(listen)
    sock = bind(listen)  # first: no exposure warning for an address that cannot be bound
    warning = exposure_warning(host)
    if warning:
        log(warning)
    writer = CaptureWriter(out_dir, fsync=fsync, rotate_bytes=rotate_bytes or DEFAULT_ROTATE_BYTES)
    app = CaptureProxy(config, writer, options, log)
    bound_host, bound_port = sock.getsockname()[:2]
    shown = url_host(bound_host)
    for route in config.routes:
        where = f"host {route.host} " if route.host else ""
        entry = f"http://{shown}:{bound_port}{route.prefix.rstrip('/')}/..."
        log(f"capture: {where}{entry} -> {shown_url(route.url)}")
    log(f"capture: listening on http://{shown}:{bound_port}, writing to {out_dir} (Ctrl-C stops)")
    server = _Server(
        server_config(
            app,
            grace_seconds=grace_seconds,
            http=header_timeout_protocol(app.options.header_timeout),
        )
    )
    uvicorn_log = logging.getLogger("uvicorn.error")
    uvicorn_lines = _UvicornLines(server, log)
    uvicorn_log.addFilter(uvicorn_lines)
    try:
        server.run(sockets=[sock])
    finally:
        uvicorn_log.removeFilter(uvicorn_lines)
        writer.close()
        sock.close()
    return app.stats.recorded
