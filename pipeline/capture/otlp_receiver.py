"""An OTLP/HTTP trace receiver: `cacheaudit capture otlp`.

OpenTelemetry SDKs and Collectors export spans with `POST /v1/traces`, the body an
`ExportTraceServiceRequest` in protobuf (`application/x-protobuf`) or in OTLP/JSON
(`application/json`), optionally gzip-compressed (`Content-Encoding: gzip`). Each request is
written as one line of OTLP/JSON, the format `cacheaudit ingest` reads (pipeline.sources.otlp), to
`<out>/otlp-<hour>Z-p<pid>.jsonl`. Protobuf is decoded with the official definitions
(`opentelemetry-proto`); trace and span ids, bytes in protobuf, become the hex strings OTLP/JSON
uses.

Secrets never reach the file: an attribute whose name says it holds a credential (the header
rule of `pipeline.redact`, e.g. `http.request.header.authorization`) has its value replaced, and
URL attributes lose their credentials (`redact_url`, `redact_query`). Prompt text and other
values (an exception's message and stack trace) pass the capture writer's last gate, which masks
key shapes and credentials written as text (`pipeline.body_secrets.mask_secrets`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import zlib
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import orjson
import uvicorn

from pipeline.capture.config import exposure_warning, parse_listen
from pipeline.capture.proxy import KEEP_ALIVE_SECONDS, _Server, bind, stderr_log, url_host
from pipeline.capture.writer import CaptureWriter
from pipeline.redact import REDACTED, is_secret_name, redact_query, redact_text, redact_url
from pipeline.reports.numbers import count

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Log = Callable[[str], None]

DEFAULT_LISTEN = "127.0.0.1:4318"  # the OTLP/HTTP port exporters default to
TRACES_PATH = "/v1/traces"
# An export batch is a few MB at most; a body past this is refused (413) rather than held.
MAX_BODY_BYTES = 64 * 1024 * 1024
_ID_KEYS = ("traceId", "spanId", "parentSpanId")
# Attributes holding a URL, or a path with its query string (`http.target`, the older name).
_URL_KEYS = frozenset({"url.full", "http.url", "url.original", "http.target"})
_QUERY_KEYS = frozenset({"url.query"})
PROTOBUF = "application/x-protobuf"


class BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _hex_ids(obj: dict[str, Any]) -> None:
    """MessageToDict writes bytes fields as base64; OTLP/JSON writes ids as hex."""
    import base64

    for key in _ID_KEYS:
        value = obj.get(key)
        if isinstance(value, str) and value:
            obj[key] = base64.b64decode(value).hex()


def _redact_attributes(attrs: Any) -> None:
    if not isinstance(attrs, list):
        return
    for kv in attrs:
        if not isinstance(kv, dict):
            continue
        key = str(kv.get("key", ""))
        value = kv.get("value")
        if is_secret_name(key) or is_secret_name(key.rsplit(".", 1)[-1]):
            kv["value"] = {"stringValue": REDACTED}
        elif key in _URL_KEYS and isinstance(value, dict) and "stringValue" in value:
            value["stringValue"] = redact_url(str(value["stringValue"]))
        elif key in _QUERY_KEYS and isinstance(value, dict) and "stringValue" in value:
            value["stringValue"] = redact_query(str(value["stringValue"]))


def clean(export: dict[str, Any], *, from_protobuf: bool) -> dict[str, Any]:
    """Ids as hex (protobuf input) and credentials redacted, in place; returns `export`."""
    for resource_spans in export.get("resourceSpans") or ():
        if not isinstance(resource_spans, dict):
            continue
        _redact_attributes((resource_spans.get("resource") or {}).get("attributes"))
        for scope_spans in resource_spans.get("scopeSpans") or ():
            for span in (scope_spans or {}).get("spans") or ():
                if not isinstance(span, dict):
                    continue
                if from_protobuf:
                    _hex_ids(span)
                    for link in span.get("links") or ():
                        _hex_ids(link)
                _redact_attributes(span.get("attributes"))
                for event in span.get("events") or ():
                    _redact_attributes((event or {}).get("attributes"))
                for link in span.get("links") or ():
                    _redact_attributes((link or {}).get("attributes"))
    return export


def decode(body: bytes, content_type: str, content_encoding: str) -> tuple[dict[str, Any], bool]:
    """(OTLP/JSON export, was protobuf) from a request body; BadRequest when it is not one."""
    encoding = content_encoding.strip().lower()
    if encoding == "gzip":
        try:
            body = gzip.decompress(body)
        except (OSError, EOFError, zlib.error) as exc:
            raise BadRequest(400, f"body is not valid gzip: {exc}") from exc
    elif encoding not in ("", "identity"):
        raise BadRequest(415, f"Content-Encoding {encoding!r} not supported (gzip or none)")
    kind = content_type.split(";")[0].strip().lower()
    if kind == PROTOBUF:
        from google.protobuf.json_format import MessageToDict
        from google.protobuf.message import DecodeError
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        request = ExportTraceServiceRequest()
        try:
            request.ParseFromString(body)
        except DecodeError as exc:
            raise BadRequest(400, f"body is not an ExportTraceServiceRequest: {exc}") from exc
        return MessageToDict(request), True
    if kind == "application/json":
        try:
            export = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise BadRequest(400, f"body is not JSON: {exc}") from exc
        if not isinstance(export, dict):
            raise BadRequest(400, "body is not an OTLP/JSON export object")
        return export, False
    raise BadRequest(415, f"Content-Type {kind!r} not supported ({PROTOBUF} or application/json)")


class OtlpReceiver:
    """ASGI app: POST /v1/traces -> one OTLP/JSON line per export in `writer`."""

    def __init__(self, writer: CaptureWriter, log: Log = stderr_log) -> None:
        self.writer = writer
        self.log = log
        self.exports = 0
        self.unwritten = 0
        self.spans = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    self.writer.flush()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        content_type = headers.get("content-type", "")
        protobuf = content_type.split(";")[0].strip().lower() == PROTOBUF
        try:
            if scope["path"] != TRACES_PATH:
                shown = redact_text(redact_url(scope["path"]))
                raise BadRequest(404, f"no such endpoint {shown!r}; spans go to /v1/traces")
            if scope["method"] != "POST":
                raise BadRequest(405, "use POST")
            body = await _read_body(receive)
            if body is None:
                return
            export, protobuf = await asyncio.to_thread(
                decode, body, content_type, headers.get("content-encoding", "")
            )
            line = orjson.dumps(clean(export, from_protobuf=protobuf)) + b"\n"
            spans = sum(
                len((ss or {}).get("spans") or ())
                for rs in export.get("resourceSpans") or ()
                for ss in (rs or {}).get("scopeSpans") or ()
            )
            # off the event loop, as the decoding: masking a large export takes milliseconds
            if not await asyncio.to_thread(self.writer.write, line):
                # the export is the whole record: a 503 makes the exporter send it again
                # (OTLP/HTTP retries 429, 502, 503 and 504), where a 200 would lose it
                self.unwritten += 1
                raise BadRequest(503, "the capture file could not be written; retry later")
        except BadRequest as exc:
            await _error(send, exc, protobuf)
            self.log(f"capture otlp: {exc.status} {exc.message}")
            return
        self.exports += 1
        self.spans += spans
        if protobuf:
            from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
                ExportTraceServiceResponse,
            )

            await _respond(send, 200, ExportTraceServiceResponse().SerializeToString(), PROTOBUF)
        else:
            await _respond(send, 200, b"{}", "application/json")


async def _read_body(receive: Receive) -> bytes | None:
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise BadRequest(413, f"body larger than {MAX_BODY_BYTES // 1024**2} MB")
        parts.append(chunk)
        if not message.get("more_body", False):
            return b"".join(parts)


async def _respond(send: Send, status: int, body: bytes, content_type: str) -> None:
    headers = [
        (b"content-type", content_type.encode()),
        (b"content-length", str(len(body)).encode()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _error(send: Send, exc: BadRequest, protobuf: bool) -> None:
    """An error as OTLP/HTTP answers it: a google.rpc.Status in the request's encoding."""
    if protobuf:
        with contextlib.suppress(Exception):
            await _respond(send, exc.status, _status_proto(3, exc.message), PROTOBUF)
        return
    body = orjson.dumps({"code": 3, "message": exc.message})
    with contextlib.suppress(Exception):
        await _respond(send, exc.status, body, "application/json")


