"""Ingest correctness: idempotence, rejects with line numbers, the records invariant across
parallel chunks, compressed inputs, format detection and crash recovery."""

from __future__ import annotations

import gzip
import itertools
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from test_ingest_support import capture_record, har_document, har_entry, line, run, table

from pipeline import ingest as ingest_module
from pipeline import ingest_buffers, ingest_plan, ingest_pool
from pipeline.warehouse import Warehouse


def _counts(wh: Path) -> dict[str, int]:
    return {name: len(table(wh, name)) for name in ("requests", "segments", "rejects", "sources")}


def _good_capture(path: Path, n: int) -> Path:
    path.write_bytes(b"".join(line(capture_record(i, record_id=f"r{i}")) for i in range(n)))
    return path


def test_ingesting_the_same_file_twice_is_a_no_op_and_force_redoes_it_without_duplicates(
    tmp_path: Path,
) -> None:
    capture = _good_capture(tmp_path / "c.jsonl", 5)
    wh = tmp_path / "wh"
    first = run([capture], wh)
    after_first = _counts(wh)
    second = run([capture], wh)
    assert second.files[0].status == "unchanged"
    assert _counts(wh) == after_first
    forced = run([capture], wh, force=True)
    assert forced.files[0].status == "ingested"
    # 5 requests of 2 segments each (system + user), one manifest row, no rejects.
    assert first.total("accepted") == forced.total("accepted") == 5
    assert _counts(wh) == {"requests": 5, "segments": 10, "rejects": 0, "sources": 1}


def test_bad_lines_are_rejected_with_their_line_numbers_and_the_good_ones_land(
    tmp_path: Path,
) -> None:
    lines = [
        line(capture_record(0, record_id="r0")),  # 1 good
        b'{"schema_version": 1, "request": \n',  # 2 invalid JSON
        line(capture_record(2, record_id="r2", body=b'{"model": "x", "messages": [\xff]}')),  # 3
        b"\n",  # 4 blank: not a record
        line(capture_record(4, record_id="r4")),  # 5 good
        line(capture_record(5, record_id="r5")).rstrip(b"\n")[:-40],  # 6 truncated, no newline
    ]
    capture = tmp_path / "bad.jsonl"
    capture.write_bytes(b"".join(lines))
    wh = tmp_path / "wh"
    result = run([capture], wh)
    fr = result.files[0]
    assert (fr.records, fr.accepted, fr.rejected, fr.skipped) == (5, 2, 3, 0)
    assert sorted(r["request_id"] for r in table(wh, "requests")) == ["r0", "r4"]
    rejects = sorted(table(wh, "rejects"), key=lambda r: r["source_index"])
    assert [r["source_index"] for r in rejects] == [2, 3, 6]
    assert "invalid JSON" in rejects[0]["reason"]
    assert "UTF-8" in rejects[1]["reason"]
    assert "truncated" in rejects[2]["reason"]


def test_counts_and_line_numbers_hold_across_parallel_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = 60
    lines = [line(capture_record(i)) for i in range(n)]  # no record ids: ids carry line numbers
    lines[36] = b"not json\n"  # line 37
    lines[51] = b"\n"  # line 52: blank
    capture = tmp_path / "big.jsonl"
    capture.write_bytes(b"".join(lines))
    plain = capture.read_bytes()
    zst = tmp_path / "big.jsonl.zst"
    zst.write_bytes(zstandard.ZstdCompressor().compress(plain))
    monkeypatch.setattr(ingest_plan, "CHUNK_BYTES", 4000)  # about 3 lines per task
    monkeypatch.setattr(ingest_plan, "BATCH_BYTES", 4000)
    monkeypatch.setattr(ingest_module, "PARALLEL_MIN_BYTES", 0)
    assert len(ingest_plan.split_ranges(capture, capture.stat().st_size)) > 10
    for path in (capture, zst):
        wh = tmp_path / f"wh-{path.suffix}"
        result = run([path], wh, workers=2)
        fr = result.files[0]
        assert (fr.records, fr.accepted, fr.rejected, fr.skipped) == (n - 1, n - 2, 1, 0)
        rows = table(wh, "requests")
        expected = sorted(set(range(1, n + 1)) - {37, 52})
        assert sorted(r["source_index"] for r in rows) == expected
        # A row's prompt names its turn, and turn i sits on line i + 1.
        for r in rows:
            assert r["request_bytes"] == len(
                capture_record(r["source_index"] - 1)["request"]["body"]
            )
        assert [r["source_index"] for r in table(wh, "rejects")] == [37]


def test_gzip_and_zstd_captures_give_the_same_rows_as_the_plain_file(tmp_path: Path) -> None:
    plain = _good_capture(tmp_path / "c.jsonl", 4).read_bytes()
    gz = tmp_path / "c.jsonl.gz"
    gz.write_bytes(gzip.compress(plain))
    zst = tmp_path / "c.jsonl.zst"
    zst.write_bytes(zstandard.ZstdCompressor().compress(plain))
    for path in (gz, zst):
        wh = tmp_path / f"wh{path.suffix}"
        result = run([path], wh)
        assert result.files[0].format == "capture_jsonl"
        assert sorted(r["request_id"] for r in table(wh, "requests")) == ["r0", "r1", "r2", "r3"]
        assert sorted(r["input_tokens"] for r in table(wh, "requests")) == [1000, 1001, 1002, 1003]


