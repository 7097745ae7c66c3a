"""Reader for OTLP/JSON trace exports as the OpenTelemetry Collector's file exporter writes them:
one JSON document `{"resourceSpans": [...]}` per line (optionally gzip/zstd compressed).

Every span becomes an `Exchange` with `span` set (attributes flattened to Python values);
`pipeline.otel.normalise_span` turns GenAI spans into rows and skips the others (HTTP, DB
spans of the same trace). `index` is line number (1-based) x 1,000,000 + the span's 0-based
position within its line (`span_index`), so a large file is split at line boundaries and read by
every core like a capture JSONL; a line that is not valid JSON is one reject at its line's first
index. Lines are read one at a time, so memory stays bounded whatever the file size.

OTLP/JSON details handled: int64 values (`intValue`, `*UnixNano`) may be strings or numbers;
span status code may be the enum number (2 = ERROR) or its name; `scopeSpans` was called
`instrumentationLibrarySpans` in older exporters; trace and span ids are hex strings.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from pipeline.records import EARLIEST_START, Exchange, Reject
from pipeline.redact import cut
from pipeline.sources import damage_of, open_binary
from pipeline.sources.capture import NO_LIMIT, long_line_reject, redact_excerpt, without_bom

# Spans of one line are numbered within it (see `span_index`); an export batch holds thousands
# of spans at most, far below this. A line with more spans keeps the first STRIDE - 1 and gives
# one reject, at the line's last index, for the rest.
SPAN_INDEX_STRIDE = 1_000_000
_STATUS_NAMES = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}


def any_value(value: Any) -> Any:
    """An OTLP AnyValue as a plain Python value."""
    if not isinstance(value, dict):
        return None
    if "stringValue" in value:
        return value["stringValue"]
    if "intValue" in value:
        try:
            return int(value["intValue"])
        except (TypeError, ValueError):
            return None
    if "doubleValue" in value:
        v = value["doubleValue"]
        return float(v) if isinstance(v, int | float | str) else None
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "arrayValue" in value:
        return [any_value(v) for v in (value["arrayValue"] or {}).get("values") or ()]
    if "kvlistValue" in value:
        return attributes((value["kvlistValue"] or {}).get("values"))
    if "bytesValue" in value:
        try:
            return base64.b64decode(value["bytesValue"])
        except (TypeError, ValueError):
            return None
    return None


def attributes(items: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items if isinstance(items, list) else ():
        if isinstance(item, dict) and isinstance(item.get("key"), str):
            out[item["key"]] = any_value(item.get("value"))
    return out


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_FIXED64 = 2**64  # OTLP times are unsigned 64-bit nanoseconds since 1970
# No GenAI span started before records.EARLIEST_START (2000): an earlier start is a unit mistake
# (seconds, milliseconds or microseconds written as nanoseconds all land in January 1970) or a
# placeholder. Said here in the span's own terms; normalise refuses it for every format.
_EARLIEST_START = int(EARLIEST_START.timestamp()) * 10**9


def _nanos(value: Any) -> int | None:
    """An OTLP time (fixed64 nanoseconds, a JSON number or a decimal string), or None when it is
    absent or not one: a bool, a negative, a fraction, anything past 2^64."""
    if isinstance(value, str) and value.isascii() and value.isdigit():
        nanos = int(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        nanos = value
    elif isinstance(value, float) and value.is_integer():
        nanos = int(value)
    else:
        return None
    return nanos if 0 <= nanos < _FIXED64 else None


def _status(span: dict[str, Any]) -> tuple[int, str | None]:
    status = span.get("status") or {}
    code = status.get("code", 0)
    if isinstance(code, str):
        code = _STATUS_NAMES.get(code, 0)
    message = status.get("message")
    return (code if isinstance(code, int) else 0), (message if isinstance(message, str) else None)


def span_to_exchange(
    span: dict[str, Any], resource: dict[str, Any], source: str, index: int
) -> Exchange:
    attrs = attributes(span.get("attributes"))
    raw_start = span.get("startTimeUnixNano")
    start = _nanos(raw_start)
    if raw_start is None:
        raise ValueError("span has no startTimeUnixNano")
    if start is None or start < _EARLIEST_START:
        # 0, before 2000 or not a time at all: a row in 1970 would reach every weekly report
        shown = cut(orjson.dumps(raw_start), 40).decode("utf-8", "replace")
        raise ValueError(
            f"span startTimeUnixNano {shown} is not a time (nanoseconds since 1970 as an"
            " unsigned 64-bit integer, after 2000)"
        )
    end = _nanos(span.get("endTimeUnixNano"))
    code, message = _status(span)
    host = attrs.get("server.address")
    if not isinstance(host, str) or not host:
        host = attrs.get("gen_ai.provider.name") or attrs.get("gen_ai.system") or "otel"
    port = attrs.get("server.port")
    netloc = f"{host}:{port}" if isinstance(port, int) else str(host)
    operation = attrs.get("gen_ai.operation.name") or span.get("name") or ""
    http_status = attrs.get("http.response.status_code")
    trace_id, span_id = span.get("traceId"), span.get("spanId")
    service = resource.get("service.name")
    session = attrs.get("session.id") or attrs.get("gen_ai.conversation.id")
    agent = attrs.get("gen_ai.agent.name")
    return Exchange(
        source=source,
        index=index,
        # Whole microseconds, truncated like the RFC 3339 times of capture JSONL and HAR (a
        # float division would round .9999995 s up into the next second, and the next price).
        started_at=_EPOCH + timedelta(microseconds=start // 1000),
        method="POST",
        url=f"otel://{netloc}/{operation}",
        request_headers=[],
        request_body=b"",
        status=http_status if isinstance(http_status, int) else None,
        response_headers=[],
        response_body=b"",
        record_id=f"otel:{trace_id}:{span_id}" if trace_id and span_id else None,
        session_id=str(session) if session else None,
        agent=str(agent) if agent else None,
        tags=[f"service:{service}"] if isinstance(service, str) else [],
        # An end before the start (clock skew, a bad exporter) is no duration: unknown.
        end_ms=(end - start) / 1e6 if end is not None and end >= start else None,
        span={
            "name": span.get("name"),
            "attributes": attrs,
            "status_code": code,
            "status_message": message,
        },
    )


_OTHER_SIGNALS = frozenset(
    {"resourceMetrics", "resource_metrics", "resourceLogs", "resource_logs", "resourceProfiles"}
)


def _spans(doc: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]] | str]:
    """(span, resource attributes) for each span of an export, or for a part of it that is not
    shaped as OTLP (a string where a list belongs, a span that is no object) why: that part is
    one reject, so every part of a line is counted (an empty list is an export of no spans)."""
    # protobuf's JSON mapping takes the proto field names too (resource_spans, scope_spans)
    resource_spans = doc.get("resourceSpans", doc.get("resource_spans"))
    if resource_spans is None:
        # `{}` is an export of no spans (empty lists are left out), and a Collector's file
        # exporter writes its metrics and logs to the same file: no spans, no records. Anything
        # else is no export at all, and counted as one.
        if doc and not _OTHER_SIGNALS.intersection(doc):
            yield "not an OTLP trace export: no resourceSpans"
        return
    if not isinstance(resource_spans, list):
        yield "resourceSpans is not a list"
        return
    for rs in resource_spans:
        if not isinstance(rs, dict):
            yield "a resourceSpans element is not an object"
            continue
        resource_obj = rs.get("resource") or {}
        resource = attributes(
            resource_obj.get("attributes") if isinstance(resource_obj, dict) else None
        )
        scopes = (
            rs.get("scopeSpans") or rs.get("scope_spans") or rs.get("instrumentationLibrarySpans")
        ) or ()
        if not isinstance(scopes, list):
            yield "scopeSpans is not a list"
            continue
        for scope in scopes:
            spans = scope.get("spans") if isinstance(scope, dict) else scope
            if not isinstance(spans, list):
                if spans is not None:
                    yield "a scopeSpans element is not an object with a list of spans"
                continue
            for span in spans:
                yield (span, resource) if isinstance(span, dict) else "a span is not an object"


def span_index(lineno: int, ordinal: int) -> int:
    """`source_index` of a span: its line number (1-based) and its position in that line
    (0-based), so a span's index depends on its own line only and a file can be split at line
    boundaries like a capture JSONL: index // SPAN_INDEX_STRIDE is the line."""
    return lineno * SPAN_INDEX_STRIDE + ordinal


