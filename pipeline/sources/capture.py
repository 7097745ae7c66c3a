"""Reader for our capture JSONL: whole files, or a byte range of one (for parallel ingest)."""

from __future__ import annotations

import errno
import mmap
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from pipeline.capture_format import RecordError, parse_line
from pipeline.records import Exchange, Reject
from pipeline.redact import (
    REDACTED,
    SECRET_HEADERS,
    SECRET_QUERY_PARAMS,
    cut,
    is_secret_name,
    redact_text,
)
from pipeline.sources import damage_of, open_binary

RANGE_BLOCK = 4 * 1024 * 1024

# A record that cannot be parsed is never redacted field by field, so its excerpt is: the value
# after a secret header name (capture `["cookie", "..."]`), every HAR `"value"` (headers and
# cookies) and secret query parameters are masked, besides key-shaped strings anywhere.
_NAMES = "|".join(re.escape(n) for n in sorted(SECRET_HEADERS, key=len, reverse=True))
# A value runs to its closing quote, escapes included: a JSON writer may send `/` as `\/`, and a
# value cut at the first backslash left the rest of a key on disk.
_JSON_STRING_BODY = r'(?:[^"\\]|\\.)*'
_SECRET_VALUE = re.compile(
    rf'(?i)((?<![\w-])(?:{_NAMES})\\?"\s*[,:]\s*(?:\\?"value\\?"\s*:\s*)?\\?"){_JSON_STRING_BODY}'
)
# HAR name/value objects (headers, cookies, query strings): every value, whatever its name.
_ANY_VALUE = re.compile(rf'(\\?"value\\?"\s*:\s*\\?"){_JSON_STRING_BODY}')
_PARAMS = "|".join(re.escape(n) for n in sorted(SECRET_QUERY_PARAMS, key=len, reverse=True))
_SECRET_PARAM = re.compile(rf"(?i)([?&](?:{_PARAMS})=)[^&\"\s#]*")


# OTLP attributes carry a header as `{"key": "http.request.header.x-api-key", "value":
# {"stringValue": "..."}}`, or an arrayValue of such strings: every string value between a key
# named for a credential (its last dotted part) and the next key is masked.
_OTLP_KEY = re.compile(rf'\\?"key\\?"\s*:\s*\\?"({_JSON_STRING_BODY})\\?"')
_STRING_VALUE = re.compile(rf'(\\?"stringValue\\?"\s*:\s*\\?"){_JSON_STRING_BODY}')


def _mask_otlp_secrets(text: str) -> str:
    keys = list(_OTLP_KEY.finditer(text))
    out, pos = [], 0
    for i, key in enumerate(keys):
        if not is_secret_name(key.group(1).rsplit(".", 1)[-1]):
            continue
        end = keys[i + 1].start() if i + 1 < len(keys) else len(text)
        out += [text[pos : key.end()], _STRING_VALUE.sub(rf"\1{REDACTED}", text[key.end() : end])]
        pos = end
    return "".join(out) + text[pos:] if out else text


def redact_excerpt(raw: bytes, limit: int = 200) -> str:
    """At most `limit` characters of an unreadable record, with secrets masked."""
    text = cut(raw, limit * 2).decode("utf-8", "replace")  # no key cut in two at its end
    if "stringValue" in text:
        text = _mask_otlp_secrets(text)
    for pattern in (_SECRET_VALUE, _ANY_VALUE, _SECRET_PARAM):
        text = pattern.sub(rf"\1{REDACTED}", text)
    return redact_text(text)[:limit].replace("\n", " ")


def excerpt(line: bytes) -> str:
    return redact_excerpt(line)


UTF8_BOM = b"\xef\xbb\xbf"


def without_bom(line: bytes, lineno: int) -> bytes:
    """The line without the UTF-8 byte order mark some editors and Windows tools write at the
    start of a file: not JSON, and format detection already looks past it."""
    return line[len(UTF8_BOM) :] if lineno == 1 and line.startswith(UTF8_BOM) else line


NO_LIMIT = 1 << 62


class LongLine(bytes):
    """Stands for a line longer than the record limit that `iter_line_range` read past: its
    first bytes (for the excerpt), and in `size` how long it was."""

    size: int = 0


def too_long(size: int, limit: int) -> str:
    """The reject reason of a line longer than the limit."""
    return (
        f"record too long: {size} bytes, above the limit of {limit} bytes"
        " (--max-record-bytes); read past, not kept"
    )


