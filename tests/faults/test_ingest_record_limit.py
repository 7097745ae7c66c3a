"""A line longer than --max-record-bytes (a decompression bomb: a few hundred KB of zstd holding
one line of gigabytes) is one reject with its length, read past without being held: the ingest
stays within bounded memory and time, and the lines around it land."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import zstandard
from test_ingest_support import capture_record, line, run, table

MIB = 1024 * 1024
BOMB_LINE = 512 * MIB  # one line of zeros, about 16 KB compressed


# The CLI, then its own peak resident memory (VmHWM: counted from its exec, unlike the
# rusage of a child forked from a test process that had grown) on stdout.
_PEAK_RSS = """
import atexit, sys
def peak():
    with open("/proc/self/status") as status:
        sys.stdout.write(next(l for l in status if l.startswith("VmHWM:")))
atexit.register(peak)
sys.argv[0] = "cacheaudit"
from pipeline.__main__ import run
run()
"""


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
    done = subprocess.run(
        [sys.executable, "-c", _PEAK_RSS, "ingest", str(bomb), "--warehouse", str(wh),
         "--max-record-bytes", str(4 * MIB)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    elapsed = time.monotonic() - began
    stderr = done.stderr
    assert done.returncode == 0, stderr
    peak_kb = int(done.stdout.split()[1])
    print(f"bomb: {elapsed:.2f} s, peak RSS {peak_kb / 1024:.0f} MB")
    # Holding the line would take 512 MB at least (and the bytes copied around it).
    assert peak_kb < 300 * 1024
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
