"""Input files: detect the format from content, open compressed files, and yield records.

Formats: capture_jsonl (ours), har (HAR 1.2), otlp_json (OTLP/JSON trace export, one JSON
document per line as the file exporter writes). Each reader yields `Exchange` or `Reject`;
redaction has already happened inside the readers.
"""

from __future__ import annotations

import gzip
import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import zstandard

from pipeline.errors import InputError

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
FORMATS = ("capture_jsonl", "har", "otlp_json")
_FIRST_KEY = re.compile(rb'\{\s*"([^"\\]{1,64})"\s*:')


try:  # ISA-L inflates about 3x faster than zlib; gzip input is otherwise limited by it
    from isal.igzip import IGzipFile as _GzipFile
except ImportError:  # pragma: no cover - isal is a dependency; stay correct without it
    _GzipFile = gzip.GzipFile  # type: ignore[misc,assignment,unused-ignore]


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


# Names a directory walk takes as input (files named explicitly are read whatever their name).
CAPTURE_SUFFIXES = (".jsonl", ".ndjson", ".json", ".har", ".gz", ".zst")


def looks_like_capture(path: Path) -> bool:
    return path.suffix.lower() in CAPTURE_SUFFIXES


def compression_of(path: Path) -> str | None:
    with path.open("rb") as fh:
        head = fh.read(4)
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    return None


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
        stream = _OwningGzip(raw)  # type: ignore[assignment]
    elif kind == "zstd":
        reader = zstandard.ZstdDecompressor().stream_reader(raw, closefd=True)
        stream = io.BufferedReader(reader, buffer_size=1024 * 1024)  # type: ignore[arg-type,unused-ignore]
    return stream, raw


def _line_format(lines: list[bytes]) -> str | None:
    """The format of the first line that tells (the last may be cut short: still telling)."""
    for line in lines:
        if b'"resourceSpans"' in line[:4096]:
            return "otlp_json"
        if b'"schema_version"' in line:
            return "capture_jsonl"
    return None


def detect_format(path: Path) -> str:
    """capture_jsonl, har or otlp_json, from the first bytes of content (not the extension)."""
    if not path.exists():
        raise InputError(f"{path} does not exist")
    if path.is_dir():
        raise InputError(f"{path} is a directory", hint="pass the files, or a glob")
    try:
        with open_binary(path) as fh:
            head = fh.read(65536)
    except (OSError, zstandard.ZstdError) as exc:
        raise InputError(f"{path} cannot be read: {exc}") from exc
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not text:
        return "capture_jsonl"  # an empty capture is valid: zero records
    if not text.startswith(b"{"):
        # A damaged first line (a torn write, a stray log line) must not refuse the good lines
        # after it: the line readers reject it, so look for a recognisable line further on.
        later = _line_format(text.split(b"\n")[1:])
        if later is not None:
            return later
        raise InputError(
            f"{path} is not a capture JSONL, HAR or OTLP/JSON file",
            hint="expected JSON (optionally gzip/zstd compressed)",
        )
    first_key = _FIRST_KEY.match(text)
    key = first_key.group(1) if first_key else None
    # The first key decides when it is telling: a one-line HAR also contains "request".
    if key == b"log":
        return "har"
    if key == b"resourceSpans":
        return "otlp_json"
    first_line = text.split(b"\n", 1)[0]
    if b'"resourceSpans"' in first_line[:4096]:
        return "otlp_json"
    if b'"schema_version"' in first_line:
        return "capture_jsonl"
    if b'"log"' in text[:4096] and b'"entries"' in text:
        return "har"
    if b'"request"' in first_line:
        return "capture_jsonl"
    later = _line_format(text.split(b"\n")[1:])
    if later is not None:
        return later
    raise InputError(
        f"{path}: format not recognised",
        hint='capture JSONL lines have schema_version; HAR starts with {"log": ...}',
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
    raise InputError(f"unknown format {fmt!r}", hint=f"one of {', '.join(FORMATS)}")
