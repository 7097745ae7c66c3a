"""Input files: detect the format from content, open compressed files, and yield records.

Formats: capture_jsonl (ours), har (HAR 1.2), otlp_json (OTLP/JSON trace export, one JSON
document per line as the file exporter writes), vcr_cassette (vcrpy / pytest-recording
cassettes, YAML or JSON), mitm_flows (`mitmdump -w`, read with mitmproxy's own reader).
Each reader yields `Exchange` or `Reject`; redaction has already happened inside the readers.
"""

from __future__ import annotations

import gzip
import io
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, cast

import orjson
import zstandard

from pipeline.errors import InputError

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
FORMATS = ("capture_jsonl", "har", "otlp_json", "vcr_cassette", "mitm_flows")
_FIRST_KEY = re.compile(rb'\{\s*"([^"\\]{1,64})"\s*:')
_KEY_FORMATS = {b"resourceSpans": "otlp_json", b"schema_version": "capture_jsonl"}
HEAD_BYTES = 65536  # read to judge the first line
# When the first line does not tell, later lines are judged: a whole line must parse as a
# record's JSON object. At most SNIFF_LINES lines, SNIFF_BYTES in all; a line longer than
# SNIFF_LINE_BYTES is judged by its first key.
SNIFF_LINES = 64
SNIFF_LINE_BYTES = 8 * 1024 * 1024
SNIFF_BYTES = 32 * 1024 * 1024


try:  # ISA-L inflates about 3x faster than zlib; gzip input is otherwise limited by it
    from isal.igzip import IGzipFile as _GzipFile
    from isal.igzip_lib import IsalError

    # The stub declares IsalError as an instance; it is the class of inflate errors.
    _INFLATE_ERRORS: tuple[type[BaseException], ...] = (cast(type[BaseException], IsalError),)
except ImportError:  # pragma: no cover - isal is a dependency; stay correct without it
    _GzipFile = gzip.GzipFile  # type: ignore[misc,assignment,unused-ignore]
    _INFLATE_ERRORS = ()


class _OwningGzip(_GzipFile):
    """A gzip reader that closes the file it reads from (GzipFile(fileobj=...) does not)."""

    def __init__(self, raw: IO[bytes]) -> None:
        super().__init__(fileobj=raw, mode="rb")  # type: ignore[no-untyped-call,unused-ignore]
        self._raw = raw

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()


# A file damaged past its first lines: sniffing stops there (the reader reports it).
_SNIFF_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    EOFError,
    zstandard.ZstdError,
    *_INFLATE_ERRORS,
)


# Names a directory walk takes as input (files named explicitly are read whatever their name).
CAPTURE_SUFFIXES = (".jsonl", ".ndjson", ".json", ".har", ".yaml", ".yml", ".gz", ".zst")


def looks_like_capture(path: Path) -> bool:
    return path.suffix.lower() in CAPTURE_SUFFIXES


def compression_of(path: Path) -> str | None:
    with path.open("rb") as fh:
        head = fh.read(4)
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    # pzstd (and zstd -T with --format options) starts with a skippable frame, 0x184D2A5?
    if len(head) == 4 and int.from_bytes(head, "little") & 0xFFFFFFF0 == _SKIPPABLE:
        return "zstd"
    return None


# Errors of a damaged compressed stream: cut short (EOFError), garbage in it (zlib/ISA-L/zstd
# errors; gzip's bad header is an OSError).
_DAMAGE_ERRORS: tuple[type[BaseException], ...] = (
    EOFError,
    OSError,
    zstandard.ZstdError,
    *_INFLATE_ERRORS,
)
DAMAGE_PIECE = 128 * 1024  # decompressed per call: what a damaged stream can lose before its cut