def long_line_reject(line: bytes, source: str, index: int, limit: int) -> Reject | None:
    """The reject of a line above `limit` (or one already read past), else None."""
    if type(line) is LongLine:
        return Reject(source, index, too_long(line.size, limit), excerpt(line))
    if len(line) > limit:
        return Reject(source, index, too_long(len(line), limit), excerpt(line))
    return None


def read_line(
    line: bytes, source: str, lineno: int, limit: int = NO_LIMIT
) -> Exchange | Reject | None:
    if type(line) is not bytes or len(line) > limit:
        return long_line_reject(line, source, lineno, limit)
    line = without_bom(line, lineno)
    if not line.strip():
        return None  # blank lines are not records
    try:
        return parse_line(line, source, lineno)
    except RecordError as exc:
        return Reject(source, lineno, str(exc), excerpt(line))


def iter_capture(path: Path) -> Iterator[Exchange | Reject]:
    with open_binary(path) as fh:
        lineno = 0
        for lineno, line in enumerate(fh, start=1):
            item = read_line(line, str(path), lineno)
            if item is not None:
                yield item
        damage = damage_of(fh)
        if damage is not None:
            yield Reject(str(path), lineno + 1, damage, "")


def iter_line_range(path: Path, start: int, end: int, limit: int = NO_LIMIT) -> Iterator[bytes]:
    """Lines of an uncompressed file between byte offsets (both on line boundaries); nothing
    past `end` is read, even if the file has grown since (a capture still being written).

    The range is mapped, not read, in windows of RANGE_BLOCK, and each line is sliced out of
    the mapping with find (memchr): one copy per line instead of two (read into a fresh block,
    then slice), which cost 4x the CPU on capture lines of tens of KB. A line that crosses a
    window's end is carried into the next. Each window is unmapped before the next is mapped,
    so at most one window of the file's pages counts towards this process's memory.

    A line longer than `limit` is not carried: it is read past and stands as a `LongLine`."""
    with path.open("rb", buffering=0) as fh:
        fd = fh.fileno()
        end = min(end, os.fstat(fd).st_size)  # a file cut short since it was planned
        carry = b""
        long: LongLine | None = None  # a line above the limit, being read past
        pos = start - start % mmap.ALLOCATIONGRANULARITY
        while pos < end:
            length = min(RANGE_BLOCK, end - pos)
            if os.fstat(fd).st_size < pos + length:
                # Cut short since it was hashed: touching a mapped page past its end kills the
                # process (SIGBUS). The ingest rejects the file (`ingest.changed_under_us`).
                raise OSError(errno.ESPIPE, "the file was cut short while it was read")
            with mmap.mmap(fd, length, offset=pos, access=mmap.ACCESS_READ) as window:
                cur = max(start - pos, 0)
                if long is not None:
                    nl = window.find(b"\n", cur)
                    if nl < 0:
                        long.size += length - cur
                        pos += length
                        continue
                    long.size += nl + 1 - cur
                    yield long
                    long, cur = None, nl + 1
                if carry:
                    nl = window.find(b"\n", cur)
                    if nl < 0:
                        carry += window[cur:]
                        if len(carry) > limit:
                            long = LongLine(carry[:400])
                            long.size, carry = len(carry), b""
                        pos += length
                        continue
                    yield carry + window[cur : nl + 1]
                    carry, cur = b"", nl + 1
                while (nl := window.find(b"\n", cur)) >= 0:
                    yield window[cur : nl + 1]
                    cur = nl + 1
                if cur < length:
                    carry = window[cur:]
            pos += length
        if long is not None:
            yield long
        elif carry:
            yield carry


def iter_capture_lines(
    lines: Iterable[bytes], source: str, first_lineno: int, limit: int = NO_LIMIT
) -> Iterator[Exchange | Reject]:
    """Records of consecutive capture lines, the first being line `first_lineno`."""
    for lineno, line in enumerate(lines, start=first_lineno):
        item = read_line(line, source, lineno, limit)
        if item is not None:
            yield item


def iter_capture_range(
    path: Path, start: int, end: int, first_lineno: int
) -> Iterator[Exchange | Reject]:
    """Records of the lines of an uncompressed file between byte offsets (on line boundaries)."""
    return iter_capture_lines(iter_line_range(path, start, end), str(path), first_lineno)