def test_the_end_of_a_file_is_cut_in_smaller_ranges_so_the_workers_finish_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ingest_plan, "CHUNK_BYTES", 8000)
    capture = tmp_path / "c.jsonl"
    capture.write_bytes(b"".join(line(capture_record(i)) for i in range(300)))
    data = capture.read_bytes()
    for size in (len(data), 7000):  # many chunks; less than one chunk
        ranges = ingest_plan.split_ranges(capture, size)
        sizes = [end - start for start, end, _ in ranges]
        assert ranges[0][0] == 0 and ranges[-1][1] == size
        assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
        assert all(data[:start].count(b"\n") + 1 == n for start, _, n in ranges)
        assert len(ranges) >= 3  # even a file smaller than a chunk goes to every core
        assert max(sizes[-3:]) < 8000 // 2


def test_digests_become_the_same_hex_strings_whatever_the_batch_sizes() -> None:
    for n in (0, 1, 3, 1000, 20_000, 7, 50_000, 2):  # the shared offsets grow, then get sliced
        digests = bytearray(bytes(range(256)) * (n // 16 + 1))[: 16 * n]
        column = ingest_buffers._hex_column(digests, n)
        column.validate(full=True)
        assert column.to_pylist() == [bytes(digests[16 * i : 16 * i + 16]).hex() for i in range(n)]


def test_decompressed_blocks_reach_workers_as_files_that_are_removed_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The parent hands each block of decompressed lines to a worker as a file (not through the
    # pipe); the rows still name the compressed source, and no block file outlives the run.
    n = 40
    plain = b"".join(line(capture_record(i)) for i in range(n))
    gz = tmp_path / "c.jsonl.gz"
    gz.write_bytes(gzip.compress(plain))
    spill_root = tmp_path / "tmp"
    spill_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spill_root))
    monkeypatch.setattr(ingest_plan, "BATCH_BYTES", 4000)  # a few lines per block
    monkeypatch.setattr(ingest_module, "PARALLEL_MIN_BYTES", 0)
    spilled: list[str] = []
    spill = ingest_pool.WorkerPool._spill

    def counting(self: ingest_pool.WorkerPool, task: ingest_plan.Task) -> ingest_plan.Task:
        out = spill(self, task)
        assert out.spill is not None and out.lines is None
        spilled.append(out.spill)
        return out

    monkeypatch.setattr(ingest_pool.WorkerPool, "_spill", counting)
    result = run([gz], tmp_path / "wh", workers=2)
    fr = result.files[0]
    assert (fr.records, fr.accepted, fr.rejected) == (n, n, 0)
    rows = table(tmp_path / "wh", "requests")
    assert sorted(r["source_index"] for r in rows) == list(range(1, n + 1))
    assert {r["source"] for r in rows} == {str(gz)}
    assert len(spilled) > 5
    assert not any(Path(s).exists() for s in spilled)
    assert list(spill_root.iterdir()) == []


def test_the_format_is_detected_from_content_not_the_extension(tmp_path: Path) -> None:
    har_named_jsonl = tmp_path / "traffic.jsonl"
    har_named_jsonl.write_bytes(har_document([har_entry(1)]))
    jsonl_named_har = tmp_path / "traffic.har"
    jsonl_named_har.write_bytes(line(capture_record(1, record_id="x")))
    result = run([har_named_jsonl, jsonl_named_har], tmp_path / "wh")
    assert [f.format for f in result.files] == ["har", "capture_jsonl"]
    assert result.total("accepted") == 2


def test_parts_of_a_crashed_ingest_are_invisible_and_removed_by_the_next_ingest(
    tmp_path: Path,
) -> None:
    capture = _good_capture(tmp_path / "c.jsonl", 3)
    wh = tmp_path / "wh"
    run([capture], wh)
    key = next((wh / "sources").glob("*.parquet")).stem
    # Simulate a crash of another ingest: parts written, manifest never written.
    ghost = "0123456789abcdef"
    for src in (wh / "requests").rglob(f"{key}-*.parquet"):
        pq.write_table(pq.read_table(src), src.with_name(src.name.replace(key, ghost)))
    (wh / "rejects" / f".{ghost}-00-00000.parquet.999.tmp").write_bytes(b"half")
    assert len(table(wh, "requests")) == 3  # readers never see the ghost's rows
    other = _good_capture(tmp_path / "other.jsonl", 1)
    other.write_bytes(line(capture_record(9, record_id="r9")))
    run([other], wh)
    leftovers = [p for p in wh.rglob("*") if ghost in p.name]
    assert leftovers == []
    assert sorted(r["request_id"] for r in table(wh, "requests")) == ["r0", "r1", "r2", "r9"]


def test_a_crash_before_the_manifest_is_redone_by_the_next_ingest_of_that_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    capture = _good_capture(tmp_path / "c.jsonl", 3)
    wh = tmp_path / "wh"
    # an existing warehouse: a failed FIRST ingest removes the directory it made (a real crash,
    # a killed process, cannot; this one raises, so it must be into a directory that was there)
    wh.mkdir()

    def crash(self: Warehouse, row: dict[str, object], stem: str) -> None:
        raise RuntimeError("killed before the manifest")

    monkeypatch.setattr(Warehouse, "write_manifest", crash)
    with pytest.raises(RuntimeError):
        run([capture], wh)
    assert list((wh / "requests").rglob("*.parquet"))  # parts landed
    assert table(wh, "requests") == []  # but nobody sees them
    monkeypatch.undo()
    result = run([capture], wh)
    assert result.files[0].status == "ingested"
    assert len(table(wh, "requests")) == 3
    assert len(list((wh / "requests").rglob("*.parquet"))) == 1


def test_an_empty_manifest_table_means_an_empty_warehouse_for_readers(tmp_path: Path) -> None:
    wh = Warehouse(tmp_path / "wh")
    wh.ensure()
    part = tmp_path / "wh" / "rejects" / "feedfacecafebeef-00-00000.parquet"
    pq.write_table(pa.table({"source": ["x"]}), part)
    assert wh.files("rejects") == []
