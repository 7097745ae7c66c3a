"""Keys split across the events of a streamed answer, masked where each piece lies.

A streamed answer arrives as many small JSON events, each holding a few characters of the text
(`choices[].delta.content` for OpenAI chat, `delta.text` / `delta.partial_json` for Anthropic,
`candidates[].content.parts[].text` for Gemini, `delta` for OpenAI responses). A key the model
echoes back is cut wherever the tokenizer cut it: `sk-proj` in one event, the rest in the next.
The capture writer masks a line by what it can see, and no one piece is key-shaped, so the
key's tail stayed in the capture file.

Here the text of every string field is put back together, field name by field name, in the
order the events came (what a reader of the answer sees), the masking rules run over that
joined text, and each masked byte is masked in the piece it came from: a `*` over the raw bytes
that wrote it (a whole `\\uXXXX` escape for an escaped character). Masks keep their length, so
byte counts, chunk offsets and the JSON of every event stay valid.

Bedrock's streams are AWS event streams (binary frames, each with a CRC): there the JSON of
every message (for InvokeModel, the event inside each chunk's base64) is read the same way,
whole values included, and each changed message gets its CRC again: the writer's masking of the
raw bytes cannot see inside base64, and would break the CRC of any message it changed.

Without pyarrow (the mitmproxy addon runs in mitmproxy's own environment) every masking rule
runs on every field, as in the writer.
"""

from __future__ import annotations

import base64
import re
import zlib
from typing import Any

import orjson

from pipeline.body_secrets import mask_secrets_each
from pipeline.eventstream import EventStreamError, iter_eventstream

# A JSON string token, and whether a `:` follows it (then it is a field name). Scanned left to
# right from the body's start, tokens stay in step with the JSON of each event; SSE's own lines
# (`event: ...`, `data: `) hold no quotes. (Unrolled: 30 ms per MB, half the plain form's.)
_STRING = re.compile(rb'"([^"\\]*(?:\\.[^"\\]*)*)"(\s*:)?', re.DOTALL)
_SIMPLE_ESCAPES = {
    ord('"'): b'"',
    ord("\\"): b"\\",
    ord("/"): b"/",
    ord("b"): b"\b",
    ord("f"): b"\f",
    ord("n"): b"\n",
    ord("r"): b"\r",
    ord("t"): b"\t",
}


def looks_streamed(body: bytes) -> bool:
    """An SSE body (events of `data:` lines) or a JSON array of chunks (Gemini's
    `streamGenerateContent` without `alt=sse`): the bodies whose text comes in pieces."""
    head = body[:4096].lstrip()
    return head.startswith((b"[", b"data:", b"event:", b":", b"id:")) or b"\ndata:" in head


def mask_split_keys(body: bytes) -> bytes:
    """`body` with every secret the joined text of its string fields holds masked in place,
    piece by piece; the body itself when there is none (the common case: one scan of the body
    and one masking pass per field name)."""
    return _mask_documents([body], whole_values=False)[0]


def looks_like_event_stream(body: bytes) -> bool:
    """Whether `body` starts as an AWS event stream (Bedrock ConverseStream, InvokeModel with
    a response stream): its first message's prelude CRC matches."""
    return len(body) >= 16 and zlib.crc32(body[:8]) == int.from_bytes(body[8:12], "big")


def mask_event_stream(body: bytes) -> bytes:
    """An AWS event stream with every secret its messages' text holds masked, each message's
    CRC computed again. A message's JSON is its payload, or for InvokeModel's PayloadPart
    (`{"bytes": "<base64>"}`) the event the base64 carries, masked and encoded again (same
    length). Whole values count too: the writer's masking of the raw bytes would break the
    CRC of the message it masked, and cannot see inside base64 at all. A body that is not a
    valid event stream is returned as it came."""
    try:
        messages = list(iter_eventstream(body))
    except EventStreamError:
        return body
    docs = [_inner_json(m.payload) for m in messages]
    masked = _mask_documents([inner for inner, _ in docs], whole_values=True)
    out: bytearray | None = None
    start = 0
    for message, (inner, encoded), new in zip(messages, docs, masked, strict=True):
        if new != inner:
            payload = message.payload
            if encoded is not None:  # a PayloadPart: the same base64, of the masked event
                payload = payload.replace(encoded, base64.b64encode(new), 1)
            else:
                payload = new
            out = bytearray(body) if out is None else out
            crc_at = message.end - 4
            out[crc_at - len(payload) : crc_at] = payload
            out[crc_at : message.end] = zlib.crc32(out[start:crc_at]).to_bytes(4, "big")
        start = message.end
    return bytes(out) if out is not None else body


