"""Record an application's own LLM API calls from inside the process: httpx clients whose
transport writes every exchange to a capture directory.

    from pipeline.capture.hooks import recording_client
    client = openai.OpenAI(http_client=recording_client(Path("capture")))

The recording transport wraps the client's real transport (and any proxy mounts), so requests go
out exactly as they would have. A streamed response is recorded as the application consumes it:
each chunk is timed when the application's read returns it and handed on unchanged; the record
is written when the response is closed (the SDKs close it at the end of a stream). An
application that stops reading early produces a `client_disconnected` record with what it read.
The proxy's `x-cacheaudit-session` / `-agent` / `-tags` request headers are honoured here too:
they override the client's hints for that request and are removed before it goes out.

Two HTTP libraries are served, because SDKs differ: `httpx` (`recording_client`,
`async_recording_client`; accepted by the OpenAI SDK) and its successor `httpx2`
(`recording_httpx2_client`, `async_recording_httpx2_client`; required by Anthropic SDK 2.x,
which rejects a plain `httpx.Client`). Both share one implementation, built per module.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Callable, Iterator
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx

from pipeline.capture.exchange import (
    CLIENT_DISCONNECTED,
    COMPLETE,
    HINT_HEADERS,
    INTERRUPTED,
    UPSTREAM_TIMEOUT,
    UPSTREAM_UNREACHABLE,
    ExchangeRecorder,
    Hints,
    hints_from_headers,
)
from pipeline.capture.writer import CaptureWriter, shared_writer

Emit = Callable[[ExchangeRecorder], None]


def _emitter(writer: CaptureWriter) -> Emit:
    def emit(rec: ExchangeRecorder) -> None:
        writer.write_record(rec.record())

    return emit


def _headers(raw: list[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in raw]


def _start(request: Any, body: bytes, default: Hints) -> ExchangeRecorder:
    """The recorder for `request`. The `x-cacheaudit-*` hint headers, as the proxy honours them,
    override the client's hints for this exchange and are removed from the request before it
    goes out (and so from the record)."""
    headers = _headers(request.headers.raw)
    hints = hints_from_headers(headers, default)
    if any(name.lower() in HINT_HEADERS for name, _ in headers):
        for name in HINT_HEADERS:
            request.headers.pop(name, None)
        headers = _headers(request.headers.raw)
    return ExchangeRecorder(request.method, str(request.url), headers, body, hints)


def _fail(rec: ExchangeRecorder, exc: Exception, mod: ModuleType) -> None:
    outcome = UPSTREAM_TIMEOUT if isinstance(exc, mod.TimeoutException) else UPSTREAM_UNREACHABLE
    rec.finish(outcome, f"{type(exc).__name__}: {exc}")


def _finish_on_close(rec: ExchangeRecorder) -> None:
    """The application closed the response: complete if the body was read to its end (or to
    the stream's closing event), else the application stopped early."""
    if rec.saw_stream_end():
        rec.finish(COMPLETE)
    else:
        rec.finish(CLIENT_DISCONNECTED, "application closed the response before its end")


@cache
def _classes(module_name: str) -> dict[str, type]:
    """The sync/async transport and stream classes for `httpx` or `httpx2`."""
    mod = importlib.import_module(module_name)

    class RecordingStream(mod.SyncByteStream):  # type: ignore[name-defined,misc]
        def __init__(self, inner: Any, rec: ExchangeRecorder, emit: Emit) -> None:
            self._inner, self._rec, self._emit, self._written = inner, rec, emit, False

        def __iter__(self) -> Iterator[bytes]:
            try:
                for chunk in self._inner:
                    self._rec.on_chunk(chunk)
                    yield chunk
            except mod.HTTPError as exc:
                self._rec.finish(INTERRUPTED, f"{type(exc).__name__}: {exc}")
                raise
            self._rec.finish(COMPLETE)

        def close(self) -> None:
            try:
                self._inner.close()
            finally:
                if not self._written:
                    self._written = True
                    _finish_on_close(self._rec)
                    self._emit(self._rec)

    class AsyncRecordingStream(mod.AsyncByteStream):  # type: ignore[name-defined,misc]
        def __init__(self, inner: Any, rec: ExchangeRecorder, emit: Emit) -> None:
            self._inner, self._rec, self._emit, self._written = inner, rec, emit, False

        async def __aiter__(self) -> AsyncIterator[bytes]:
            try:
                async for chunk in self._inner:
                    self._rec.on_chunk(chunk)
                    yield chunk
            except mod.HTTPError as exc:
                self._rec.finish(INTERRUPTED, f"{type(exc).__name__}: {exc}")
                raise
            self._rec.finish(COMPLETE)

        async def aclose(self) -> None:
            try:
                await self._inner.aclose()
            finally:
                if not self._written:
                    self._written = True
                    _finish_on_close(self._rec)
                    self._emit(self._rec)

    class RecordingTransport(mod.BaseTransport):  # type: ignore[name-defined,misc]
        def __init__(self, inner: Any, emit: Emit, hints: Hints) -> None:
            self.inner, self._emit, self._hints = inner, emit, hints

        def handle_request(self, request: Any) -> Any:
            rec = _start(request, request.read(), self._hints)
            try:
                response = self.inner.handle_request(request)
            except mod.TransportError as exc:
                _fail(rec, exc, mod)
                self._emit(rec)
                raise
            rec.on_response_headers(response.status_code, _headers(response.headers.raw))
            response.stream = RecordingStream(response.stream, rec, self._emit)
            return response

        def __enter__(self) -> Any:
            self.inner.__enter__()
            return self

        def __exit__(self, *args: Any) -> None:
            self.inner.__exit__(*args)

        def close(self) -> None:
            self.inner.close()

    class AsyncRecordingTransport(mod.AsyncBaseTransport):  # type: ignore[name-defined,misc]
        def __init__(self, inner: Any, emit: Emit, hints: Hints) -> None:
            self.inner, self._emit, self._hints = inner, emit, hints

        async def handle_async_request(self, request: Any) -> Any:
            rec = _start(request, await request.aread(), self._hints)
            try:
                response = await self.inner.handle_async_request(request)
            except mod.TransportError as exc:
                _fail(rec, exc, mod)
                self._emit(rec)
                raise
            rec.on_response_headers(response.status_code, _headers(response.headers.raw))
            response.stream = AsyncRecordingStream(response.stream, rec, self._emit)
            return response

        async def __aenter__(self) -> Any:
            await self.inner.__aenter__()
            return self

        async def __aexit__(self, *args: Any) -> None:
            await self.inner.__aexit__(*args)

        async def aclose(self) -> None:
            await self.inner.aclose()

    return {"sync": RecordingTransport, "async": AsyncRecordingTransport}


def _wrap(client: Any, kind: str, module_name: str, emit: Emit, hints: Hints) -> Any:
    """Put the recorder in front of the client's transport and of every mounted one (proxy
    mounts from the environment included), so no request escapes unrecorded."""
    transport_cls = _classes(module_name)[kind]
    client._transport = transport_cls(client._transport, emit, hints)
    client._mounts = {
        pattern: None if inner is None else transport_cls(inner, emit, hints)
        for pattern, inner in client._mounts.items()
    }
    return client


def _hints(session_id: str | None, agent: str | None, tags: list[str] | None) -> Hints:
    return Hints(session_id=session_id, agent=agent, tags=tuple(tags or ()))


def recording_client(
    out_dir: Path,
    *,
    session_id: str | None = None,
    agent: str | None = None,
    tags: list[str] | None = None,
    **httpx_kwargs: Any,
) -> httpx.Client:
    """An `httpx.Client` (any `httpx.Client` keyword works) that records every exchange to
    capture JSONL files under `out_dir`, with the given hints on each record."""
    emit = _emitter(shared_writer(Path(out_dir)))
    client: httpx.Client = _wrap(
        httpx.Client(**httpx_kwargs), "sync", "httpx", emit, _hints(session_id, agent, tags)
    )
    return client


def async_recording_client(
    out_dir: Path,
    *,
    session_id: str | None = None,
    agent: str | None = None,
    tags: list[str] | None = None,
    **httpx_kwargs: Any,
) -> httpx.AsyncClient:
    """`recording_client` for asyncio code: an `httpx.AsyncClient`."""
    emit = _emitter(shared_writer(Path(out_dir)))
    client: httpx.AsyncClient = _wrap(
        httpx.AsyncClient(**httpx_kwargs), "async", "httpx", emit, _hints(session_id, agent, tags)
    )
    return client


def recording_httpx2_client(
    out_dir: Path,
    *,
    session_id: str | None = None,
    agent: str | None = None,
    tags: list[str] | None = None,
    **httpx_kwargs: Any,
) -> Any:
    """Like `recording_client`, but an `httpx2.Client` (for `anthropic.Anthropic(http_client=)`
    in Anthropic SDK 2.x). Needs the `httpx2` package, which those SDKs install."""
    httpx2 = importlib.import_module("httpx2")
    emit = _emitter(shared_writer(Path(out_dir)))
    hints = _hints(session_id, agent, tags)
    return _wrap(httpx2.Client(**httpx_kwargs), "sync", "httpx2", emit, hints)


def async_recording_httpx2_client(
    out_dir: Path,
    *,
    session_id: str | None = None,
    agent: str | None = None,
    tags: list[str] | None = None,
    **httpx_kwargs: Any,
) -> Any:
    """`recording_httpx2_client` for asyncio code: an `httpx2.AsyncClient`."""
    httpx2 = importlib.import_module("httpx2")
    emit = _emitter(shared_writer(Path(out_dir)))
    hints = _hints(session_id, agent, tags)
    return _wrap(httpx2.AsyncClient(**httpx_kwargs), "async", "httpx2", emit, hints)