class _Tolerant(io.RawIOBase):
    """A decompressed stream that ends, instead of raising, where the compressed file is
    damaged (cut short, garbage), and says why in `damage`: the lines before the damage are
    read like any others (a gzip cut in half holds half its records), and the readers turn
    `damage` into one reject. Read in pieces of DAMAGE_PIECE: a decompressor that fails loses
    the piece it was producing, so this bounds what the damage costs beyond itself."""

    def __init__(self, stream: IO[bytes], kind: str) -> None:
        super().__init__()
        self.stream, self.kind = stream, kind
        self.damage: str | None = None
        self.offset = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.damage is not None:
            return 0
        try:
            piece = self.stream.read1(min(len(buffer), DAMAGE_PIECE))  # type: ignore[attr-defined]
        except _DAMAGE_ERRORS as exc:
            what = "cut short" if isinstance(exc, EOFError) else "damaged"
            self.damage = (
                f"{self.kind} stream {what} after {self.offset} decompressed bytes"
                f" ({type(exc).__name__}: {str(exc)[:120]}); nothing after that could be read"
            )
            return 0
        n = len(piece)
        buffer[:n] = piece
        self.offset += n
        return n

    def close(self) -> None:
        try:
            self.stream.close()
        finally:
            super().close()


class _CheckedZstd:
    """zstandard's stream_reader over a .zst file, which ends without a word where the file ends
    inside a frame (a capture cut short lost its last records silently, where gzip says so):
    at the end this one walks the file's frame and block headers (a read of 3 bytes per block of
    at most 128 KB decompressed: 10 ms for a 1 GB capture, nothing decompressed) and raises
    EOFError when the last frame is not whole."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.reader = zstandard.ZstdDecompressor().stream_reader(raw, closefd=True)
        self.checked = False

    def read1(self, size: int = -1) -> bytes:
        piece: bytes = self.reader.read1(size)
        if not piece and not self.checked:
            self.checked = True
            if (cut := zstd_cut(self.raw.fileno())) is not None:
                raise EOFError(cut)
        return piece

    def close(self) -> None:
        self.reader.close()  # type: ignore[no-untyped-call]


_ZSTD_MAGIC = 0xFD2FB528
_SKIPPABLE = 0x184D2A50  # skippable frames: this with the low 4 bits free


def zstd_cut(fd: int) -> str | None:
    """Where a zstd file ends inside a frame (RFC 8878, section 3.1), or None when every frame
    is whole. Reads only frame and block headers."""
    size, at = os.fstat(fd).st_size, 0
    while at < size:
        head = os.pread(fd, 14, at)  # the longest frame header
        if len(head) < 8:
            return f"the file ends inside a zstd frame header at byte {at}"
        magic = int.from_bytes(head[:4], "little")
        if magic & 0xFFFFFFF0 == _SKIPPABLE:
            at += 8 + int.from_bytes(head[4:8], "little")
            continue
        if magic != _ZSTD_MAGIC:
            return None  # not a frame: the decompressor reports that itself
        descriptor = head[4]
        single, checksum = descriptor >> 5 & 1, descriptor >> 2 & 1
        fcs = (0, 2, 4, 8)[descriptor >> 6]
        fcs = 1 if single and fcs == 0 else fcs
        at += 5 + (0 if single else 1) + (0, 1, 2, 4)[descriptor & 3] + fcs
        while True:
            block = os.pread(fd, 3, at)
            if len(block) < 3:
                return f"the file ends inside a zstd frame at byte {at}"
            value = int.from_bytes(block, "little")
            kind, length = value >> 1 & 3, value >> 3
            at += 3 + (1 if kind == 1 else length)  # an RLE block holds one byte
            if value & 1:  # the frame's last block
                break
        at += 4 * checksum
        if at > size:
            return f"the file ends inside a zstd frame at byte {size}"
    return None


def damage_of(stream: IO[bytes]) -> str | None:
    """Why a stream from `open_binary`/`open_counted` ended early (a damaged compressed file),
    or None when it ended where the file does."""
    raw = getattr(stream, "raw", None)
    return raw.damage if isinstance(raw, _Tolerant) else None


def open_binary(path: Path) -> IO[bytes]:
    """The file's decompressed bytes as a stream (bounded memory for any size)."""
    return open_counted(path)[0]