def _inner_json(payload: bytes) -> tuple[bytes, bytes | None]:
    """A message's JSON, and the base64 text it came from when it is a PayloadPart's."""
    if b'"bytes"' not in payload:
        return payload, None
    try:
        encoded = orjson.loads(payload).get("bytes")
        if isinstance(encoded, str) and encoded.encode() in payload:
            return base64.b64decode(encoded, validate=True), encoded.encode()
    except (orjson.JSONDecodeError, AttributeError, ValueError):
        pass
    return payload, None


def _mask_documents(docs: list[bytes], *, whole_values: bool) -> list[bytes]:
    """Each of `docs` (JSON texts, read in order as one stream) with every secret the joined
    text of a field name's values holds masked where each piece lies; `whole_values`: a name
    with a single value too."""
    # each field name's text, put together
    texts = {
        name: b"".join(_decode(raw) for raw in values)
        for name, values in _by_name([t for doc in docs for t in _STRING.findall(doc)]).items()
        if whole_values or len(values) > 1
    }
    found = {  # field name -> its joined text, every masked byte a NUL
        name: masked
        for (name, joined), masked in zip(
            texts.items(), mask_secrets_each(list(texts.values()), fill=0), strict=True
        )
        if masked != joined
    }
    if not found:
        return docs
    # Again, with each value's place, for the fields that hold a secret.
    places = _by_name(
        [
            (t.group(1), t.group(2), d, t.start(1))
            for d, doc in enumerate(docs)
            for t in _STRING.finditer(doc)
        ]
    )
    out = [bytearray(doc) for doc in docs]
    for name, masked in found.items():
        at = 0
        for raw, d, start in places[name]:
            text = _decode(raw)
            here = masked[at : at + len(text)]
            at += len(text)
            if 0 not in here:
                continue
            for i, byte in enumerate(here):
                if byte == 0 and text[i] != 0:
                    lo, hi = _raw_span(raw, i)
                    out[d][start + lo : start + hi] = b"*" * (hi - lo)
    return [bytes(doc) for doc in out]


def _by_name(tokens: list[tuple[Any, ...]]) -> dict[bytes, list[Any]]:
    """String values by the field name before them, in order: each token is (content, colon,
    *rest); a token followed by a colon names the values after it. A value is its content, or
    (content, *rest) where rest is given."""
    values: dict[bytes, list[Any]] = {}
    name = b""
    for content, colon, *rest in tokens:
        if colon:
            name = content
        else:
            values.setdefault(name, []).append((content, *rest) if rest else content)
    return values


def _decode(raw: bytes) -> bytes:
    """A JSON string token's content as the UTF-8 bytes of its text."""
    if b"\\" not in raw:
        return raw
    try:
        text: str = orjson.loads(b'"' + raw + b'"')
        return text.encode("utf-8", "surrogatepass")
    except (orjson.JSONDecodeError, UnicodeEncodeError):
        return b"".join(text for text, _ in _walk(raw))


def _raw_span(raw: bytes, offset: int) -> tuple[int, int]:
    """The raw bytes of a token's content that wrote its decoded byte `offset`."""
    if b"\\" not in raw:
        return offset, offset + 1
    seen = 0
    for text, span in _walk(raw):
        seen += len(text)
        if offset < seen:
            return span
    return len(raw), len(raw)  # past the end: nothing of this token to mask


def _walk(raw: bytes) -> list[tuple[bytes, tuple[int, int]]]:
    """A token's content as (decoded bytes, raw span) steps: one per plain byte, one per escape
    (a surrogate pair's two escapes are one step, its character's four bytes)."""
    steps, i, n = [], 0, len(raw)
    while i < n:
        byte = raw[i]
        if byte != 0x5C or i + 1 >= n:
            steps.append((raw[i : i + 1], (i, i + 1)))
            i += 1
            continue
        letter = raw[i + 1]
        if letter != ord("u"):
            steps.append((_SIMPLE_ESCAPES.get(letter, raw[i + 1 : i + 2]), (i, i + 2)))
            i += 2
            continue
        unit = _hex(raw[i + 2 : i + 6])
        if unit is None:
            steps.append((raw[i : i + 2], (i, i + 2)))
            i += 2
            continue
        low = _hex(raw[i + 8 : i + 12]) if raw[i + 6 : i + 8] == b"\\u" else None
        if 0xD800 <= unit < 0xDC00 and low is not None and 0xDC00 <= low < 0xE000:
            char = chr(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00))
            steps.append((char.encode("utf-8"), (i, i + 12)))
            i += 12
        else:
            steps.append((chr(unit).encode("utf-8", "surrogatepass"), (i, i + 6)))
            i += 6
    return steps


def _hex(digits: bytes) -> int | None:
    if len(digits) != 4:
        return None
    try:
        return int(digits, 16)
    except ValueError:
        return None
