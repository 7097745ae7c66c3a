"""Framing of streamed bodies into events, with the byte offset where each event ends.

The offset lets `normalise` map an event to the capture chunk it arrived in, and so to its
arrival time (time to first reasoning / first answer text).

Server-sent events (WHATWG rules, plus what real providers send):
- lines end in LF, CRLF or CR; an event ends at a blank line (`\\n\\n` or Gemini's `\\r\\n\\r\\n`);
- `data:` may or may not be followed by one space (`data:{...}` seen on re-hosted DeepSeek);
- lines starting with `:` are comments (`: keep-alive`, `: OPENROUTER PROCESSING`);
- a final event without its blank line is still delivered (some fixtures lack the last newline).

This runs once per streamed response on the ingest hot path, so lines are cut with
`bytes.find` rather than a regex, and `data` stays bytes (orjson parses bytes directly).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import orjson

_FIELD_PREFIXES = (b"data:", b"event:", b":", b"id:", b"retry:")


@dataclass(slots=True)
class SseEvent:
    event: str | None  # value of the `event:` field, None when absent
    data: bytes  # `data:` lines joined with b"\n"
    end: int  # byte offset just past the event's last line


def _lines(body: bytes) -> Iterator[tuple[bytes, int, bool]]:
    """(line without its terminator, offset after the terminator, had a terminator)."""
    # A UTF-8 byte-order mark would otherwise glue itself to the first field name.
    pos = 3 if body.startswith(b"\xef\xbb\xbf") else 0
    size = len(body)
    while pos < size:
        nl = body.find(b"\n", pos)
        if nl < 0:
            line, nxt, terminated = body[pos:], size, False
        else:
            line, nxt, terminated = body[pos:nl], nl + 1, True
        if line.endswith(b"\r"):
            line = line[:-1]
        if b"\r" in line:
            # Bare CR line endings (allowed by the SSE spec, rare in practice).
            parts = line.split(b"\r")
            offset = pos
            for part in parts[:-1]:
                offset += len(part) + 1
                yield part, offset, True
            line = parts[-1]
        yield line, nxt, terminated
        pos = nxt


def iter_sse(body: bytes) -> Iterator[SseEvent]:
    event: str | None = None
    data: list[bytes] = []
    has_field = False
    for line, end, _ in _lines(body):
        if not line:
            if has_field:
                yield SseEvent(event, b"\n".join(data), end)
            event, data, has_field = None, [], False
            continue
        if line[0] == 0x3A:  # ":" comment / keep-alive
            continue
        colon = line.find(b":")
        if colon < 0:
            name, value = line, b""
        else:
            name, value = line[:colon], line[colon + 1 :]
            if value[:1] == b" ":
                value = value[1:]
        if name == b"data":
            data.append(value)
            has_field = True
        elif name == b"event":
            event = value.strip().decode("utf-8", "replace")
            has_field = True
        # id:, retry: and unknown fields carry nothing we need.
    if has_field:
        yield SseEvent(event, b"\n".join(data), len(body))


# A newline that breaks a plain data stream: one inside an event (a second line: `event:`, `id:`,
# a continued `data:`), or a blank line followed by anything but `data:` (a comment, another
# field, a third newline). A single newline or a blank line may end the body.
_NOT_PLAIN = re.compile(rb"\n(?:(?<=[^\n]\n)(?!\n|\Z)|(?<=\n\n)(?!data:|\Z))")


def is_plain_data_stream(body: bytes) -> bool:
    """True when every event is exactly one `data:` line: LF line endings, one blank line
    between events, no comments, no `event:`/`id:`/`retry:` fields, no BOM; the last event may
    be cut short. This is what OpenAI, DeepSeek and most compatible servers send.

    On such a body the event holding any byte is the line around it (`plain_frame_at`), so a
    caller can search the whole body for a key and read just the events it needs, instead of
    framing every event (the per-event Python work dominated ingest time).
    """
    return body.startswith(b"data:") and b"\r" not in body and _NOT_PLAIN.search(body) is None


def plain_frame_at(body: bytes, pos: int) -> tuple[int, bytes, int]:
    """(start, stripped data, end offset as `iter_sse` gives it) of the event of a plain data
    stream (`is_plain_data_stream`) that holds byte `pos`."""
    sep = body.rfind(b"\n\n", 0, pos)
    start = 0 if sep < 0 else sep + 2
    stop = body.find(b"\n\n", pos)
    if stop < 0:  # the last event, without its blank line: it ends at EOF
        return start, body[start + 5 :].strip(), len(body)
    return start, body[start + 5 : stop].strip(), stop + 2


def plain_frame_starts_reversed(body: bytes) -> Iterator[int]:
    """Start offsets of the events of a plain data stream, last event first."""
    last = body.rfind(b"\n\n")
    if last + 2 < len(body):  # a last event without its blank line
        yield last + 2 if last >= 0 else 0
    stop = last
    while stop >= 0:
        sep = body.rfind(b"\n\n", 0, stop)
        yield 0 if sep < 0 else sep + 2
        stop = sep


def looks_like_sse(body: bytes) -> bool:
    """True when the first non-comment line is an SSE field. Comment lines alone do not make a
    body SSE: DeepSeek may send `: keep-alive` lines before a plain JSON body."""
    pos = 0
    size = len(body)
    while pos < size:
        while pos < size and body[pos] in b" \t\r\n":
            pos += 1
        if body[pos : pos + 1] != b":":
            break
        nl = body.find(b"\n", pos)
        pos = size if nl < 0 else nl + 1
    return body[pos : pos + 8].startswith(_FIELD_PREFIXES[:2] + _FIELD_PREFIXES[3:])


def iter_sse_json(body: bytes) -> Iterator[tuple[str | None, object, int]]:
    """(event name, decoded JSON data, end offset) for every SSE event whose data is JSON.

    `[DONE]`, empty data and data that is not JSON are yielded with the raw bytes as value
    so callers can tell a sentinel from a malformed event.
    """
    for ev in iter_sse(body):
        data = ev.data.strip()
        if not data or data[:1] not in (b"{", b"["):
            yield ev.event, data, ev.end
            continue
        try:
            yield ev.event, orjson.loads(data), ev.end
        except orjson.JSONDecodeError:
            yield ev.event, data, ev.end


_FIELD_LINE = (b"data:", b"event:", b"id:", b"retry:", b":")


def trailing_json(body: bytes) -> object | None:
    """The JSON value written after the last SSE line of a body, outside any event; None when
    there is none or it does not parse.

    `iter_sse` drops lines that are not SSE fields, as the SSE rules say, so a JSON body written
    bare after the events (Vertex ends a 200 stream with its error object pretty-printed, without
    `data:`) is invisible to it. This finds that text without changing what `iter_sse` accepts:
    a caller decides whether the value means anything. A body whose last line is a field (every
    ordinary stream) costs one line scan.
    """
    text = body.rstrip()
    if not text.endswith(b"}"):
        return None
    pos = len(text)
    while pos > 0:
        start = max(text.rfind(b"\n", 0, pos), text.rfind(b"\r", 0, pos)) + 1
        if text.startswith(_FIELD_LINE, start):
            break  # SSE field lines start at column 0; JSON text never starts with these
        pos = start - 1
    tail = text[max(pos, 0) :].strip()
    if not tail.startswith(b"{"):
        return None
    try:
        value: object = orjson.loads(tail)
    except orjson.JSONDecodeError:
        return None
    return value


def iter_json_array(body: bytes) -> Iterator[tuple[object, int]]:
    """Elements of a streamed JSON array (Gemini without `alt=sse`) with their end offsets.

    Tolerates a truncated tail: elements decoded before the cut are still yielded. Elements are
    found by scanning for the matching close brace (strings and escapes respected), then each is
    decoded with orjson; offsets are byte offsets.
    """
    pos = body.find(b"[")
    if pos < 0:
        return
    pos += 1
    size = len(body)
    while pos < size:
        while pos < size and body[pos] in b" \t\r\n,":
            pos += 1
        if pos >= size or body[pos] == 0x5D:  # "]"
            return
        end = _value_end(body, pos)
        if end is None:
            return
        try:
            yield orjson.loads(body[pos:end]), end
        except orjson.JSONDecodeError:
            return
        pos = end


def _value_end(body: bytes, start: int) -> int | None:
    """Offset just past the JSON object/array starting at `start`, None when truncated."""
    opener = body[start]
    if opener not in (0x7B, 0x5B):  # only objects/arrays appear as stream elements
        return None
    depth = 0
    i = start
    size = len(body)
    while i < size:
        c = body[i]
        if c == 0x22:  # string: jump to its closing quote
            i += 1
            while True:
                q = body.find(b'"', i)
                if q < 0:
                    return None
                backslashes = 0
                j = q - 1
                while j >= i and body[j] == 0x5C:
                    backslashes += 1
                    j -= 1
                i = q + 1
                if backslashes % 2 == 0:
                    break
            continue
        if c in (0x7B, 0x5B):
            depth += 1
        elif c in (0x7D, 0x5D):
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def is_stream_body(body: bytes, stream_requested: bool) -> bool:
    """Whether to read a body as a stream: by its shape first, the request flag second.

    A gateway may ignore `"stream": true` and answer with one JSON object; reading that as SSE
    would drop its usage. A body that starts like SSE is a stream whatever the request said.
    """
    return looks_like_sse(body) or (stream_requested and body.lstrip()[:1] != b"{")
