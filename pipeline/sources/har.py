"""HAR 1.2 reader (browsers, Charles, mitmproxy `--set hardump=`).

Bodies come from `postData.text` and `content.text` (base64 when `encoding` says so). Timings:
`startedDateTime` is the request start; first byte = blocked + dns + connect + send + wait (the
`-1` "not applicable" values count as 0; `ssl` is inside `connect`); end = `time`. A HAR has no
per-chunk timing, so a streamed body's time to first text is unknown (NULL).

The whole document is parsed at once; HAR exports are produced in memory by their tools, so
they are bounded by what the exporting tool could hold.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from pipeline.capture_format import RecordError, parse_timestamp
from pipeline.errors import InputError
from pipeline.records import Exchange, Reject
from pipeline.redact import account_of, redact_headers, redact_text, redact_url
from pipeline.sources import open_binary


def _pairs(items: Any) -> list[tuple[str, str]]:
    if not isinstance(items, list):
        return []
    return [(str(h.get("name", "")), str(h.get("value", ""))) for h in items if isinstance(h, dict)]


def _content(obj: Any) -> bytes:
    if not isinstance(obj, dict):
        return b""
    text = obj.get("text")
    if not isinstance(text, str):
        return b""
    if obj.get("encoding") == "base64":
        try:
            return base64.b64decode(text)
        except ValueError as exc:
            raise RecordError("content.encoding is base64 but the text is not base64") from exc
    return text.encode("utf-8", "surrogatepass")


def _ms(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and value > 0 else 0.0


def entry_to_exchange(entry: Any, source: str, index: int) -> Exchange:
    if not isinstance(entry, dict):
        raise RecordError("HAR entry is not an object")
    request = entry.get("request") or {}
    response = entry.get("response") or {}
    url = str(request.get("url", ""))
    raw_headers = _pairs(request.get("headers"))
    timings = entry.get("timings") or {}
    first_byte = sum(_ms(timings.get(k)) for k in ("blocked", "dns", "connect", "send", "wait"))
    total = entry.get("time")
    status = response.get("status")
    return Exchange(
        source=source,
        index=index,
        started_at=parse_timestamp(entry.get("startedDateTime")),
        method=str(request.get("method", "GET")),
        url=redact_url(url),
        request_headers=redact_headers(raw_headers),
        request_body=_content(request.get("postData")),
        # mitmproxy writes status 0 for failed flows: no response arrived.
        status=int(status) if isinstance(status, int) and status > 0 else None,
        response_headers=redact_headers(_pairs(response.get("headers"))),
        response_body=_content(response.get("content")),
        account=account_of(raw_headers, url),
        first_byte_ms=first_byte if timings else None,
        end_ms=float(total) if isinstance(total, int | float) and total >= 0 else None,
        capture_error=str(entry["_error"]) if entry.get("_error") else None,
    )


def iter_har(path: Path) -> Iterator[Exchange | Reject]:
    with open_binary(path) as fh:
        data = fh.read()
    try:
        doc = orjson.loads(data.lstrip(b"\xef\xbb\xbf"))
    except orjson.JSONDecodeError as exc:
        raise InputError(f"{path} is not valid JSON: {exc}") from exc
    entries = (doc.get("log") or {}).get("entries") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise InputError(f"{path} has no log.entries", hint="is this a HAR 1.2 file?")
    for index, entry in enumerate(entries):
        try:
            yield entry_to_exchange(entry, str(path), index)
        except (RecordError, TypeError, ValueError, AttributeError) as exc:
            text = redact_text(orjson.dumps(entry)[:200].decode("utf-8", "replace"))
            yield Reject(str(path), index, f"HAR entry not readable: {exc}", text)
