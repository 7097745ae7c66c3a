"""An uncompressed HAR is read by the workers, each its own byte range of whole entries, as a
capture JSONL is: the ingest process only finds where ranges start and counts their entries by
their `startedDateTime` keys, and sends no entries through the task queue. However the document
is cut, its rows are those of reading it as one stream (`har.iter_entries`); a range that does
not hold what was counted makes ingest read the file again as one stream."""

from __future__ import annotations

import gzip
import itertools
from pathlib import Path
from typing import Any

import pytest
from test_ingest_support import har_document, har_entry, run, table

from pipeline import ingest as ingest_module
from pipeline import ingest_plan, ingest_worker
from pipeline.errors import InputError
from pipeline.ingest_plan import plan
from pipeline.sources import har


def _entries() -> list[dict[str, Any]]:
    entries = [har_entry(i) for i in range(30)]
    entries[7] = har_entry(7, method="GET", url="https://x.example.com/a.png", mime="image/png")
    entries[20]["startedDateTime"] = "yesterday"  # unreadable: rejected at index 20
    entries[24] = har_entry(3)  # the same exchange as entry 3, in another range: two rows
    # Chrome writes its keys in order, startedDateTime after the request and the response
    entries[12] = dict(sorted(entries[12].items()))
    return entries


def _rows(wh: Path) -> dict[str, list[dict[str, Any]]]:
    requests = sorted(table(wh, "requests"), key=lambda r: r["source_index"])
    rejects = sorted(table(wh, "rejects"), key=lambda r: r["source_index"])
    segments = sorted(
        (r["request_id"], r["position"], r["segment_hash"]) for r in table(wh, "segments")
    )
    for row in rejects:
        del row["ingested_at"]
    return {"requests": requests, "rejects": rejects, "segments": [list(s) for s in segments]}


