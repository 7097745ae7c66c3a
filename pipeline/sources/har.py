"""HAR 1.2 reader (browsers, Charles, mitmproxy `--set hardump=`), streaming in bounded memory.

Bodies come from `postData.text` and `content.text` (base64 when `encoding` says so). Timings:
`startedDateTime` is the request start; first byte = blocked + dns + connect + send + wait (the
`-1` "not applicable" values count as 0; `ssl` is inside `connect`), unknown (NULL) without a
response or without a `wait` above 0 (then nothing says when a byte came); end = `time`, unknown
when 0 or absent (converters write 0 for "not measured": HAR has no null for it) (a first byte
after it makes both unknown, as in a capture record); `startedDateTime` must carry its offset
(a time without one is a reject, not guessed to be UTC). A HAR has no per-chunk timing, so a
streamed body's time to first text is unknown (NULL). A failed request's reason is `_error`,
which Chrome and mitmproxy write in `response` (older tools: in the entry).

A HAR is one JSON document, but it can be larger than memory (a long mitmproxy session), so it
is never parsed whole: `iter_entry_bytes` scans the bytes for the extent of each element of
`log.entries` (tracking only brackets outside strings) and each entry is parsed alone with
orjson. Memory is one read block plus the largest entry. The scan yields raw bytes so ingest can
hand batches of entries to worker processes.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import orjson

from pipeline.capture_format import RecordError, parse_timestamp
from pipeline.errors import InputError
from pipeline.records import Exchange, Reject
from pipeline.redact import account_of, redact_headers, redact_url
from pipeline.sources import damage_of, open_binary

READ_BYTES = 4 * 1024 * 1024
# A run of anything but brackets, where strings are consumed whole (so a bracket inside a string
# is never seen). Possessive quantifiers: no backtracking when a string is cut by the block end.
_SKIP = re.compile(rb'(?:[^"{}\[\]]++|"[^"\\]*+(?:\\.[^"\\]*+)*+")*+')
# Before the entries array, keys matter: tokens are strings, brackets and colons.
_TOKEN = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"|[{}\[\]:]|"')
_OPEN = frozenset(b"{[")
_QUOTE, _BRACE, _CLOSE = ord('"'), ord("{"), ord("]")
_BETWEEN = re.compile(rb"[\s,]*+")
# Where one entry ends and the next starts. Inside a JSON string a quote is escaped, so `},{"`
# there is rare (a string ending in `},{`); every guess is checked by parsing anyway.
_BOUNDARY = re.compile(rb'\}\s*+,\s*+\{\s*+"')
_LAST = re.compile(rb"\}\s*+\]")
MAX_GUESSES = 16


class _Blocks:
    """A byte buffer over a stream. `more(keep)` forgets `buf[:keep]`, appends a block and
    returns how far offsets moved (callers subtract it); the buffer holds about one block plus
    the entry being read."""

    def __init__(self, fh: IO[bytes]) -> None:
        self.fh = fh
        self.buf = b""
        self.eof = False

    def more(self, keep: int) -> int:
        block = self.fh.read(READ_BYTES)
        if not block:
            self.eof = True
            return 0
        self.buf = self.buf[keep:] + block
        return keep


def _find_entries(blocks: _Blocks) -> int | None:
    """Offset just past the `[` of `log.entries`, or None when the document has none."""
    stack: list[bytes | None] = []  # the key under which each open container sits
    key: bytes | None = None
    last_string: bytes | None = None
    pos = 0
    while True:
        match = _TOKEN.search(blocks.buf, pos)
        if match is None or match.group() == b'"':  # nothing left, or a string cut by the block
            keep = match.start() if match is not None else len(blocks.buf)
            pos = keep - blocks.more(keep)
            if blocks.eof:
                return None
            continue
        token = match.group()
        pos = match.end()
        if token[0] == _QUOTE:
            last_string = token
        elif token == b":":
            key, last_string = last_string, None
        elif token[0] in _OPEN:
            if token == b"[" and key == b'"entries"' and stack == [None, b'"log"']:
                return pos
            stack.append(key)
            key = None
        elif stack:
            stack.pop()
            key = None


def _exact_end(blocks: _Blocks, start: int) -> tuple[int, int] | None:
    """(start, end) of the value at `start` by bracket depth (offsets after any refill); None
    when the file ends inside it. Slow (a regex step per string) but exact: used only when the
    fast boundary guess fails."""
    depth = 0
    pos = start
    while True:
        pos = _SKIP.match(blocks.buf, pos).end()  # type: ignore[union-attr]
        if pos >= len(blocks.buf) or blocks.buf[pos] == _QUOTE:
            shift = blocks.more(start)
            if blocks.eof:
                return None
            start, pos = start - shift, pos - shift
            continue
        if blocks.buf[pos] in _OPEN:
            depth += 1
        else:
            depth -= 1
            if depth <= 0:
                return start, pos + 1
        pos += 1


def _fast_end(blocks: _Blocks, start: int) -> tuple[int, int | None, Any]:
    """(start, end, parsed entry) from the boundary guess `},{"` checked by parsing; end is
    None when no guess parsed. `start` is returned because a refill moves offsets.

    JSON parses prefix-deterministically, so if `buf[start:end]` parses as a whole value, `end`
    is the value's true end; a guess inside a string fails to parse and the next one is tried.
    """
    searched = start + 1
    tries = 0
    while tries < MAX_GUESSES:
        match = _BOUNDARY.search(blocks.buf, searched)
        if match is None:
            if not blocks.eof:
                searched = max(start + 1, len(blocks.buf) - 64)  # a guess may straddle blocks
                shift = blocks.more(start)
                start, searched = start - shift, searched - shift
                continue
            match = _LAST.search(blocks.buf, searched)
            if match is None:
                return start, None, None
        end = match.start() + 1
        tries += 1
        try:
            return start, end, orjson.loads(blocks.buf[start:end])
        except orjson.JSONDecodeError:
            searched = end
    return start, None, None


class BadEntry:
    """An element of log.entries that could not be parsed (raw bytes, None if truncated)."""

    __slots__ = ("raw", "reason")

    def __init__(self, raw: bytes | None, reason: str) -> None:
        self.raw, self.reason = raw, reason


def iter_entries(fh: IO[bytes]) -> Iterator[tuple[int, Any]]:
    """(index, parsed entry or BadEntry) for each element of `log.entries`, in order.

    A damaged stretch is one BadEntry: a stray quote inverts which bytes are inside a string,
    so the bracket scan cuts the entry it hit (and sometimes its neighbours) into several
    pieces, none of them an entry. Counting each piece as a record made 13 entries read as 14
    or more; the pieces between two good entries are now one reject with the first piece's
    reason and bytes.

    Raises InputError when the document has no `log.entries` array.
    """
    index = 0
    bad: BadEntry | None = None
    held: Any = None  # the last good entry, until the next piece shows it was not cut short
    for _, entry in _elements(fh):
        if isinstance(entry, BadEntry):
            if bad is None and held is not None and entry.raw and not entry.raw.startswith(b"{"):
                # a piece that does not open an object is the rest of the entry before it:
                # a stray `}` closed that one early, and what parsed was only its start
                bad = BadEntry(orjson.dumps(held) + b"," + entry.raw, entry.reason)
                held = None
            else:
                bad = bad or entry
            continue
        if bad is not None and not _looks_like_entry(entry):
            continue  # an inner object (a request, a response) cut out of the damaged stretch
        if held is not None:
            yield index, held
            index += 1
        if bad is not None:
            yield index, bad
            index, bad = index + 1, None
        held = entry
    if held is not None:
        yield index, held
        index += 1
    if bad is not None:
        yield index, bad


def _looks_like_entry(value: Any) -> bool:
    return isinstance(value, dict) and ("request" in value or "startedDateTime" in value)


def _elements(fh: IO[bytes]) -> Iterator[tuple[int, Any]]:
    """What the scan finds, a damaged entry possibly in several pieces (`iter_entries`)."""
    blocks = _Blocks(fh)
    pos = _find_entries(blocks)
    if pos is None:
        raise InputError("no log.entries array found", hint="is this a HAR 1.2 file?")
    index = 0
    while True:
        pos = _BETWEEN.match(blocks.buf, pos).end()  # type: ignore[union-attr]
        if pos >= len(blocks.buf):
            pos -= blocks.more(pos)
            if blocks.eof:
                return  # no closing `]`: the file ends between entries
            continue
        if blocks.buf[pos] == _CLOSE:
            return  # the `]` closing log.entries: the rest of the document is not needed
        end: int | None = None
        if blocks.buf[pos] == _BRACE:
            pos, end, entry = _fast_end(blocks, pos)
        if end is not None:
            pos = end
            yield index, entry
        else:
            span = _exact_end(blocks, pos)
            if span is None:
                yield index, BadEntry(None, "truncated HAR: the file ends inside this entry")
                return
            raw = blocks.buf[span[0] : span[1]]
            pos = span[1]
            try:
                yield index, orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                yield index, BadEntry(raw, f"HAR entry is not valid JSON: {exc}")
        index += 1


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


def _first_byte_ms(timings: Any, status: int | None) -> float | None:
    """Request start to the first response byte, or None when unknown: no response arrived
    (Chrome puts a timed-out request's whole wait in `blocked`), or `wait`, the part that ends
    at the first byte, is -1, absent or null."""
    if status is None or not isinstance(timings, dict):
        return None
    wait = timings.get("wait")
    # A wait of 0 is what converters write when they measured nothing (no response comes back
    # in no time at all), so it is as unknown as -1 or absent.
    if not isinstance(wait, int | float) or isinstance(wait, bool) or wait <= 0:
        return None
    return sum(_ms(timings.get(k)) for k in ("blocked", "dns", "connect", "send", "wait"))


def _duration(total: Any) -> float | None:
    """The entry's `time` in ms, or None when it is absent, negative or 0: an exchange over a
    network takes some time, and a 0 there means the tool did not measure it."""
    if isinstance(total, int | float) and not isinstance(total, bool) and total > 0:
        return float(total)
    return None


def _error(entry: dict[str, Any], response: Any) -> str | None:
    """Why the request failed: `_error` where Chrome and mitmproxy write it (in `response`),
    or on the entry."""
    for holder in (entry, response):
        if isinstance(holder, dict) and holder.get("_error"):
            return str(holder["_error"])
    return None


def entry_to_exchange(entry: Any, source: str, index: int) -> Exchange:
    if not isinstance(entry, dict):
        raise RecordError("HAR entry is not an object")
    request = entry.get("request") or {}
    response = entry.get("response") or {}
    url = str(request.get("url", ""))
    raw_headers = _pairs(request.get("headers"))
    total = entry.get("time")
    raw_status = response.get("status")
    error = _error(entry, response)
    # No response (browsers export an aborted or blocked request with status 0 or without a
    # `response`; mitmproxy writes status 0 for failed flows): interrupted, status unknown.
    status = int(raw_status) if isinstance(raw_status, int) and raw_status > 0 else None
    return Exchange(
        source=source,
        index=index,
        started_at=parse_timestamp(entry.get("startedDateTime"), "startedDateTime"),
        method=str(request.get("method", "GET")),
        url=redact_url(url),
        request_headers=redact_headers(raw_headers),
        request_body=_content(request.get("postData")),
        status=status,
        response_headers=redact_headers(_pairs(response.get("headers"))),
        response_body=_content(response.get("content")),
        account=account_of(raw_headers, url),
        first_byte_ms=_first_byte_ms(entry.get("timings"), status),
        # 0 is what many converters write for "not measured" (HAR has no null for it): unknown.
        end_ms=_duration(total),
        # No response, or a transfer that failed after the headers (Chrome's
        # net::ERR_INCOMPLETE_CHUNKED_ENCODING on a cut stream): the exchange did not complete.
        capture_outcome="interrupted" if status is None or error else None,
        capture_error=error,
    )


def _excerpt(raw: bytes) -> str:
    from pipeline.sources.capture import redact_excerpt

    return redact_excerpt(raw)


def read_entry(entry: Any, source: str, index: int) -> Exchange | Reject:
    """One element from `iter_entries` as an Exchange, or a Reject with the reason."""
    if isinstance(entry, BadEntry):
        excerpt = _excerpt(entry.raw) if entry.raw is not None else ""
        return Reject(source, index, entry.reason, excerpt)
    try:
        return entry_to_exchange(entry, source, index)
    except (RecordError, TypeError, ValueError, AttributeError) as exc:
        text = _excerpt(orjson.dumps(entry)[:200])
        return Reject(source, index, f"HAR entry not readable: {exc}", text)


def iter_har(path: Path) -> Iterator[Exchange | Reject]:
    with open_binary(path) as fh:
        after = 0
        try:
            for index, entry in iter_entries(fh):
                yield read_entry(entry, str(path), index)
                after = index + 1
        except InputError as exc:
            raise InputError(f"{path}: {exc.message}", hint=exc.hint) from None
        damage = damage_of(fh)
        if damage is not None:
            yield Reject(str(path), after, damage, "")