def open_counted(path: Path) -> tuple[IO[bytes], IO[bytes]]:
    """(decompressed stream, raw file): `raw.tell()` is how much of the file was consumed, for
    progress. Closing the stream closes the raw file."""
    kind = compression_of(path)
    raw = path.open("rb")
    stream: IO[bytes] = raw
    if kind == "gzip":
        inner: Any = _OwningGzip(raw)
    elif kind == "zstd":
        inner = _CheckedZstd(raw)
    else:
        return stream, raw
    stream = io.BufferedReader(_Tolerant(inner, kind), buffer_size=1024 * 1024)
    return stream, raw


def _object_format(obj: object, first: bool) -> str | None:
    """The format a line's parsed JSON names by its keys. Any line: `resourceSpans` (OTLP) or
    `schema_version` (capture). The first line may also be a one-line HAR (`log`) or a capture
    record written without `schema_version` (`request`)."""
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("resourceSpans"), list):
        return "otlp_json"
    if "schema_version" in obj:
        return "capture_jsonl"
    if first and isinstance(obj.get("log"), dict):
        return "har"
    if first and isinstance(obj.get("request"), dict):
        return "capture_jsonl"
    return None


def _parse_object(line: bytes) -> object:
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return None


def _looks_like_har(text: bytes) -> bool:
    return b'"log"' in text[:4096] and b'"entries"' in text


def _first_line_format(text: bytes, cut: bool) -> str | None:
    """The format the first line tells (text starts with `{`); `cut`: the head read may end
    inside it. None: look at the lines after it."""
    first_key = _FIRST_KEY.match(text)
    key = first_key.group(1) if first_key else None
    # The first key decides when it is telling: a one-line HAR also contains "request".
    if key == b"log":
        return "har"
    line, newline, _ = text.partition(b"\n")
    if newline or not cut:
        # The whole line is in hand: it tells only if it parses as a record's JSON object.
        obj = _parse_object(line)
        if obj is not None:
            return _object_format(obj, first=True)
        if _looks_like_har(text):
            return "har"  # a pretty-printed HAR whose first key is not "log"
        return None  # a damaged first line: the line readers reject it
    # A first line longer than the head (a capture record with a large body, a batch of
    # spans): judged by how it starts.
    if key == b"resourceSpans" or b'"resourceSpans"' in line[:4096]:
        return "otlp_json"
    if b'"schema_version"' in line:
        return "capture_jsonl"
    if _looks_like_har(text):
        return "har"
    if b'"request"' in line:
        return "capture_jsonl"
    return None


def _sniff_lines(fh: IO[bytes]) -> Iterator[tuple[bytes, bool]]:
    """(line, whole): the file's lines, at most SNIFF_LINE_BYTES of each (whole: all of it was
    read), until SNIFF_BYTES have been read."""
    budget = SNIFF_BYTES
    while budget > 0:
        limit = min(budget, SNIFF_LINE_BYTES)
        line = fh.readline(limit)
        if not line:
            return
        budget -= len(line)
        yield line, line.endswith(b"\n") or len(line) < limit  # shorter: the end of the file
        while not line.endswith(b"\n") and budget > 0:  # skip the rest of a long line
            line = fh.readline(min(budget, SNIFF_LINE_BYTES))
            if not line:
                return
            budget -= len(line)


def _later_format(path: Path) -> str | None:
    """The format of the first line after the first that is a record: a whole line must parse
    as a JSON object with the format's key (text or a log that merely mentions
    "resourceSpans" is not OTLP); a line too long to parse here must start with that key."""
    try:
        with open_binary(path) as fh:
            for n, (line, whole) in enumerate(_sniff_lines(fh)):
                if n > SNIFF_LINES:
                    break
                line = line.strip()
                if n == 0 or not line.startswith(b"{"):
                    continue  # the first line was judged already
                if whole:
                    kind = _object_format(_parse_object(line), first=False)
                else:
                    first_key = _FIRST_KEY.match(line)
                    kind = _KEY_FORMATS.get(first_key.group(1)) if first_key else None
                if kind is not None:
                    return kind
    except _SNIFF_ERRORS:
        pass  # damaged further on: judged by what could be read; the reader says the rest
    return None


