"""A file that changes while it is ingested (deleted, cut short, rewritten) is one reject with
the reason, and the rest of the batch lands; a file that only grows (a capture still being
written) is ingested up to what was hashed, as before. The change is made from the progress
callback, which runs once every file is hashed and planned, before any record is read."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from test_ingest_support import capture_record, line, run, table

from pipeline.ingest import PARALLEL_MIN_BYTES


def _capture(path: Path, prefix: str, n: int, pad: int = 0) -> Path:
    records = [capture_record(t, record_id=f"{prefix}{t}") for t in range(n)]
    for r in records:
        r["hints"]["tags"] = ["x" * pad] if pad else []
    path.write_bytes(b"".join(line(r) for r in records))
    return path


def _once(change: Callable[[], None]) -> Callable[[int, int], None]:
    done: list[bool] = []

    def progress(_done: int, _total: int) -> None:
        if not done:
            done.append(True)
            change()

    return progress


def _cut(path: Path) -> Callable[[], None]:
    return lambda: os.truncate(path, path.stat().st_size // 2)


def _delete(path: Path) -> Callable[[], None]:
    return lambda: path.unlink()


def _rewrite(path: Path) -> Callable[[], None]:
    def change() -> None:
        st = path.stat()
        path.write_bytes(path.read_bytes().replace(b"question", b"QUESTION"))  # same size
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))

    return change


@pytest.mark.parametrize(
    ("change", "reason"),
    [(_cut, "cut short"), (_delete, "deleted"), (_rewrite, "rewritten")],
)
@pytest.mark.parametrize("workers", [1, 2])
def test_a_file_changed_during_ingest_is_one_reject_and_the_batch_lands(
    tmp_path: Path, change: Callable[[Path], Callable[[], None]], reason: str, workers: int
) -> None:
    pad = 3000 if workers > 1 else 0  # big enough for the worker processes
    good = _capture(tmp_path / "good.jsonl", "g", 2000, pad)
    victim = _capture(tmp_path / "victim.jsonl", "v", 2000, pad)
    if workers > 1:
        assert good.stat().st_size + victim.stat().st_size > PARALLEL_MIN_BYTES
    wh = tmp_path / "wh"
    result = run([good, victim], wh, workers=workers, progress=_once(change(victim)))
    first, second = result.files
    assert (first.records, first.accepted, first.rejected) == (2000, 2000, 0)
    assert (second.records, second.accepted, second.rejected) == (1, 0, 1)
    ids = {r["request_id"] for r in table(wh, "requests")}
    assert ids == {f"g{t}" for t in range(2000)}  # nothing of the changed file
    (reject,) = table(wh, "rejects")
    assert reject["source"] == str(victim) and reason in reject["reason"]
    if victim.exists():  # ingested again as it is now: read in full
        again = run([victim], wh, workers=1).files[0]
        assert again.status == "ingested" and again.accepted > 0
        assert again.records == again.accepted + again.rejected  # a cut leaves a torn line


def test_a_capture_that_grows_during_ingest_is_read_up_to_what_was_hashed(
    tmp_path: Path,
) -> None:
    growing = _capture(tmp_path / "growing.jsonl", "g", 50)

    def append() -> None:
        with growing.open("ab") as fh:
            fh.write(line(capture_record(99, record_id="late")))

    fr = run([growing], tmp_path / "wh", progress=_once(append)).files[0]
    assert (fr.status, fr.records, fr.accepted) == ("ingested", 50, 50)
