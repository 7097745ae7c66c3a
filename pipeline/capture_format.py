"""The capture record (schemas/capture.schema.json): building one, and reading one into an
`Exchange`. Every capture tool and the demo generator write through `make_record`, so redaction
happens in one place on the way in, and `parse_record` redacts again on the way out (a user may
hand us a capture written by something else)."""

from __future__ import annotations

import base64
import re
from datetime import UTC, datetime
from math import inf
from typing import Any

import orjson

from pipeline.body_secrets import mask_secrets
from pipeline.records import HTTP_STATUSES, Exchange
from pipeline.redact import (
    account_of,
    cut_text,
    mask_values,
    redact_headers,
    redact_url,
    secret_values,
)
from pipeline.stream_secrets import (
    looks_like_event_stream,
    looks_streamed,
    mask_event_stream,
    mask_split_keys,
)

SCHEMA_VERSION = 1


def _body_field(body: bytes) -> tuple[str, str]:
    """A body as text, or as base64 when it is not UTF-8 (a stream cut inside a character, a
    Latin-1 byte): masked first, as the writer masks the text of a line, which cannot see a key
    inside base64."""
    try:
        return body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(mask_secrets(body)).decode("ascii"), "base64"


def iso_utc(ts: datetime) -> str:
    return ts.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def make_record(
    *,
    started_at: datetime,
    method: str,
    url: str,
    request_headers: list[tuple[str, str]],
    request_body: bytes,
    status: int | None,
    response_headers: list[tuple[str, str]] | None,
    response_body: bytes | None,
    chunks: list[tuple[float, int]] | None = None,
    response_headers_ms: float | None = None,
    first_byte_ms: float | None = None,
    end_ms: float | None = None,
    outcome: str | None = None,
    error: str | None = None,
    record_id: str | None = None,
    session_id: str | None = None,
    agent: str | None = None,
    tags: list[str] | None = None,
) -> dict[str, Any]:
    """A capture record with secrets removed and the key replaced by its fingerprint."""
    req_text, req_enc = _body_field(request_body)
    record: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "id": record_id,
        "started_at": iso_utc(started_at),
        "account": account_of(request_headers, url),
        "request": {
            "method": method,
            "url": redact_url(url),
            "headers": [list(h) for h in redact_headers(request_headers)],
            "body": req_text,
            "body_encoding": req_enc,
        },
        "response": None,
        "timing": {
            "response_headers_ms": response_headers_ms,
            "first_byte_ms": first_byte_ms,
            "end_ms": end_ms,
        },
        "outcome": outcome,
        "error": error,
        "hints": {"session_id": session_id, "agent": agent, "tags": tags or []},
    }
    if status is not None or response_body is not None:
        body = response_body or b""
        if looks_streamed(body):
            # a key the model echoed back is cut across events: no one line shows its shape
            body = mask_split_keys(body)
        elif looks_like_event_stream(body):
            body = mask_event_stream(body)
        resp_text, resp_enc = _body_field(body)
        record["response"] = {
            "status": status,
            "headers": [list(h) for h in redact_headers(response_headers or [])],
            "body": resp_text,
            "body_encoding": resp_enc,
            "chunks": [[round(t, 3), n] for t, n in chunks] if chunks is not None else None,
        }
    return record


def dumps_record(record: dict[str, Any]) -> bytes:
    """One JSONL line, newline included."""
    return orjson.dumps(record) + b"\n"


class RecordError(ValueError):
    """A capture line that is not a valid record; the message is the reject reason."""


def _headers(value: Any) -> list[tuple[str, str]]:
    if value is None:
        return []
    if isinstance(value, dict):
        return [(str(k), str(v)) for k, v in value.items()]
    if isinstance(value, list):
        out = []
        for item in value:
            if not (isinstance(item, list | tuple) and len(item) == 2):
                raise RecordError("headers must be [name, value] pairs or an object")
            out.append((str(item[0]), str(item[1])))
        return out
    raise RecordError("headers must be a list or an object")


