"""Exchange -> one `requests` row + its ordered prompt segments. The only place that knows the
table contract (schemas/requests.json); dialects only read their own wire format."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate
from math import inf
from operator import itemgetter, le
from typing import Any, cast
from urllib.parse import SplitResult, urlsplit

import orjson
from xxhash import xxh3_64_intdigest, xxh3_128_digest

from pipeline import providers
from pipeline.dialects import DIALECTS
from pipeline.dialects.common import header
from pipeline.dialects.fields import consistent, within_range
from pipeline.records import (
    EARLIEST_START,
    HTTP_STATUSES,
    STARTS_END,
    Exchange,
    RequestInfo,
    ResponseInfo,
    Segment,
    Usage,
)
from pipeline.redact import account_label, redact_text, without_keys
from pipeline.streams import is_stream_body

_EMPTY_PREFIX = b"\x00" * 16
_UTF8_BOM = b"\xef\xbb\xbf"
_BINARY_APIS = frozenset({"converse", "invoke_model"})
# What a capture tool says when it saw the exchange cut before it completed.
_CUT = frozenset({"interrupted", "client_disconnected"})
SegmentColumns = tuple[list[str], list[str | None], list[bytes]]  # kinds, roles, exact bytes
# Chunk times are written rounded to the microsecond, first byte and end are not: a chunk time
# may read up to half a microsecond before the first byte or after the end.
_ROUNDING_MS = 0.001


@dataclass(slots=True)
class Normalised:
    """One `requests` row and its prompt segments, as columns (position = list index): agent
    traffic has tens of segments per request, and one object per segment cost more than the
    hashing itself. Hashes stay raw 16-byte digests here; ingest hex-encodes them in bulk."""

    row: dict[str, Any]
    kinds: list[str]
    roles: list[str | None]
    digests: list[bytes]  # xxh3-128 of each segment (segment_hash, raw)
    prefix_digests: list[bytes]  # chained prefix hashes (prefix_hash, raw)
    data: list[bytes]  # exact segment bytes (their lengths are the `bytes` column)

    @property
    def hashes(self) -> list[str]:
        return [d.hex() for d in self.digests]

    @property
    def prefixes(self) -> list[str]:
        return [d.hex() for d in self.prefix_digests]

    @property
    def segments(self) -> list[Segment]:
        rid = self.row["request_id"]
        return [
            Segment(rid, i, kind, role, h, p, len(d))
            for i, (kind, role, h, p, d) in enumerate(
                zip(self.kinds, self.roles, self.hashes, self.prefixes, self.data, strict=True)
            )
        ]

    @property
    def contents(self) -> list[tuple[str, bytes]]:
        """(segment_hash, bytes) for the content store."""
        return list(zip(self.hashes, self.data, strict=True))


class Skip(Exception):
    """The exchange is not an LLM API call (a page, an image, GET /models)."""


class RejectRecord(Exception):
    """The exchange claims to be an LLM call but cannot be read; the message is the reason."""


# Bumped whenever the rule in `hash_chain` changes: a warehouse's sources hashed by another
# rule are re-read on their next ingest (`ingest_claims.claim`), as prefixes hashed by two
# rules never match. 2: the segment's place (kind and role) seeds its hash.
SEGMENT_HASHING = 2


@lru_cache(maxsize=256)
def identity_seed(kind: str, role: str | None) -> int:
    """The xxh3 seed of a segment's place in the rendered prompt: a system instruction, a tool
    definition, an output schema, a message of some role. The provider renders each under its
    own heading, so the same bytes in another place are another prompt (Gemini's
    `systemInstruction` is `{"role": "user", ...}` byte for byte like a user message; OpenAI's
    `instructions` and a string `input` are both the bare JSON string)."""
    return xxh3_64_intdigest(f"{kind}\x00{role or ''}".encode())


def hash_chain(
    kinds: list[str], roles: list[str | None], data: list[bytes]
) -> tuple[list[bytes], list[bytes]]:
    """(segment digests, chained prefix digests): xxh3-128 of each segment's bytes, seeded with
    its place (`identity_seed` of its kind and role), and prefix[i] = xxh3-128(prefix[i-1] +
    segment[i]) from 16 zero bytes. Hex is the stored form."""
    digests = list(map(xxh3_128_digest, data, map(identity_seed, kinds, roles)))
    prefixes = []
    prefix = _EMPTY_PREFIX
    for digest in digests:
        prefix = xxh3_128_digest(prefix + digest)
        prefixes.append(prefix)
    return digests, prefixes


@lru_cache(maxsize=4096)
def _route(host: str, path: str, rules: tuple[providers.UserRule, ...]) -> providers.Route | None:
    """`providers.route`, remembered: a capture calls a handful of endpoints thousands of times,
    and matching the host against every pattern cost 2% of ingest. Routes and rules are frozen."""
    return providers.route(host, path, list(rules) or None)


def _first_and_end(exchange: Exchange) -> tuple[float | None, float | None]:
    """The (first byte, end) offsets of the exchange. A first byte after the end cannot be: one
    of the two is wrong and nothing says which, so both are unknown."""
    first, end = exchange.first_byte_ms, exchange.end_ms
    if first is not None and end is not None and first > end + _ROUNDING_MS:
        return None, None
    return first, end


def _chunk_times(
    exchange: Exchange, first: float | None, end: float | None
) -> list[float | None] | None:
    """The arrival of each body chunk, None where unknown or impossible: a time before the first
    byte or after the end, or out of order (before an earlier chunk's or after a later one's:
    which of the two is wrong is unknown, so both are). None (no chunk timing) when there are
    no chunks or their lengths do not add up to the body: they do not say which bytes came when.
    """
    chunks = exchange.chunks
    if not chunks or sum(map(itemgetter(1), chunks)) != len(exchange.response_body):
        return None
    times = list(map(itemgetter(0), chunks))
    low = 0.0 if first is None else first - _ROUNDING_MS
    high = inf if end is None else end + _ROUNDING_MS
    if None not in times:  # the usual case: every time known, in order, within the exchange
        ordered = cast("list[float]", times)
        if low <= ordered[0] and ordered[-1] <= high and all(map(le, ordered, ordered[1:])):
            return _within(times, first, end, ordered[0], ordered[-1])
    known = [t if t is not None and low <= t <= high else None for t in times]
    out = known[:]
    latest = -inf
    for i, t in enumerate(known):
        if t is not None:
            if t < latest:
                out[i] = None
            latest = max(latest, t)
    earliest = inf
    for i in range(len(known) - 1, -1, -1):
        t = known[i]
        if t is not None:
            if t > earliest:
                out[i] = None
            earliest = min(earliest, t)
    known_times = [t for t in out if t is not None]
    if not known_times:
        return out
    return _within(out, first, end, min(known_times), max(known_times))


def _within(
    times: list[float | None], first: float | None, end: float | None, lowest: float, highest: float
) -> list[float | None]:
    """The chunk times, those read within rounding before the first byte or after the end put at
    it: a row's timings stay in order (a first token 1e-151 ms after an end of 0 read as after it).
    `lowest` and `highest`: the earliest and latest known time, so the usual case costs nothing."""
    floor = -inf if first is None else first
    ceiling = inf if end is None else end
    if floor <= lowest and highest <= ceiling:
        return times
    return [None if t is None else min(max(t, floor), ceiling) for t in times]


def _arrival_ms(
    exchange: Exchange,
    offsets: tuple[int | None, ...],
    stream: bool | None,
    times: list[float | None] | None,
    end: float | None,
) -> tuple[float | None, ...]:
    """When the body bytes at `offsets` had arrived, from the chunk times (`_chunk_times`)."""
    if times is not None:
        chunks = exchange.chunks or ()
        ends: list[int] | None = None
        out: list[float | None] = []
        for offset in offsets:
            if offset is None:
                out.append(None)
                continue
            if ends is None:
                ends = list(accumulate(map(itemgetter(1), chunks)))
            i = bisect_left(ends, offset)
            out.append(times[i] if i < len(times) else None)
        return tuple(out)
    # Without chunk timings a non-streamed body is usable when it has fully arrived; a stream's
    # per-event times are lost (HAR), so they stay unknown.
    known = None if stream else end
    return tuple(None if offset is None else known for offset in offsets)


def _request_json(exchange: Exchange) -> dict[str, Any]:
    return _json_object(exchange.request_body) if exchange.request_body else {}


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)  # also rejects invalid UTF-8
    except orjson.JSONDecodeError as exc:
        # A UTF-8 byte order mark: JSON forbids sending one but lets a reader ignore it, and
        # servers that parse as Python's json does accept it. Looked for only after a failure.
        if raw.startswith(_UTF8_BOM):
            return _json_object(raw[len(_UTF8_BOM) :])
        # Decoding again only on failure, to say which of the two it was.
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as bad:
            raise RejectRecord(f"request body is not valid UTF-8 (byte {bad.start})") from bad
        raise RejectRecord(f"request body is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise RejectRecord("request body is not a JSON object")
    return body


def normalise(
    exchange: Exchange,
    request_id: str,
    rules: list[providers.UserRule] | None = None,
) -> Normalised:
    """One row + segments for an exchange; raises Skip or RejectRecord, never anything else."""
    try:
        return _normalise(exchange, request_id, rules)
    except (Skip, RejectRecord):
        raise
    except Exception as exc:  # a dialect bug must cost one record, not the whole batch
        raise RejectRecord(f"could not normalise: {exc!r}"[:300]) from exc


def _normalise(
    exchange: Exchange, request_id: str, rules: list[providers.UserRule] | None
) -> Normalised:
    _check_start(exchange)
    if exchange.span is not None:
        from pipeline.otel import normalise_span  # spans carry usage, not HTTP bodies

        return normalise_span(exchange, request_id)
    parts = urlsplit(exchange.url)
    host = parts.netloc.rpartition("@")[2]  # never user:password@ (sources redact it too)
    if exchange.method.upper() != "POST":
        raise Skip
    route = _route(host, parts.path, tuple(rules) if rules else ())
    if route is None or route.api not in DIALECTS:
        raise Skip
    if exchange.defect is not None:
        raise RejectRecord(exchange.defect)
    dialect = DIALECTS[route.api]
    provider = route.provider
    if route.by_host:
        # The bundled simulator names the provider whose cache rules it ran: label its traffic
        # so (the host column still says where it went), and read its usage as that provider's.
        simulated = providers.simulator_provider(
            header(exchange.response_headers, providers.SIMULATOR_HEADER)
        )
        provider = simulated or provider
    body = _request_json(exchange)
    columns: SegmentColumns | None = None
    request: RequestInfo
    try:
        # A dialect may hand its segments over as columns (no object per segment).
        request_columns = getattr(dialect, "request_columns", None)
        if request_columns is not None:
            request, kinds, roles, data = request_columns(body, exchange.url)
            columns = (kinds, roles, data)
        else:
            request = dialect.parse_request(body, exchange.url)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise RejectRecord(f"{route.api} request not understood: {exc!r}") from exc
    content_type = (header(exchange.response_headers, "content-type") or "").lower()
    stream = bool(request.stream) or "event-stream" in content_type or "eventstream" in content_type
    if exchange.status is None:
        # No response arrived. A capture tool that could not reach the upstream (or timed out)
        # says why: http_error of that type. A source that saw the request cut before any
        # response (a HAR entry without one: aborted, blocked), or a client that gave up before
        # the headers, says interrupted: no provider error happened.
        interrupted = exchange.capture_outcome in _CUT
        response = ResponseInfo(
            outcome="interrupted" if interrupted else "http_error",
            usage=None,
            error_type=None if interrupted else exchange.capture_outcome,
            error_message=exchange.capture_error,
        )
    else:
        response = _response(exchange, dialect, route.api, provider, stream, content_type)
        # The column says what arrived: a body shaped like a stream was streamed, whatever the
        # request flag and content-type said (the dialect read it as one).
        stream = stream or is_stream_body(exchange.response_body, False)
    return build(
        exchange, request_id, provider, route.api, request, response, stream, parts=parts,
        segments=columns,
    )  # fmt: skip


def _response(
    exchange: Exchange, dialect: Any, api: str, provider: str, stream: bool, content_type: str
) -> ResponseInfo:
    """The response as the dialect reads it. A body the capture saw cut (the upstream died
    mid-body, the client left) may end anywhere, even inside a JSON value or a UTF-8 sequence:
    it is an interrupted exchange with unknown usage, not an unreadable record."""
    cut = exchange.capture_outcome in _CUT
    cut_in_character = False
    body = exchange.response_body
    # Bedrock streams are binary AWS event streams even when the capture lost the header.
    binary_ok = api in _BINARY_APIS or "eventstream" in content_type
    try:
        if not binary_ok and not body.isascii():  # ASCII is valid UTF-8
            try:
                body.decode("utf-8")
            except UnicodeDecodeError as bad:
                if bad.end != len(body) or bad.reason != "unexpected end of data":
                    raise RejectRecord("response body is not valid UTF-8") from None
                # The body ends inside a character, so it was cut there: the bytes before the
                # cut are read as a body cut anywhere else (a stream is interrupted, a JSON
                # body not understood).
                body, cut_in_character = body[: bad.start], True
        try:
            response: ResponseInfo = dialect.parse_response(
                exchange.status,
                body,
                provider,
                stream,
                exchange.response_headers,
            )
        except (orjson.JSONDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise RejectRecord(f"{api} response not understood: {exc}") from exc
    except RejectRecord:
        if not cut:
            raise
        return ResponseInfo(outcome="interrupted", usage=None, error_message=exchange.capture_error)
    if (cut or cut_in_character) and response.outcome in ("ok", "interrupted"):
        # The capture saw the connection cut (or the body ends inside a character); a body that
        # looks complete may still lack its usage chunk, but a usage already received stays
        # reported. What the capture saw is the reason, unless the body said one.
        response.outcome = "interrupted"
        response.error_message = response.error_message or exchange.capture_error
    return response


def _check_start(exchange: Exchange) -> None:
    """Refuse a start outside the years a request can have (records.EARLIEST_START): such a
    row would sit in a week of its own, and a date at the end of the calendar (9999-12-31) made
    every later report, summary and findings of a period fail."""
    started = exchange.started_at
    if started is not None and not EARLIEST_START <= started < STARTS_END:
        raise RejectRecord(
            f"start time {started.isoformat()} is not a time a request was sent"
            f" (before {EARLIEST_START:%Y} or after {STARTS_END.year - 1}: a placeholder,"
            " a broken clock or a unit mistake)"
        )


def _check_types(exchange: Exchange) -> None:
    """Refuse a record whose fields the sources passed on without checking their type (a
    capture's hints, a span's status) and that no column could hold: one reject, never a
    failed write of the whole batch."""
    for name in ("session_id", "agent", "account"):
        value = getattr(exchange, name)
        if value is not None and not isinstance(value, str):
            raise RejectRecord(f"{name} must be a string, not {type(value).__name__}")
    status = exchange.status
    if status is not None and status not in HTTP_STATUSES:
        raise RejectRecord(f"status {str(status)[:20]} is not an HTTP status code")


def _simulated(exchange: Exchange) -> bool | None:
    """Whether the bundled simulator answered (it names itself in a response header), so its
    usage and cost are no provider's bill. Unknown (None) without response headers to read: an
    OTel span, or an exchange that got no response."""
    if exchange.span is not None or not exchange.response_headers:
        return None
    value = header(exchange.response_headers, providers.SIMULATOR_HEADER)
    return providers.simulator_provider(value) is not None


def build(
    exchange: Exchange,
    request_id: str,
    provider: str,
    api: str,
    request: RequestInfo,
    response: ResponseInfo,
    stream: bool | None,
    timing: tuple[float | None, float | None] | None = None,
    *,
    parts: SplitResult | None = None,
    segments: SegmentColumns | None = None,
) -> Normalised:
    """The `requests` row (schemas/requests.json) from parsed request and response.

    `timing` overrides (first_reasoning_ms, ttft_ms) when the source measured them directly
    (OTel spans); otherwise they come from body offsets and the capture's chunk timings.
    `parts` is the exchange's URL already split; `segments` the request's segments as columns
    (kinds, roles, bytes) when the dialect gave them so, instead of `request.segments`.
    """
    if parts is None:
        parts = urlsplit(exchange.url)
    host = parts.netloc.rpartition("@")[2]  # never user:password@ (sources redact it too)
    if segments is None:
        raw = request.segments
        kinds = [s.kind for s in raw]
        roles = [s.role for s in raw]
        data = [s.data for s in raw]
    else:
        kinds, roles, data = segments
    digests, prefixes = hash_chain(kinds, roles, data)
    usage = consistent(within_range(response.usage)) if response.usage is not None else Usage()
    passes = usage.pass_prompt_tokens
    first_byte, end = _first_and_end(exchange)
    if timing is None:
        times = _chunk_times(exchange, first_byte, end)
        if first_byte is None and times is not None:
            # No measured first byte: the first chunk's arrival is when it came.
            first_byte = next(
                (t for t, (_, n) in zip(times, exchange.chunks or (), strict=True) if n), None
            )
        first_reasoning, first_text = _arrival_ms(
            exchange, (response.first_reasoning_at, response.first_text_at), stream, times, end
        )
        timing = (first_reasoning, first_text)
    _check_types(exchange)
    row = {
        "request_id": request_id,
        "started_at": exchange.started_at,
        "provider": provider,
        "api": api,
        "host": host,
        "path": without_keys(parts.path),
        "model": response.model or request.model,
        "requested_model": request.model,
        "account": account_label(exchange.account),
        "session_id": without_keys(exchange.session_id),
        "agent": without_keys(exchange.agent),
        "tags": [t for t in map(without_keys, exchange.tags or ()) if t is not None] or None,
        "stream": stream,
        "status_code": exchange.status,
        "outcome": response.outcome,
        "usage_status": "reported" if response.usage is not None else "missing",
        "input_tokens": usage.input_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
        "cache_write_1h_tokens": usage.cache_write_1h_tokens,
        "uncached_input_tokens": usage.uncached_input_tokens,
        "output_tokens": usage.output_tokens,
        "reasoning_tokens": usage.reasoning_tokens,
        "reported_cost": usage.reported_cost,
        "tool_prompt_tokens": usage.tool_prompt_tokens,
        "audio_input_tokens": usage.audio_input_tokens,
        "audio_cache_read_tokens": usage.audio_cache_read_tokens,
        "audio_output_tokens": usage.audio_output_tokens,
        "web_search_requests": usage.web_search_requests,
        "largest_pass_prompt_tokens": max(passes) if passes else None,
        "smallest_pass_prompt_tokens": min(passes) if passes else None,
        "ttfb_ms": first_byte,
        "first_reasoning_ms": timing[0],
        "ttft_ms": timing[1],
        "duration_ms": end,
        "finish_reason": response.finish_reason,
        # an error type is free text where a span's `error.type` or a gateway's error body says
        # it: "401 Incorrect API key provided: sk-proj-..." must not be stored as it came
        "error_type": None if response.error_type is None else redact_text(response.error_type),
        "error_message": redact_text(response.error_message)[:300]
        if response.error_message
        else None,
        "usage_semantics": usage.semantics or None,
        "raw_usage": orjson.dumps(usage.raw).decode() if usage.raw is not None else None,
        "segment_count": len(data),
        "prompt_bytes": sum(map(len, data)),
        "last_prefix_hash": prefixes[-1].hex() if prefixes else None,
        "cache_breakpoints": request.cache_breakpoints or None,
        "cache_ttls": request.cache_ttls or None,
        "request_bytes": len(exchange.request_body),
        "response_bytes": len(exchange.response_body),
        "source": exchange.source,
        "source_index": exchange.index,
        "simulated": _simulated(exchange),
    }
    return Normalised(row, kinds, roles, digests, prefixes, data)
