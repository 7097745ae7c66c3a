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
is never parsed whole: `_elements` scans the bytes for the extent of each element of
`log.entries` (tracking only brackets outside strings) and each entry is parsed alone with
orjson. Memory is one read block plus the largest entry.

Ingest splits an uncompressed HAR like a capture JSONL: the parent finds an entry's start every
few tens of MB (`entry_start_after`) and the `startedDateTime` keys between two such starts
(`find_anchors`, a byte search: every HAR 1.2 entry has that key once), and a worker process reads
the entries of its byte range itself (`iter_range`), numbered from the keys counted before it.
The worker checks that its range held as many entries as that count said and ended where the
next range starts; when not (a damaged stretch, an entry without the key), `RangeMismatch` makes
ingest read the file again as one stream (`iter_entries`).
"""

from __future__ import annotations

import base64
import errno
import mmap
import os
import re
from array import array
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import orjson

from pipeline.capture_format import RecordError, parse_timestamp
from pipeline.errors import InputError
from pipeline.records import Exchange, Reject
from pipeline.redact import (
    account_of,
    cut,
    mask_values,
    redact_headers,
    redact_url,
    secret_values,
)
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
        self.base = 0  # the offset in the stream of buf[0]

    def more(self, keep: int) -> int:
        block = self.fh.read(READ_BYTES)
        if not block:
            self.eof = True
            return 0
        self.buf = self.buf[keep:] + block
        self.base += keep
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
    yield from _merged((entry for _, entry in _elements(fh)), 0)


def _merged(elements: Iterable[Any], index: int) -> Iterator[tuple[int, Any]]:
    """(index, entry or BadEntry) from what the scan found, the pieces of a damaged stretch made
    one BadEntry (`iter_entries`); numbered from `index`."""
    bad: BadEntry | None = None
    held: Any = None  # the last good entry, until the next piece shows it was not cut short
    for entry in elements:
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
        raise _no_entries()
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
                yield index, BadEntry(None, TRUNCATED)
                return
            raw = blocks.buf[span[0] : span[1]]
            pos = span[1]
            try:
                yield index, orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                yield index, BadEntry(raw, f"HAR entry is not valid JSON: {exc}")
        index += 1


def _no_entries() -> InputError:
    return InputError("no log.entries array found", hint="is this a HAR 1.2 file?")


TRUNCATED = "truncated HAR: the file ends inside this entry"


# --- byte ranges: the plan in the ingest process, the entries in a worker ----------------------

# The key every HAR 1.2 entry has once (`startedDateTime` is required), as exporters write it.
# Within a string a quote is escaped, so these bytes are a key (or a whole string value).
ANCHOR = b'"startedDateTime"'
ANCHOR_SPAN = 256  # bytes read past a block, for a key that starts in it
_KEY_END = re.compile(rb"\s*+(?::|\Z)")  # a colon after it, or the bytes in hand end first
_WHITESPACE = b" \t\r\n"
GAP_BYTES = 256  # the most whitespace looked through between two entries, for a guess
# A candidate end followed by this is a header, cookie or query parameter (`{"name": ...}`), not
# the next entry: not worth a parse.
_PAIR_KEY = b'name"'
CUT_BLOCK = 1024 * 1024  # read at a planned cut to find an entry start (grown for large entries)
CUT_BLOCK_MAX = 64 * 1024 * 1024
CUT_TRIES = 64  # candidate entry starts parsed per block before it is grown
_DONTNEED = getattr(mmap, "MADV_DONTNEED", None)  # where the system has it (Linux, macOS)


class RangeMismatch(Exception):
    """A byte range of a HAR did not hold the entries its plan counted, or did not end where the
    next range starts (a damaged stretch, an entry without `startedDateTime`): the numbers of the
    entries after it would be wrong, so ingest reads the file again as one stream."""


def entries_offset(fh: IO[bytes]) -> int:
    """The offset just past the `[` of `log.entries`; InputError when the document has none."""
    blocks = _Blocks(fh)
    pos = _find_entries(blocks)
    if pos is None:
        raise _no_entries()
    return blocks.base + pos


def find_anchors(fd: int, start: int, end: int) -> array[int]:
    """The offsets of ANCHOR as a key (a colon after it) in bytes [start, end) of a file, read
    in blocks: a byte search, no parse. One per entry in a HAR 1.2 document."""
    found = array("q")
    pos = start
    while pos < end:
        length = min(READ_BYTES, end - pos)
        # ANCHOR_SPAN bytes more, so that a key across two blocks is seen, with its colon; one
        # starting past the block is the next block's
        block = os.pread(fd, min(length + ANCHOR_SPAN, end - pos), pos)
        if not block:
            break
        at = block.find(ANCHOR)
        while 0 <= at < length:
            if _KEY_END.match(block, at + len(ANCHOR)):
                found.append(pos + at)
            at = block.find(ANCHOR, at + len(ANCHOR))
        pos += length
    return found


def entry_start_after(fd: int, offset: int, size: int) -> int | None:
    """The offset of an entry's `{` after `offset` and before `size`: an object following `},`
    that parses and has a `request` or `startedDateTime` key (`_looks_like_entry`). None when no
    such entry starts within CUT_BLOCK_MAX bytes. A worker reading up to it checks that it is
    where an entry starts (`iter_range`)."""
    length = CUT_BLOCK
    while offset < size:
        block = os.pread(fd, min(length, size - offset), offset)
        scan = _Scan(block, 0, len(block), (), whole=False, mapped=False)
        tries = 0
        for match in _BOUNDARY.finditer(block):
            if block.startswith(_PAIR_KEY, match.end()):
                continue
            brace = block.rindex(b"{", match.start(), match.end())
            found = scan.guess(brace)
            if found is not None and _looks_like_entry(found[1]):
                return offset + brace
            tries += 1
            if tries >= CUT_TRIES:
                break
        if offset + len(block) >= size or length >= CUT_BLOCK_MAX:
            return None
        length *= 4
    return None


class _Scan:
    """The elements of `log.entries` in buf[pos:stop] (a file's bytes, mapped or read), found as
    `_elements` finds them in a stream: the same extents, values and BadEntry reasons. An
    entry's end is guessed first where the next `startedDateTime` key (`anchors`, offsets in
    buf) says the next entry starts, then at `},{"` boundaries after its own key, each guess
    checked by parsing; JSON parses prefix-deterministically, so a guess that parses is the end
    whichever guess it was. When none parses, the brackets are counted (`_exact_in`).

    `whole`: an entry ends at `stop` (a range's end), not only somewhere before it (a block read
    to look for one). A mapped buf (`mapped`) is read forward only, so the pages read are let go
    every READ_BYTES: the file's pages count towards this process's memory for about that much,
    not the whole range."""

    def __init__(
        self, buf: Any, pos: int, stop: int, anchors: Sequence[int], whole: bool, mapped: bool
    ) -> None:
        self.buf, self.pos, self.stop, self.anchors = buf, pos, stop, anchors
        self.whole = whole
        self.next_anchor = 0  # index in anchors of the first at or after the element read
        self.ended = ""  # how `elements` ended: stop, close (`]`) or truncated
        self.released = 0 if mapped else -1  # buf[:released] is let go (-1: never)

    def elements(self) -> Iterator[Any]:
        buf, stop = self.buf, self.stop
        pos = self.pos
        while True:
            if self.released >= 0 and pos - self.released >= READ_BYTES and _DONTNEED:
                self._release(pos)
            pos = _BETWEEN.match(buf, pos, stop).end()  # type: ignore[union-attr]
            if pos >= stop:
                self.ended = "stop"
                return
            if buf[pos] == _CLOSE:
                self.ended = "close"
                return
            found = self.guess(pos) if buf[pos] == _BRACE else None
            if found is not None:
                pos = found[0]
                yield found[1]
                continue
            end = _exact_in(buf, pos, stop)
            if end is None:
                self.ended = "truncated"
                yield BadEntry(None, TRUNCATED)
                return
            raw = bytes(buf[pos:end])
            pos = end
            try:
                yield orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                yield BadEntry(raw, f"HAR entry is not valid JSON: {exc}")

    def _release(self, pos: int) -> None:
        upto = pos - pos % mmap.PAGESIZE
        self.buf.madvise(_DONTNEED, self.released, upto - self.released)
        self.released = upto

    def guess(self, start: int) -> tuple[int, Any] | None:
        """(end, parsed entry) of the object at `start`, or None when no guess parsed."""
        tried: set[int] = set()
        with memoryview(self.buf) as view:
            for end in self._ends(start):
                if end in tried:
                    continue
                tried.add(end)
                try:
                    return end, orjson.loads(view[start:end])
                except orjson.JSONDecodeError:
                    if len(tried) >= MAX_GUESSES:
                        return None
        return None

    def _ends(self, start: int) -> Iterator[int]:
        buf, stop, anchors = self.buf, self.stop, self.anchors
        k = self.next_anchor
        while k < len(anchors) and anchors[k] < start:
            k += 1
        self.next_anchor = k
        own = anchors[k] if k < len(anchors) else None
        after = anchors[k + 1] if k + 1 < len(anchors) and anchors[k + 1] < stop else None
        if after is not None:
            # `},{` right before the next key: it opens the next entry (mitmproxy, Firefox)
            end = _end_before(buf, after, start, opening=True)
        elif self.whole:  # the last entry here: it ends before the range does
            end = _end_before(buf, stop, start, opening=False)
        else:
            end = -1
        if end > start:
            yield end
        # after its own key (it comes last in Chrome's entries), `},{"` boundaries
        for match in _BOUNDARY.finditer(buf, start + 1 if own is None else own, stop):
            if buf[match.end() : match.end() + len(_PAIR_KEY)] != _PAIR_KEY:
                yield match.start() + 1
        for match in _LAST.finditer(buf, start + 1, stop):
            yield match.start() + 1


def _end_before(buf: Any, pos: int, floor: int, opening: bool) -> int:
    """Just past a `}` that the bytes before `pos` end with (after floor), followed by a comma
    and, when `opening`, a `{`, with whitespace anywhere between; else -1. Without `opening`,
    any run of commas and whitespace."""
    lo = max(floor, pos - GAP_BYTES)
    tail = bytes(buf[lo:pos])
    if opening:
        for byte in (b"{", b","):
            tail = tail.rstrip(_WHITESPACE)
            if not tail.endswith(byte):
                return -1
            tail = tail[:-1]
    tail = tail.rstrip(_WHITESPACE if opening else _WHITESPACE + b",")
    return lo + len(tail) if tail.endswith(b"}") else -1


def _exact_in(buf: Any, start: int, stop: int) -> int | None:
    """`_exact_end` on bytes in hand: the end of the value at `start` by bracket depth, None when
    buf[:stop] ends inside it."""
    depth = 0
    pos = start
    while True:
        pos = _SKIP.match(buf, pos, stop).end()  # type: ignore[union-attr]
        if pos >= stop or buf[pos] == _QUOTE:
            return None
        if buf[pos] in _OPEN:
            depth += 1
        else:
            depth -= 1
            if depth <= 0:
                return pos + 1
        pos += 1


def iter_range(
    path: Path,
    start: int,
    end: int,
    first_index: int,
    expect: int | None,
    anchors: Sequence[int] = (),
) -> Iterator[tuple[int, Any]]:
    """(index, entry or BadEntry) of the entries in bytes [start, end) of an uncompressed HAR,
    numbered from `first_index`, as `iter_entries` gives them for the whole document. `expect`:
    how many the plan counted (None for the last range, which runs to the end of the document);
    `anchors`: the offsets of the `startedDateTime` keys in the range.

    Raises RangeMismatch, after the entries, when the range held another number of entries than
    `expect` or did not end where the next starts; or when a range after the first does not
    begin with an entry (the damaged stretch may have begun in the range before)."""
    with open(path, "rb", buffering=0) as fh:
        fd = fh.fileno()
        if os.fstat(fd).st_size < end:
            raise OSError(errno.ESPIPE, "the file was cut short while it was read")
        if end <= start:
            return
        base = start - start % mmap.ALLOCATIONGRANULARITY
        with mmap.mmap(fd, end - base, offset=base, access=mmap.ACCESS_READ) as data:
            relative = [a - base for a in anchors]
            scan = _Scan(data, start - base, end - base, relative, whole=True, mapped=True)
            elements = scan.elements()
            if first_index > 0:
                elements = _opening_with_an_entry(elements)
            count = 0
            for item in _merged(elements, first_index):
                yield item
                count += 1
            if expect is not None and (scan.ended != "stop" or count != expect):
                raise RangeMismatch(
                    f"bytes {start}-{end} held {count} entries (ending: {scan.ended}), not the"
                    f" {expect} counted"
                )


def _opening_with_an_entry(elements: Iterator[Any]) -> Iterator[Any]:
    """The elements of a range after the first, if its first is an entry: then whatever the
    range before ended with is complete, as `iter_entries` would have found it."""
    for n, entry in enumerate(elements):
        if n == 0 and (isinstance(entry, BadEntry) or not _looks_like_entry(entry)):
            raise RangeMismatch("the range does not begin with an entry")
        yield entry


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
    # a status that is no number: rejected if this is an LLM call, skipped with the page loads
    # otherwise (normalise decides, `defect`)
    bad = raw_status is not None and (
        not isinstance(raw_status, int) or isinstance(raw_status, bool)
    )
    defect = f"response.status {str(raw_status)[:20]!r} is not a number" if bad else None
    status = raw_status if not bad and raw_status is not None and raw_status > 0 else None
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
        response_body=mask_values(
            _content(response.get("content")), secret_values(raw_headers, url)
        ),
        account=account_of(raw_headers, url),
        first_byte_ms=_first_byte_ms(entry.get("timings"), status),
        # 0 is what many converters write for "not measured" (HAR has no null for it): unknown.
        end_ms=_duration(total),
        # No response, or a transfer that failed after the headers (Chrome's
        # net::ERR_INCOMPLETE_CHUNKED_ENCODING on a cut stream): the exchange did not complete.
        capture_outcome="interrupted" if status is None or error else None,
        capture_error=error,
        defect=defect,
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
    except (RecordError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        text = _excerpt(cut(orjson.dumps(entry), 200))
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