def _status_proto(code: int, message: str) -> bytes:
    """google.rpc.Status {code = 1 (varint), message = 2 (string)} encoded by hand: its
    generated class lives in another package (googleapis-common-protos) for two fields."""
    text = message.encode()
    length = bytearray()
    n = len(text)
    while True:
        byte, n = n & 0x7F, n >> 7
        length.append(byte | (0x80 if n else 0))
        if not n:
            break
    return bytes([0x08, code, 0x12]) + bytes(length) + text


def server_config(app: OtlpReceiver) -> uvicorn.Config:
    """The uvicorn configuration the receiver runs with. An exporter exports every few seconds
    (OpenTelemetry's batch processors: 5 s, uvicorn's own keep-alive): its pooled connection
    must not be closed under it (see KEEP_ALIVE_SECONDS)."""
    return uvicorn.Config(
        app,
        log_level="warning",
        lifespan="on",
        access_log=False,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
    )


def serve(out_dir: Path, listen: str, *, log: Log = stderr_log) -> OtlpReceiver:
    """Receive spans until SIGINT/SIGTERM; returns the receiver (its counts)."""
    host, _ = parse_listen(listen)
    sock = bind(listen)
    warning = exposure_warning(host)
    if warning:
        log(warning)
    writer = CaptureWriter(out_dir, prefix="otlp")
    app = OtlpReceiver(writer, log)
    bound_host, bound_port = sock.getsockname()[:2]
    log(
        f"capture otlp: receiving OTLP/HTTP traces on http://{url_host(bound_host)}:{bound_port}"
        f"{TRACES_PATH}, writing to {out_dir} (Ctrl-C stops)"
    )
    server = _Server(server_config(app))
    try:
        server.run(sockets=[sock])
    finally:
        writer.close()
        sock.close()
    refused = f"; {app.unwritten} refused with 503 (file not written)" if app.unwritten else ""
    log(
        f"capture otlp: stopped; {count(app.exports, 'export', grouping=False)},"
        f" {count(app.spans, 'span', grouping=False)} written{refused}"
    )
    return app