def iter_otlp_lines(
    lines: Iterable[bytes], source: str, first_lineno: int, limit: int = NO_LIMIT
) -> Iterator[Exchange | Reject]:
    """Spans of consecutive OTLP lines, the first being line `first_lineno`; a line longer
    than `limit` is one reject."""
    for lineno, line in enumerate(lines, start=first_lineno):
        if type(line) is not bytes or len(line) > limit:
            long = long_line_reject(line, source, span_index(lineno, 0), limit)
            if long is not None:
                yield long
                continue
        line = without_bom(line, lineno)
        if not line.strip():
            continue
        try:
            doc = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            excerpt = redact_excerpt(line)
            yield Reject(source, span_index(lineno, 0), f"OTLP line is not JSON: {exc}", excerpt)
            continue
        if not isinstance(doc, dict):
            yield Reject(source, span_index(lineno, 0), "OTLP line is not a JSON object", "")
            continue
        spans = _spans(doc)
        last = SPAN_INDEX_STRIDE - 1
        for ordinal, part in enumerate(spans):
            if ordinal == last and next(spans, None) is not None:
                # More spans than indices in the line: the line's last index is the one reject
                # for the excess (so no index reaches into the next line's).
                dropped = 2 + sum(1 for _ in spans)
                yield Reject(
                    source,
                    span_index(lineno, last),
                    f"OTLP line has too many spans to number: {dropped} spans after the first"
                    f" {last} dropped (at most {SPAN_INDEX_STRIDE} per line)",
                    "",
                )
                break
            index = span_index(lineno, ordinal)
            if isinstance(part, str):
                yield Reject(source, index, f"OTLP line not readable: {part}", redact_excerpt(line))
                continue
            span, resource = part
            try:
                yield span_to_exchange(span, resource, source, index)
            except (TypeError, ValueError, AttributeError, OverflowError) as exc:
                excerpt = redact_excerpt(orjson.dumps(span))
                yield Reject(source, index, f"OTLP span not readable: {exc}", excerpt)


def iter_otlp(path: Path) -> Iterator[Exchange | Reject]:
    with open_binary(path) as fh:
        lines = 0

        def counted() -> Iterator[bytes]:
            nonlocal lines
            for line in fh:
                lines += 1
                yield line

        yield from iter_otlp_lines(counted(), str(path), 1)
        damage = damage_of(fh)
        if damage is not None:
            yield Reject(str(path), span_index(lines + 1, 0), damage, "")


def iter_otlp_range(
    path: Path, start: int, end: int, first_lineno: int
) -> Iterator[Exchange | Reject]:
    """Spans of the lines of an uncompressed file between byte offsets (on line boundaries)."""
    from pipeline.sources.capture import iter_line_range

    yield from iter_otlp_lines(iter_line_range(path, start, end), str(path), first_lineno)
