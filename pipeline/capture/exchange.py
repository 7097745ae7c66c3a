"""One exchange being recorded: timings, body chunks as they arrive, and how it ended.

The proxy and the httpx hooks both drive an `ExchangeRecorder`; `record()` turns it into a
capture record through `make_record`, which is where redaction and the account fingerprint
happen. Offsets are measured on the monotonic clock from the request start; `started_at` is the
wall-clock time of that same instant.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pipeline.capture.decode import BodyDecoder
from pipeline.capture_format import make_record
from pipeline.redact import redact_text

# Outcomes of the capture format (schemas/capture.schema.json).
COMPLETE = "complete"
INTERRUPTED = "interrupted"
UPSTREAM_UNREACHABLE = "upstream_unreachable"
UPSTREAM_TIMEOUT = "upstream_timeout"
CLIENT_DISCONNECTED = "client_disconnected"

# Headers that describe one connection, not the message (RFC 9110 7.6.1): never forwarded.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)


# Request headers a client may add to label its exchanges; every capture path (proxy, SDK hooks,
# mitmproxy addon) records them as the record's hints and removes them before the request goes
# upstream (they are ours, not the provider's).
HINT_HEADERS = ("x-cacheaudit-session", "x-cacheaudit-agent", "x-cacheaudit-tags")


@dataclass(frozen=True, slots=True)
class Hints:
    session_id: str | None = None
    agent: str | None = None
    tags: tuple[str, ...] = ()


def header_value(headers: list[tuple[str, str]], name: str) -> str | None:
    name = name.lower()
    return next((v for k, v in headers if k.lower() == name), None)


def hints_from_headers(headers: list[tuple[str, str]], default: Hints | None = None) -> Hints:
    """The hints the `x-cacheaudit-*` request headers give (`x-cacheaudit-tags` is comma
    separated); a header that is absent or blank leaves `default`'s value (a proxy route's
    agent, the hooks' keyword arguments, the addon's `cacheaudit_agent`)."""
    default = default or Hints()
    session = (header_value(headers, "x-cacheaudit-session") or "").strip()
    agent = (header_value(headers, "x-cacheaudit-agent") or "").strip()
    raw_tags = header_value(headers, "x-cacheaudit-tags") or ""
    tags = tuple(t.strip() for t in raw_tags.split(",") if t.strip())
    return Hints(
        session_id=session or default.session_id,
        agent=agent or default.agent,
        tags=tags or default.tags,
    )


@dataclass
class ExchangeRecorder:
    method: str
    url: str
    request_headers: list[tuple[str, str]]
    request_body: bytes
    hints: Hints = field(default_factory=Hints)
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    t0: float = field(default_factory=time.perf_counter)
    record_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    status: int | None = None
    response_headers: list[tuple[str, str]] | None = None
    response_headers_ms: float | None = None
    first_byte_ms: float | None = None
    end_ms: float | None = None
    outcome: str | None = None
    error: str | None = None
    _body: bytearray = field(default_factory=bytearray)
    _chunks: list[tuple[float, int]] = field(default_factory=list)
    _decoder: BodyDecoder | None = None
    # whether its record was handed to the writer: once, whichever path gets there first (the
    # write may run in a thread while a cancelled exchange's clean-up asks again)
    emitted: bool = False

    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self.t0) * 1000.0

    def on_response_headers(self, status: int, headers: list[tuple[str, str]]) -> None:
        self.response_headers_ms = self.elapsed_ms()
        self.status = status
        self.response_headers = headers
        self._decoder = BodyDecoder(header_value(headers, "content-encoding"))

    def on_chunk(self, raw: bytes) -> None:
        """A body chunk as it arrived from the upstream (still content-encoded)."""
        if not raw:
            return
        now = self.elapsed_ms()
        if self.first_byte_ms is None:
            self.first_byte_ms = now
        data = self._decoder.decode(raw) if self._decoder else raw
        if data:
            self._body += data
            self._chunks.append((now, len(data)))

    def finish(self, outcome: str, error: str | None = None) -> None:
        """Mark the end; the first call wins (a later cancellation does not rewrite it)."""
        if self.outcome is not None:
            return
        self.end_ms = self.elapsed_ms()
        if self._decoder is not None:
            tail = self._decoder.flush()
            if tail:
                self._body += tail
                self._chunks.append((self.end_ms, len(tail)))
            if self._decoder.error and error is None:
                error = self._decoder.error
        # Error text comes from libraries and upstreams; mask anything key-shaped in it.
        self.outcome, self.error = outcome, redact_text(error) if error else None

    def saw_stream_end(self) -> bool:
        """Whether the body so far ends with an SSE stream's closing event (`data: [DONE]` of
        OpenAI-compatible APIs, Anthropic's `message_stop`). SDKs stop reading there and close
        the response before the HTTP body formally ends; that is a complete exchange, not a
        client that went away."""
        tail = bytes(self._body[-512:]).rstrip()
        last = tail.replace(b"\r\n", b"\n").rsplit(b"\n\n", 1)[-1]
        return (
            last.endswith((b"data: [DONE]", b"data:[DONE]"))
            or b"event: message_stop" in last
            or b'"type":"message_stop"' in last
        )

    @property
    def body_bytes(self) -> int:
        return len(self._body)

    def _recorded_request_body(self) -> bytes:
        """The request body decoded as its Content-Encoding says, as response bodies are: a
        compressed body kept as sent was unreadable to ingest, and a key inside it unmaskable.
        One that does not decode is kept as sent."""
        coding = header_value(self.request_headers, "content-encoding")
        if not coding or not self.request_body:
            return self.request_body
        decoder = BodyDecoder(coding)
        decoded = decoder.decode(self.request_body) + decoder.flush()
        return self.request_body if decoder.error else decoded

    def record(self) -> dict[str, Any]:
        got_response = self.status is not None
        return make_record(
            record_id=self.record_id,
            started_at=self.started_at,
            method=self.method,
            url=self.url,
            request_headers=self.request_headers,
            request_body=self._recorded_request_body(),
            status=self.status,
            response_headers=self.response_headers,
            response_body=bytes(self._body) if got_response else None,
            chunks=list(self._chunks) if got_response else None,
            response_headers_ms=self.response_headers_ms,
            first_byte_ms=self.first_byte_ms,
            end_ms=self.end_ms,
            outcome=self.outcome,
            error=self.error,
            session_id=self.hints.session_id,
            agent=self.hints.agent,
            tags=list(self.hints.tags),
        )
