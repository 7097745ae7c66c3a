"""A damaged compressed capture costs what cannot be read, not the file or the batch: the lines
before a gzip cut short land, the damage is one reject saying so, and a gzip that is garbage
after its header is one rejected file of a batch (or a one-line error alone), never "Aborted."
or an internal error."""

from __future__ import annotations

import gzip
import subprocess
import sys
import zlib
from pathlib import Path

from test_ingest_support import capture_record, line, run, table

TURNS = 6000


def _capture_lines() -> bytes:
    return b"".join(line(capture_record(t, record_id=f"r{t}")) for t in range(TURNS))


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_gzip_cut_in_half_lands_the_lines_before_the_cut_and_one_reject_says_why(
    tmp_path: Path,
) -> None:
    whole = gzip.compress(_capture_lines())
    half = whole[: len(whole) // 2]
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(half)
    good = tmp_path / "good.jsonl"
    good.write_bytes(line(capture_record(1, record_id="other")))
    # What can be decompressed from the half at all, by zlib directly: its whole lines.
    readable = zlib.decompressobj(31).decompress(half)
    whole_lines = readable.count(b"\n")
    assert 1000 < whole_lines < TURNS

    wh = tmp_path / "wh"
    done = _cli("ingest", str(cut), str(good), "--warehouse", str(wh))

    assert done.returncode == 0, done.stderr
    assert "Aborted" not in done.stderr and "internal error" not in done.stderr
    assert "cut short" in done.stderr
    result = run([cut, good], wh)  # already ingested: the manifest's counts
    assert [f.status for f in result.files] == ["unchanged", "unchanged"]
    rows = [r for r in table(wh, "requests") if r["source"].endswith("cut.jsonl.gz")]
    # At most one piece of decompressed output (128 KB, ~150 lines here) is lost at the cut.
    assert whole_lines - 160 <= len(rows) <= whole_lines
    assert sorted(r["source_index"] for r in rows) == list(range(1, len(rows) + 1))
    rejects = [r for r in table(wh, "rejects") if r["source"].endswith("cut.jsonl.gz")]
    # The line cut in the middle, and the damage itself (after it: nothing more was read).
    assert [r["source_index"] for r in rejects] == [len(rows) + 1, len(rows) + 2]
    assert "cut short" in rejects[1]["reason"]
    assert any(r["request_id"] == "other" for r in table(wh, "requests"))


def test_a_gzip_of_garbage_after_its_header_is_one_rejected_file_and_the_batch_lands(
    tmp_path: Path,
) -> None:
    garbage = tmp_path / "garbage.jsonl.gz"
    garbage.write_bytes(gzip.compress(b"x")[:10] + bytes(range(256)) * 40)
    good = tmp_path / "good.jsonl"
    good.write_bytes(line(capture_record(1, record_id="kept")))

    wh = tmp_path / "wh"
    batch = _cli("ingest", str(garbage), str(good), "--warehouse", str(wh))
    assert batch.returncode == 0, batch.stderr
    assert "internal error" not in batch.stderr
    assert [r["request_id"] for r in table(wh, "requests")] == ["kept"]
    (reject,) = table(wh, "rejects")
    assert reject["source"].endswith("garbage.jsonl.gz") and "damaged" in reject["reason"]

    alone = _cli("ingest", str(garbage), "--warehouse", str(tmp_path / "wh2"))
    assert alone.returncode == 3, alone.stderr
    assert alone.stderr.startswith("error: ") and "damaged" in alone.stderr
    assert "internal error" not in alone.stderr and "Traceback" not in alone.stderr