def _body(part: dict[str, Any]) -> bytes:
    body = part.get("body")
    if body is None:
        return b""
    if not isinstance(body, str):
        raise RecordError("body must be a string")
    if part.get("body_encoding") == "base64":
        try:
            return base64.b64decode(body, validate=True)
        except ValueError as exc:
            raise RecordError("body_encoding is base64 but the body is not valid base64") from exc
    return body.encode("utf-8", "surrogatepass")


def parse_timestamp(value: Any, name: str = "started_at") -> datetime:
    """An RFC 3339 timestamp with its offset (`Z`, `z` or `+08:00`) as UTC. `name` is the
    field as the input calls it (`startedDateTime` in a HAR), for the reject reason.

    A time without an offset is refused, not guessed: local time taken as UTC would shift the
    request, and the time-of-day prices with it (the price tables refuse it too)."""
    if not isinstance(value, str):
        raise RecordError(f"{name} must be an RFC 3339 string")
    text = value[:-1] + "+00:00" if value[-1:] in ("Z", "z") else value
    try:
        ts = datetime.fromisoformat(text)
    except ValueError as exc:
        leap = _leap_second(text)
        if leap is None:
            raise RecordError(f"{name} is not a timestamp: {cut_text(value, 40)!r}") from exc
        ts = leap
    if ts.tzinfo is None:
        raise RecordError(
            f"{name} has no time zone: {cut_text(value, 40)!r}"
            " (write it with its offset, e.g. Z for UTC)"
        )
    try:
        return ts.astimezone(UTC)
    except OverflowError:  # year 1 with a positive offset, year 9999 with a negative one
        raise RecordError(f"{name} is out of range: {cut_text(value, 40)!r}") from None


# `23:59:60`, its fraction and what follows (the offset); RFC 3339 allows second 60 there.
_LEAP_SECOND = re.compile(r"(.+[Tt ]\d\d:\d\d:)60(?:[.,]\d*)?(.*)")


def _leap_second(text: str) -> datetime | None:
    """A leap second (`2016-12-31T23:59:60Z`, or its local time with an offset) as the last
    microsecond before it, 23:59:59.999999 UTC: the request stays on its UTC day and after every
    request of the second before (Python's datetime has no second 60). None when `text` is no
    such time: a second 60 anywhere but the last minute of a UTC day is not one."""
    match = _LEAP_SECOND.fullmatch(text)
    if match is None:
        return None
    try:
        ts = datetime.fromisoformat(f"{match.group(1)}59{match.group(2)}")
    except ValueError:
        return None
    if ts.tzinfo is None:
        return ts  # refused below for its missing zone, the reason that applies
    try:
        utc = ts.astimezone(UTC)
    except OverflowError:
        return None
    return utc.replace(microsecond=999_999) if (utc.hour, utc.minute) == (23, 59) else None


# No exchange lasts a day: a proxy, an SDK and a provider all time out long before. A longer
# offset (`end_ms: 1e300`) is a broken clock or a broken writer, and unknown.
MAX_OFFSET_MS = 86_400_000.0


def _num(value: Any) -> float | None:
    """A timing offset in ms, or None when not measured or not possible (negative, not finite,
    past a day): unknown, as a HAR reader makes a negative `time`."""
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if numeric and 0 <= value <= MAX_OFFSET_MS else None


_INT = {int}
_NUMBER = {int, float}


def _chunks(value: Any) -> list[tuple[float | None, int]] | None:
    """`response.chunks` as (arrival ms or None, length). A chunk whose time is not a number
    (null, a string, negative) keeps its length with an unknown time: its bytes arrived, when is
    not known. A list that is not [time, length] pairs with whole non-negative lengths cannot
    say which bytes came when: no chunk timing (None), like a capture without chunks."""
    if not isinstance(value, list):
        return None
    try:  # the usual case, checked column-wise: every time a number >= 0, every length an int
        times, lengths = zip(*value, strict=True)
        if (
            set(map(type, lengths)) == _INT
            and set(map(type, times)) <= _NUMBER
            and min(lengths) >= 0
            and min(times) >= 0
            and max(times) < inf
        ):
            return list(zip(map(float, times), lengths, strict=True))
    except (TypeError, ValueError):
        pass
    out: list[tuple[float | None, int]] = []
    for item in value:
        if not isinstance(item, list) or len(item) != 2:
            return None
        at, length = item
        if isinstance(length, float) and length.is_integer():
            length = int(length)
        if not isinstance(length, int) or isinstance(length, bool) or length < 0:
            return None
        out.append((_num(at), length))
    return out


