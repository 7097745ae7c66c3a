"""mitmproxy flow -> capture record, without importing mitmproxy.

The addon (`mitm_addon.py`) copies what it needs from a flow into a `FlowSnapshot` (plain
values, epoch timestamps as mitmproxy keeps them) and hands it to `snapshot_record`; keeping the
conversion here makes it testable where mitmproxy is not installed (it is an optional extra).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pipeline.capture.decode import BodyDecoder
from pipeline.capture.exchange import (
    CLIENT_DISCONNECTED,
    COMPLETE,
    HINT_HEADERS,
    INTERRUPTED,
    UPSTREAM_TIMEOUT,
    UPSTREAM_UNREACHABLE,
    Hints,
    hints_from_headers,
)
from pipeline.capture_format import make_record
from pipeline.providers import api_from_path
from pipeline.redact import redact_text


@dataclass
class ChunkTap:
    """mitmproxy's `flow.response.stream` callable: passes each raw chunk on unchanged and keeps
    the decoded copy with its arrival time (epoch seconds). mitmproxy ends with an empty call."""

    content_encoding: str | None = None
    clock: Any = time.time
    body: bytearray = field(default_factory=bytearray)
    chunks: list[tuple[float, int]] = field(default_factory=list)
    ended_at: float | None = None
    _decoder: BodyDecoder | None = None

    def __post_init__(self) -> None:
        self._decoder = BodyDecoder(self.content_encoding)

    def __call__(self, raw: bytes) -> bytes:
        now = self.clock()
        assert self._decoder is not None
        data = self._decoder.decode(raw) if raw else self._decoder.flush()
        if data:
            self.body += data
            self.chunks.append((now, len(data)))
        if not raw:
            self.ended_at = now
        return raw

    @property
    def decode_error(self) -> str | None:
        return self._decoder.error if self._decoder else None


@dataclass
class FlowSnapshot:
    """What a capture record needs from a mitmproxy HTTPFlow. Times are epoch seconds."""

    started_at: float
    method: str
    url: str
    request_headers: list[tuple[str, str]]
    request_body: bytes
    status: int | None = None
    response_headers: list[tuple[str, str]] | None = None
    response_headers_at: float | None = None
    response_body: bytes | None = None  # decoded
    chunks: list[tuple[float, int]] | None = None  # (epoch arrival, decoded length)
    ended_at: float | None = None
    error: str | None = None  # flow.error.msg, when mitmproxy reported one
    decode_error: str | None = None
    record_id: str | None = None


def outcome_for(error: str | None, got_response: bool) -> str:
    """Map mitmproxy's error text to a capture outcome."""
    if error is None:
        return COMPLETE
    text = error.lower()
    if "client" in text and ("disconnect" in text or "closed" in text):
        return CLIENT_DISCONNECTED
    if got_response:
        return INTERRUPTED  # the server went away (or stalled) after its headers
    if "timeout" in text or "timed out" in text:
        return UPSTREAM_TIMEOUT
    return UPSTREAM_UNREACHABLE


def take_hints(headers: Any, default: Hints) -> Hints:
    """The hints of mitmproxy request `headers` (a `mitmproxy.http.Headers`: `.fields` as
    (bytes, bytes) pairs, `del headers[name]` drops every occurrence). The `x-cacheaudit-*`
    headers override `default` as in the proxy and are removed, so they do not go upstream."""
    pairs = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers.fields]
    hints = hints_from_headers(pairs, default)
    for name in HINT_HEADERS:
        if name in headers:
            del headers[name]
    return hints


def wanted(method: str, path: str, record_all: bool) -> bool:
    """By default only calls that look like LLM APIs are recorded, not all proxied traffic."""
    return record_all or (
        method.upper() == "POST" and api_from_path(path.split("?")[0]) is not None
    )


def _ms(at: float | None, start: float) -> float | None:
    return None if at is None else round((at - start) * 1000.0, 3)


def snapshot_record(snap: FlowSnapshot, hints: Hints | None = None) -> dict[str, Any]:
    hints = hints or Hints()
    got_response = snap.status is not None
    chunks = (
        [(_ms(at, snap.started_at) or 0.0, n) for at, n in snap.chunks]
        if snap.chunks is not None
        else None
    )
    first_byte = chunks[0][0] if chunks else None
    error = snap.error or snap.decode_error
    return make_record(
        record_id=snap.record_id,
        started_at=datetime.fromtimestamp(snap.started_at, UTC),
        method=snap.method,
        url=snap.url,
        request_headers=snap.request_headers,
        request_body=snap.request_body,
        status=snap.status,
        response_headers=snap.response_headers,
        response_body=(snap.response_body or b"") if got_response else None,
        chunks=chunks if got_response else None,
        response_headers_ms=_ms(snap.response_headers_at, snap.started_at),
        first_byte_ms=first_byte,
        end_ms=_ms(snap.ended_at, snap.started_at),
        outcome=outcome_for(snap.error, got_response),
        error=redact_text(error) if error else None,
        session_id=hints.session_id,
        agent=hints.agent,
        tags=list(hints.tags),
    )