def refuse_streams(paths: list[Path]) -> None:
    """A pipe (`/dev/stdin`, `<(zcat ...)`) or a device is refused: ingest hashes a file, then
    reads it again (several workers at once); a stream would be consumed by the first look."""
    for path in paths:
        if path.exists() and not path.is_file() and not path.is_dir():
            raise InputError(
                f"{path} is not a regular file (a pipe or a device): ingest needs a file it can"
                " read more than once",
                hint="write the stream to a file first (`... > capture.jsonl`) and ingest that;"
                " .gz and .zst files are read as they are",
            )


# mitmproxy's flow files are tnetstrings: each flow a dict written `<length>:<items>}`, whose
# items are tnetstrings too (`4:type;4:http;`, `7:version;...`).
_TNETSTRING_DICT = re.compile(rb"\d{1,10}:\d{1,10}:[a-z_]{1,40};")


def _looks_like_mitm_flows(text: bytes) -> bool:
    return _TNETSTRING_DICT.match(text) is not None and (
        b"4:type;" in text[:65536] or b"7:version;" in text[:65536]
    )


def detect_format(path: Path) -> str:
    """capture_jsonl, har, otlp_json, vcr_cassette or mitm_flows, from the first bytes of
    content (not the extension)."""
    if not path.exists():
        raise InputError(f"{path} does not exist")
    if path.is_dir():
        raise InputError(f"{path} is a directory", hint="pass the files, or a glob")
    refuse_streams([path])
    try:
        with open_binary(path) as fh:
            head = fh.read(HEAD_BYTES)
            damage = damage_of(fh)
    except (OSError, zstandard.ZstdError) as exc:
        raise InputError(f"{path} cannot be read: {exc}") from exc
    if damage is not None and not head.strip():
        raise InputError(f"{path} cannot be read: {damage}")
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not text:
        return "capture_jsonl"  # an empty capture is valid: zero records
    from pipeline.sources.vcr import looks_like_cassette

    if looks_like_cassette(text):
        return "vcr_cassette"
    if text.startswith(b"{"):
        kind = _first_line_format(text, cut=len(head) == HEAD_BYTES)
        if kind is not None:
            return kind
    # A damaged first line (a torn write, a stray log line) must not refuse the good lines
    # after it: the line readers reject it, so look for a record further on.
    later = _later_format(path)
    if later is not None:
        return later
    if _looks_like_mitm_flows(text):
        from pipeline.sources.mitm import not_readable, reader

        if reader() is None:
            raise not_readable(path)
        return "mitm_flows"
    if text.startswith(b"{"):
        raise InputError(
            f"{path}: format not recognised",
            hint='capture JSONL lines have schema_version; HAR starts with {"log": ...};'
            ' OTLP/JSON is one {"resourceSpans": ...} export per line (not pretty-printed)',
        )
    raise InputError(
        f"{path} is not a capture JSONL, HAR, OTLP/JSON file or VCR cassette",
        hint="expected JSON, or a YAML cassette (optionally gzip/zstd compressed)",
    )


def iter_source(path: Path, fmt: str) -> Iterator[object]:
    """Every record of a file, in order: Exchange or Reject."""
    if fmt == "capture_jsonl":
        from pipeline.sources.capture import iter_capture

        return iter_capture(path)
    if fmt == "har":
        from pipeline.sources.har import iter_har

        return iter_har(path)
    if fmt == "otlp_json":
        from pipeline.sources.otlp import iter_otlp  # type: ignore[import-not-found,unused-ignore]

        result: Iterator[object] = iter_otlp(path)
        return result
    if fmt == "vcr_cassette":
        from pipeline.sources.vcr import iter_vcr

        return iter_vcr(path)
    if fmt == "mitm_flows":
        from pipeline.sources.mitm import iter_mitm

        return iter_mitm(path)
    raise InputError(f"unknown format {fmt!r}", hint=f"one of {', '.join(FORMATS)}")