def _masked_error(error: Any, secrets: list[bytes]) -> Any:
    if not isinstance(error, str) or not secrets:
        return error
    return mask_values(error.encode("utf-8", "surrogatepass"), secrets).decode(
        "utf-8", "surrogatepass"
    )


# Outcomes a capture tool writes (schemas/capture.schema.json).
OUTCOMES = frozenset(
    {"complete", "interrupted", "client_disconnected", "upstream_timeout", "upstream_unreachable"}
)


def _outcome(value: Any) -> str | None:
    """The capture's outcome (None for a complete exchange, or none written); another value is
    no outcome this format has, and the record is refused rather than read as an error type."""
    if value is None or value == "complete":
        return None
    if value in OUTCOMES:
        return str(value)
    raise RecordError(
        f"outcome {cut_text(repr(value), 30)} is not one of {', '.join(sorted(OUTCOMES))}"
    )


def _object_or_empty(obj: dict[str, Any], name: str) -> dict[str, Any]:
    value = obj.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RecordError(f"{name} must be an object or null, not {type(value).__name__}")
    return value


def _status(value: Any) -> int | None:
    """response.status: an HTTP status, or null for an exchange that got no response. Anything
    else ("200" as a string, 200.0, true, 0) is no status: the record is refused, not read as an
    error without usage."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value in HTTP_STATUSES:
        return value
    raise RecordError(f"response.status {cut_text(repr(value), 20)} is not an HTTP status")


def parse_record(obj: Any, source: str, index: int) -> Exchange:
    if not isinstance(obj, dict):
        raise RecordError("record is not a JSON object")
    version = obj.get("schema_version")
    if version != SCHEMA_VERSION:
        raise RecordError(f"unsupported schema_version {version!r} (this reader knows 1)")
    request = obj.get("request")
    if not isinstance(request, dict) or "url" not in request:
        raise RecordError("record has no request.url")
    response = obj.get("response")
    if response is not None and not isinstance(response, dict):
        raise RecordError("response must be an object or null")
    response = response or {}
    timing = _object_or_empty(obj, "timing")
    hints = _object_or_empty(obj, "hints")
    raw_headers = _headers(request.get("headers"))
    url = str(request["url"])
    secrets = secret_values(raw_headers, url)  # a 401 answer may quote the key it was sent
    chunks = response.get("chunks")
    status = response.get("status")
    tags = hints.get("tags") or []
    return Exchange(
        source=source,
        index=index,
        started_at=parse_timestamp(obj.get("started_at")),
        method=str(request.get("method", "POST")),
        url=redact_url(url),
        request_headers=redact_headers(raw_headers),
        request_body=_body(request),
        status=_status(status),
        response_headers=redact_headers(_headers(response.get("headers"))),
        response_body=mask_values(_body(response), secrets),
        record_id=obj.get("id") if isinstance(obj.get("id"), str) else None,
        account=obj.get("account") or account_of(raw_headers, url),
        session_id=hints.get("session_id"),
        agent=hints.get("agent"),
        tags=[str(t) for t in tags] if isinstance(tags, list) else [],
        response_headers_ms=_num(timing.get("response_headers_ms")),
        first_byte_ms=_num(timing.get("first_byte_ms")),
        end_ms=_num(timing.get("end_ms")),
        chunks=_chunks(chunks),
        capture_outcome=_outcome(obj.get("outcome")),
        capture_error=_masked_error(obj.get("error"), secrets),
    )


def parse_line(line: bytes, source: str, lineno: int) -> Exchange:
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        if not line.endswith(b"\n") and line.strip():
            raise RecordError(f"truncated last line (no newline, invalid JSON: {exc})") from exc
        raise RecordError(f"invalid JSON: {exc}") from exc
    try:
        return parse_record(obj, source, lineno)
    except (TypeError, ValueError, OverflowError) as exc:
        if isinstance(exc, RecordError):
            raise
        raise RecordError(f"malformed record: {exc}") from exc
