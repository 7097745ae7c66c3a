"""Framing of streamed bodies into events, with the byte offset where each event ends.

The offset lets `normalise` map an event to the capture chunk it arrived in, and so to its
arrival time (time to first reasoning / first answer text).

Server-sent events (WHATWG rules, plus what real providers send):
- lines end in LF, CRLF or CR; an event ends at a blank line (`\\n\\n` or Gemini's `\\r\\n\\r\\n`);
- `data:` may or may not be followed by one space (`data:{...}` seen on re-hosted DeepSeek);
- lines starting with `:` are comments (`: keep-alive`, `: OPENROUTER PROCESSING`);
- a final event without its blank line is still delivered (some fixtures lack the last newline).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

_LINE = re.compile(rb"([^\r\n]*)(\r\n|\r|\n|$)")


@dataclass(slots=True)
class SseEvent:
    event: str | None  # value of the `event:` field, None when absent
    data: str  # `data:` lines joined with "\n"
    end: int  # byte offset just past the event's last line


def iter_sse(body: bytes) -> Iterator[SseEvent]:
    event: str | None = None
    data: list[str] = []
    has_field = False
    pos = 0
    size = len(body)
    while pos < size:
        match = _LINE.match(body, pos)
        assert match is not None  # the pattern matches the empty string
        line, newline = match.group(1), match.group(2)
        pos = match.end()
        if not line:
            if has_field:
                yield SseEvent(event, "\n".join(data), pos)
            event, data, has_field = None, [], False
            if not newline:
                break
            continue
        if line.startswith(b":"):
            continue
        name, sep, value = line.partition(b":")
        if sep and value.startswith(b" "):
            value = value[1:]
        text = value.decode("utf-8", "replace")
        if name == b"data":
            data.append(text)
            has_field = True
        elif name == b"event":
            event = text.strip()
            has_field = True
        # id:, retry: and unknown fields carry nothing we need.
        if not newline:
            break
    if has_field:
        yield SseEvent(event, "\n".join(data), size)


def looks_like_sse(body: bytes) -> bool:
    head = body.lstrip()[:64]
    return head.startswith((b"data:", b"event:", b":", b"id:", b"retry:"))


def iter_json_array(body: bytes) -> Iterator[tuple[object, int]]:
    """Elements of a streamed JSON array (Gemini without `alt=sse`) with their end offsets.

    Tolerates a truncated tail: elements decoded before the cut are still yielded.
    Offsets are character offsets, equal to byte offsets for the ASCII framing that matters.
    """
    text = body.decode("utf-8", "replace")
    decoder = json.JSONDecoder()
    pos = text.find("[")
    if pos < 0:
        return
    pos += 1
    size = len(text)
    while pos < size:
        while pos < size and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= size or text[pos] == "]":
            return
        try:
            value, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            return
        yield value, len(text[:end].encode("utf-8"))
        pos = end
