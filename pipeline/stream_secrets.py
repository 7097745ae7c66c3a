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

Pure Python with no pyarrow, like the writer: the mitmproxy addon runs it in mitmproxy's own
environment.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from pipeline.redact import mask_secrets_each

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
    # each field name's text, put together (a name with one value is whole already: the
    # writer's masking sees it as it is)
    texts = {
        name: b"".join(_decode(raw) for raw in values)
        for name, values in _by_name(_STRING.findall(body)).items()
        if len(values) > 1
    }
    found = {  # field name -> its joined text, every masked byte a NUL
        name: masked
        for (name, joined), masked in zip(
            texts.items(), mask_secrets_each(list(texts.values()), fill=0), strict=True
        )
        if masked != joined
    }
    if not found:
        return body
    # Again, with each value's place, for the fields that hold a secret.
    places = _by_name([(t.group(1), t.group(2), t.start(1)) for t in _STRING.finditer(body)])
    out = bytearray(body)
    for name, masked in found.items():
        at = 0
        for raw, start in places[name]:
            text = _decode(raw)
            here = masked[at : at + len(text)]
            at += len(text)
            if 0 not in here:
                continue
            for i, byte in enumerate(here):
                if byte == 0 and text[i] != 0:
                    lo, hi = _raw_span(raw, i)
                    out[start + lo : start + hi] = b"*" * (hi - lo)
    return bytes(out)


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
