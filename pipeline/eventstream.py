"""AWS binary event-stream framing (`application/vnd.amazon.eventstream`, Bedrock ConverseStream).

Each message is:

    total length (uint32 BE) | headers length (uint32 BE) | prelude CRC32 (of the 8 bytes before)
    headers | payload | message CRC32 (of everything before it)

A header is: name length (uint8), name (UTF-8), value type (uint8), value. Value types: 0 true,
1 false (no bytes), 2 int8, 3 int16, 4 int32, 5 int64, 6 bytes and 7 string (uint16 length +
bytes), 8 timestamp (int64 ms), 9 UUID (16 bytes). Bedrock sets `:message-type` (event,
exception, error), `:event-type` or `:exception-type`, and `:content-type`.

A body cut mid-message (an interrupted stream) ends the iteration quietly: the messages before
the cut are still good. A CRC mismatch or an impossible length means the bytes are not an event
stream at all, which raises `EventStreamError` (a ValueError, so ingest rejects the record).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass

_PRELUDE = 12
_MIN_MESSAGE = 16  # prelude + message CRC, no headers, no payload
# Fixed-size header values by type code; 6 and 7 carry a uint16 length instead.
_FIXED = {0: 0, 1: 0, 2: 1, 3: 2, 4: 4, 5: 8, 8: 8, 9: 16}


class EventStreamError(ValueError):
    """The body is not a valid AWS event stream."""


@dataclass(slots=True)
class EventMessage:
    headers: dict[str, str | int | bool | bytes]
    payload: bytes
    end: int  # byte offset just past this message

    def header(self, name: str) -> str | None:
        value = self.headers.get(name)
        return value if isinstance(value, str) else None


def _parse_headers(raw: bytes) -> dict[str, str | int | bool | bytes]:
    headers: dict[str, str | int | bool | bytes] = {}
    pos = 0
    size = len(raw)
    while pos < size:
        name_len = raw[pos]
        pos += 1
        name = raw[pos : pos + name_len].decode("utf-8", "replace")
        pos += name_len
        if pos >= size:
            raise EventStreamError("event-stream header has no value type")
        kind = raw[pos]
        pos += 1
        value: str | int | bool | bytes
        if kind in (6, 7):
            length = int.from_bytes(raw[pos : pos + 2], "big")
            pos += 2
            chunk = raw[pos : pos + length]
            pos += length
            value = chunk.decode("utf-8", "replace") if kind == 7 else chunk
        elif kind in _FIXED:
            width = _FIXED[kind]
            chunk = raw[pos : pos + width]
            pos += width
            if kind in (0, 1):
                value = kind == 0
            elif kind == 9:
                value = chunk
            else:
                value = int.from_bytes(chunk, "big", signed=True)
        else:
            raise EventStreamError(f"unknown event-stream header type {kind}")
        if pos > size:
            raise EventStreamError("event-stream header runs past its block")
        headers[name] = value
    return headers


def iter_eventstream(body: bytes) -> Iterator[EventMessage]:
    pos = 0
    size = len(body)
    while pos + _PRELUDE <= size:
        total = int.from_bytes(body[pos : pos + 4], "big")
        headers_len = int.from_bytes(body[pos + 4 : pos + 8], "big")
        prelude_crc = int.from_bytes(body[pos + 8 : pos + 12], "big")
        if zlib.crc32(body[pos : pos + 8]) != prelude_crc:
            raise EventStreamError(f"event-stream prelude CRC mismatch at byte {pos}")
        if total < _MIN_MESSAGE or headers_len > total - _MIN_MESSAGE:
            raise EventStreamError(f"event-stream message length {total} is impossible")
        end = pos + total
        if end > size:
            return  # cut mid-message: the stream was interrupted
        message_crc = int.from_bytes(body[end - 4 : end], "big")
        if zlib.crc32(body[pos : end - 4]) != message_crc:
            raise EventStreamError(f"event-stream message CRC mismatch at byte {pos}")
        headers_start = pos + _PRELUDE
        payload_start = headers_start + headers_len
        yield EventMessage(
            headers=_parse_headers(body[headers_start:payload_start]),
            payload=body[payload_start : end - 4],
            end=end,
        )
        pos = end


def encode_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One event-stream message with string headers (tests and the demo build streams with it)."""
    raw = b""
    for name, value in headers.items():
        key, val = name.encode(), value.encode()
        raw += bytes([len(key)]) + key + b"\x07" + len(val).to_bytes(2, "big") + val
    total = _PRELUDE + len(raw) + len(payload) + 4
    prelude = total.to_bytes(4, "big") + len(raw).to_bytes(4, "big")
    head = prelude + zlib.crc32(prelude).to_bytes(4, "big") + raw + payload
    return head + zlib.crc32(head).to_bytes(4, "big")
