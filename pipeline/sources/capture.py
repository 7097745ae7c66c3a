"""Reader for our capture JSONL: whole files, or a byte range of one (for parallel ingest)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from pipeline.capture_format import RecordError, parse_line
from pipeline.records import Exchange, Reject
from pipeline.redact import redact_text
from pipeline.sources import open_binary


def excerpt(line: bytes) -> str:
    return redact_text(line[:200].decode("utf-8", "replace")).replace("\n", " ")


def read_line(line: bytes, source: str, lineno: int) -> Exchange | Reject | None:
    if not line.strip():
        return None  # blank lines are not records
    try:
        return parse_line(line, source, lineno)
    except RecordError as exc:
        return Reject(source, lineno, str(exc), excerpt(line))


def iter_capture(path: Path) -> Iterator[Exchange | Reject]:
    with open_binary(path) as fh:
        for lineno, line in enumerate(fh, start=1):
            item = read_line(line, str(path), lineno)
            if item is not None:
                yield item


def iter_capture_range(
    path: Path, start: int, end: int, first_lineno: int
) -> Iterator[Exchange | Reject]:
    """Lines of an uncompressed file between byte offsets (both on line boundaries)."""
    with path.open("rb") as fh:
        fh.seek(start)
        lineno = first_lineno
        pos = start
        while pos < end:
            line = fh.readline()
            if not line:
                break
            pos += len(line)
            item = read_line(line, str(path), lineno)
            if item is not None:
                yield item
            lineno += 1
