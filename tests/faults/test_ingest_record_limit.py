"""A line longer than --max-record-bytes (a decompression bomb: a few hundred KB of zstd holding
one line of gigabytes) is one reject with its length, read past without being held: the ingest
stays within bounded memory and time, and the lines around it land."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import zstandard
from test_ingest_support import capture_record, line, run, table

MIB = 1024 * 1024
BOMB_LINE = 512 * MIB  # one line of zeros, about 16 KB compressed


def _write_bomb(path: Path) -> None:
    with path.open("wb") as raw, zstandard.ZstdCompressor(level=3).stream_writer(raw) as out:
        out.write(line(capture_record(1, record_id="before")))
        zeros = b"0" * MIB
        for _ in range(BOMB_LINE // MIB):
            out.write(zeros)
        out.write(b"\n")
        out.write(line(capture_record(2, record_id="after")))


def test_a_zstd_bomb_of_one_long_line_is_one_reject_in_bounded_memory_and_time(
    tmp_path: Path,
) -> None:
    bomb = tmp_path / "bomb.jsonl.zst"
    _write_bomb(bomb)
    assert bomb.stat().st_size < 200 * 1024
    wh = tmp_path / "wh"
    began = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "ingest", str(bomb), "--warehouse", str(wh),
         "--max-record-bytes", str(4 * MIB)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.monotonic() - began
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    assert os.waitstatus_to_exitcode(status) == 0, stderr
    print(f"bomb: {elapsed:.2f} s, max RSS {usage.ru_maxrss / 1024:.0f} MB")
    # Holding the line would take 512 MB at least (and the bytes copied around it).
    assert usage.ru_maxrss < 300 * 1024  # kB
    assert elapsed < 30
    assert "3 records = 2 accepted + 1 rejected + 0 skipped" in stderr
    assert sorted(r["request_id"] for r in table(wh, "requests")) == ["after", "before"]
    (reject,) = table(wh, "rejects")
    assert reject["source_index"] == 2
    assert reject["reason"].startswith(f"record too long: {BOMB_LINE + 1} bytes")


def test_an_uncompressed_line_above_the_limit_is_one_reject_with_its_length(
    tmp_path: Path,
) -> None:
    capture = tmp_path / "long.jsonl"
    long = capture_record(2, record_id="long")
    long["hints"]["tags"] = ["y" * (9 * MIB)]  # 9 MB: crosses the reader's 4 MB windows
    long_line = line(long)
    capture.write_bytes(
        line(capture_record(1, record_id="a"))
        + long_line
        + line(capture_record(3, record_id="b"))
        + b'{"short but": "too long for the limit"}' * 10
        + b"\n"
    )
    wh = tmp_path / "wh"
    fr = run([capture], wh, workers=1, max_record_bytes=2 * MIB).files[0]
    assert (fr.records, fr.accepted, fr.rejected) == (4, 2, 2)
    rejects = {r["source_index"]: r["reason"] for r in table(wh, "rejects")}
    assert rejects[2].startswith(f"record too long: {len(long_line)} bytes")
    assert not rejects[4].startswith("record too long")  # 400 bytes: read, not JSON
    small = run([capture], tmp_path / "wh2", workers=1, max_record_bytes=300).files[0]
    assert (small.records, small.accepted, small.rejected) == (4, 0, 4)