def _cut(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    monkeypatch.setattr(ingest_plan, "CHUNK_BYTES", chunk)
    monkeypatch.setattr(ingest_module, "PARALLEL_MIN_BYTES", 0)  # two workers, not one


def test_the_tasks_of_an_uncompressed_har_are_byte_ranges_with_no_entries_in_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "big.har"
    path.write_bytes(har_document(_entries(), pretty=True))
    size = path.stat().st_size
    monkeypatch.setattr(ingest_plan, "CHUNK_BYTES", 4000)
    tasks = list(plan(path, "har", "digest", size))
    assert len(tasks) > 3
    for task in tasks:
        assert task.items is None and task.lines is None and task.spill is None
        assert task.start is not None and task.end is not None and task.start < task.end
    data = path.read_bytes()
    for before, task in itertools.pairwise(tasks):  # each ends where the next starts: an entry
        assert before.end == task.start and data[task.start : task.start + 1] == b"{"
    assert tasks[-1].end == size and tasks[-1].entries is None  # the last runs to the end
    counted = [t.entries or 0 for t in tasks[:-1]]
    assert [t.first_lineno for t in tasks] == [0, *itertools.accumulate(counted)]
    assert sum(t.weight for t in tasks) == size  # progress reaches the file's size


def test_a_compressed_har_is_still_read_by_the_ingest_process_as_one_stream(
    tmp_path: Path,
) -> None:
    path = tmp_path / "big.har.gz"
    path.write_bytes(gzip.compress(har_document(_entries())))
    tasks = list(plan(path, "har", "digest", path.stat().st_size))
    assert [t.start for t in tasks] == [None] * len(tasks)
    assert sum(len(t.items or []) for t in tasks) == 30


def test_a_har_without_log_entries_is_refused_as_before(tmp_path: Path) -> None:
    path = tmp_path / "pages.har"
    path.write_bytes(b'{"log": {"version": "1.2", "pages": []}}')
    with pytest.raises(InputError, match=r"no log\.entries array found"):
        list(plan(path, "har", "digest", path.stat().st_size))


@pytest.mark.parametrize("pretty", [False, True])
def test_a_har_cut_into_many_ranges_read_by_two_workers_gives_the_rows_of_one_range(
    pretty: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "big.har"
    path.write_bytes(har_document(_entries(), pretty=pretty))
    whole = run([path], tmp_path / "one", workers=1)
    _cut(monkeypatch, 3000)
    assert len(list(plan(path, "har", "digest", path.stat().st_size))) > 5
    cut = run([path], tmp_path / "many", workers=2)
    counts = [(f.records, f.accepted, f.rejected, f.skipped) for f in (whole.files + cut.files)]
    assert counts == [(30, 28, 1, 1)] * 2
    one, many = _rows(tmp_path / "one"), _rows(tmp_path / "many")
    assert [r["source_index"] for r in one["requests"]] == sorted(set(range(30)) - {7, 20})
    assert [r["source_index"] for r in one["rejects"]] == [20]
    assert many == one


def test_a_range_not_holding_the_entries_counted_makes_ingest_read_the_har_again_as_one_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entries = _entries()
    del entries[15]["startedDateTime"]  # not counted: the entries after it would be misnumbered
    path = tmp_path / "odd.har"
    path.write_bytes(har_document(entries))
    whole = run([path], tmp_path / "one", workers=1)
    _cut(monkeypatch, 3000)
    tasks = list(plan(path, "har", "digest", path.stat().st_size))
    with pytest.raises(har.RangeMismatch):
        for task in tasks:
            list(ingest_worker._har_range_records(task))
    cut = run([path], tmp_path / "many", workers=2)
    counts = [(f.records, f.accepted, f.rejected, f.skipped) for f in (whole.files + cut.files)]
    assert counts == [(30, 27, 2, 1)] * 2
    assert _rows(tmp_path / "many") == _rows(tmp_path / "one")


STRAY = [b"x", b"{", b"}", b'"', b"[", b"]", b",", b"\\"]


def test_however_a_damaged_har_is_cut_its_ranges_give_the_streams_entries_or_say_they_cannot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = har_document([har_entry(t) for t in range(13)])
    path = tmp_path / "damaged.har"
    outcomes = {"same": 0, "read again": 0}
    for chunk, pos, byte in itertools.product(
        (800, 5000), range(doc.index(b'"entries"'), len(doc), 97), STRAY
    ):
        monkeypatch.setattr(ingest_plan, "CHUNK_BYTES", chunk)
        data = doc[:pos] + byte + doc[pos:]
        path.write_bytes(data)
        try:
            with path.open("rb") as fh:
                stream = _comparable(har.iter_entries(fh))
        except InputError:
            continue  # damage before log.entries: refused whole, as before
        ranges: list[tuple[int, Any]] = []
        try:
            for task in plan(path, "har", "digest", len(data)):
                assert task.start is not None and task.end is not None
                ranges.extend(
                    har.iter_range(
                        path, task.start, task.end, task.first_lineno, task.entries, task.anchors
                    )
                )
        except har.RangeMismatch:
            outcomes["read again"] += 1
            continue
        assert _comparable(ranges) == stream, (chunk, pos, byte)
        outcomes["same"] += 1
    assert outcomes["same"] > 1000 and outcomes["read again"] > 10


def _comparable(items: Any) -> list[tuple[int, Any]]:
    return [(i, (e.raw, e.reason) if isinstance(e, har.BadEntry) else e) for i, e in items]


def test_a_stray_quote_in_a_har_read_by_two_workers_is_still_one_reject(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = har_document([har_entry(t) for t in range(13)])
    pos = doc.index(b'T08:00:07.000Z"') + 1  # inside the 8th entry's start time
    path = tmp_path / "quote.har"
    path.write_bytes(doc[:pos] + b'"' + doc[pos:])
    _cut(monkeypatch, 2000)
    result = run([path], tmp_path / "wh", workers=2)
    fr = result.files[0]
    assert (fr.records, fr.accepted, fr.rejected) == (13, 12, 1)
    assert [r["source_index"] for r in table(tmp_path / "wh", "rejects")] == [7]
