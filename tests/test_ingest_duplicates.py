"""The same exchange is counted once, whatever file it arrives in; a stray or damaged file in a
batch is a reject, not the end of the batch."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from test_ingest_support import capture_record, har_document, har_entry, line, run, table

from pipeline.errors import InputError
from pipeline.ingest import PARALLEL_MIN_BYTES


def _capture(path: Path, ids: range, *, pad: int = 0) -> Path:
    records = [capture_record(i, record_id=f"r{i}") for i in ids]
    if pad:  # a long tag makes the file big enough for the parallel path
        for r in records:
            r["tags"] = ["x" * pad]
    path.write_bytes(b"".join(line(r) for r in records))
    return path


def _ids(wh: Path) -> list[str]:
    return sorted(r["request_id"] for r in table(wh, "requests"))


def _segment_keys(wh: Path) -> list[tuple[str, int]]:
    return sorted((r["request_id"], r["position"]) for r in table(wh, "segments"))


def test_a_compressed_copy_of_an_ingested_capture_adds_no_rows(tmp_path: Path) -> None:
    capture = _capture(tmp_path / "c.jsonl", range(6))
    wh = tmp_path / "wh"
    run([capture], wh)
    before = (_ids(wh), _segment_keys(wh))
    copy = tmp_path / "c.jsonl.gz"
    copy.write_bytes(gzip.compress(capture.read_bytes()))
    result = run([copy], wh)
    fr = result.files[0]
    assert (fr.records, fr.accepted, fr.skipped, fr.duplicates) == (6, 0, 6, 6)
    assert (_ids(wh), _segment_keys(wh)) == before


def test_overlapping_captures_keep_each_request_once_and_the_earlier_copy(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    run([_capture(tmp_path / "a.jsonl", range(0, 6))], wh)
    result = run([_capture(tmp_path / "b.jsonl", range(4, 10))], wh)
    assert (result.files[0].accepted, result.files[0].duplicates) == (4, 2)
    assert _ids(wh) == sorted(f"r{i}" for i in range(10))
    kept = {r["request_id"]: r["source"] for r in table(wh, "requests")}
    assert kept["r4"].endswith("a.jsonl") and kept["r5"].endswith("a.jsonl")
    assert len(_segment_keys(wh)) == len(set(_segment_keys(wh))) == 20


def test_two_copies_in_one_batch_keep_the_copy_of_the_file_listed_first(tmp_path: Path) -> None:
    a = _capture(tmp_path / "a.jsonl", range(3))
    b = tmp_path / "b.jsonl.gz"
    b.write_bytes(gzip.compress(a.read_bytes()))
    wh = tmp_path / "wh"
    result = run([b, a], wh)
    assert [f.accepted for f in result.files] == [3, 0]
    assert {r["source"] for r in table(wh, "requests")} == {str(b)}
    assert result.total("records") == 6
    assert result.total("accepted") + result.total("skipped") == 6


def test_a_file_concatenated_with_itself_on_several_workers_lands_once(tmp_path: Path) -> None:
    single = _capture(tmp_path / "one.jsonl", range(40), pad=200_000)
    assert single.stat().st_size * 2 > PARALLEL_MIN_BYTES  # both copies spread over workers
    twice = tmp_path / "twice.jsonl"
    twice.write_bytes(single.read_bytes() * 2)
    wh_one, wh_two = tmp_path / "one", tmp_path / "two"
    run([single], wh_one, workers=1)
    result = run([twice], wh_two, workers=2)
    assert (result.files[0].accepted, result.files[0].duplicates) == (40, 40)
    assert _ids(wh_two) == _ids(wh_one)
    assert _segment_keys(wh_two) == _segment_keys(wh_one)
    kept = {r["request_id"]: r["source_index"] for r in table(wh_two, "requests")}
    assert kept["r0"] == 1 and kept["r39"] == 40  # the first occurrence, by line


def test_a_har_copied_under_another_name_keeps_its_ids_and_adds_nothing(tmp_path: Path) -> None:
    har = tmp_path / "session.har"
    har.write_bytes(har_document([har_entry(i) for i in range(4)]))
    wh = tmp_path / "wh"
    run([har], wh)
    ids = _ids(wh)
    assert len(ids) == 4 and all(i.startswith("x") for i in ids)
    copy = tmp_path / "renamed.har.gz"
    copy.write_bytes(gzip.compress(har.read_bytes()))
    result = run([copy], wh)
    assert (result.files[0].accepted, result.files[0].duplicates) == (0, 4)
    assert _ids(wh) == ids


def test_a_capture_whose_first_line_is_garbage_ingests_the_rest(tmp_path: Path) -> None:
    capture = tmp_path / "c.jsonl"
    capture.write_bytes(b"proxy started\n" + _capture(tmp_path / "g.jsonl", range(3)).read_bytes())
    result = run([capture], tmp_path / "wh")
    fr = result.files[0]
    assert (fr.format, fr.records, fr.accepted, fr.rejected) == ("capture_jsonl", 4, 3, 1)
    assert [r["source_index"] for r in table(tmp_path / "wh", "rejects")] == [1]


def test_a_stray_file_in_a_batch_is_one_reject_and_the_rest_lands(tmp_path: Path) -> None:
    good = _capture(tmp_path / "c.jsonl", range(3))
    stray = tmp_path / "notes.json"
    stray.write_text('{"todo": "look at the cache", "api_key": "sk-abcdefghijklmnop1234"}\n')
    wh = tmp_path / "wh"
    result = run([stray, good], wh)
    formats = {Path(f.source).name: (f.format, f.records, f.rejected) for f in result.files}
    assert formats == {"notes.json": ("unrecognised", 1, 1), "c.jsonl": ("capture_jsonl", 3, 0)}
    (reject,) = table(wh, "rejects")
    assert reject["source"] == str(stray) and "not recognised" in reject["reason"]
    assert "sk-abcdefghijklmnop1234" not in reject["excerpt"]
    assert len(table(wh, "requests")) == 3
    again = run([stray, good], wh)
    assert [f.status for f in again.files] == ["unchanged", "unchanged"]


def test_a_single_file_that_is_not_traffic_is_an_error(tmp_path: Path) -> None:
    stray = tmp_path / "notes.json"
    stray.write_text('{"todo": 1}\n')
    with pytest.raises(InputError, match="not recognised"):
        run([stray], tmp_path / "wh")


def test_a_first_ingest_that_fails_leaves_no_warehouse_directory_behind(tmp_path: Path) -> None:
    stray = tmp_path / "notes.json"
    stray.write_text('{"todo": 1}\n')
    with pytest.raises(InputError):
        run([stray], tmp_path / "wh")
    # a later `sql -w wh` must say "no warehouse", not answer zeros from an empty one
    assert not (tmp_path / "wh").exists()


def test_a_failed_ingest_into_an_existing_warehouse_keeps_what_it_holds(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    run([_capture(tmp_path / "c.jsonl", range(2))], wh)
    stray = tmp_path / "notes.json"
    stray.write_text('{"todo": 1}\n')
    with pytest.raises(InputError):
        run([stray], wh)
    assert len(table(wh, "requests")) == 2


# Documentation that quotes the formats' keys: no line of it is a JSON record.
NOTES_QUOTING_KEYS = (
    "# Capturing traffic\n"
    "\n"
    'The OTLP file exporter writes one `{"resourceSpans": ...}` per line; a capture line has\n'
    '"schema_version" and "request". For example:\n'
    "\n"
    '    {"resourceSpans": [...]}\n'
    '    {"schema_version": 1, "request": {...}}\n'
    '{"resourceSpans": "not a list"}\n'
)


def test_a_text_file_that_mentions_resource_spans_is_not_traffic_and_fails_alone(
    tmp_path: Path, cli
) -> None:  # type: ignore[no-untyped-def]
    notes = tmp_path / "NOTES.md"
    notes.write_text(NOTES_QUOTING_KEYS)
    not_traffic = "is not a capture JSONL, HAR, OTLP/JSON file or VCR cassette"
    with pytest.raises(InputError, match=not_traffic):
        run([notes], tmp_path / "wh")
    out = cli("ingest", str(notes), "-w", str(tmp_path / "wh2"))
    assert out.returncode != 0
    assert out.stderr.splitlines()[0].endswith(not_traffic)
    assert "rejected" not in out.stderr


def test_a_text_file_that_mentions_resource_spans_in_a_batch_is_one_unrecognised_reject(
    tmp_path: Path,
) -> None:
    notes = tmp_path / "NOTES.md"
    notes.write_text(NOTES_QUOTING_KEYS)
    good = _capture(tmp_path / "c.jsonl", range(2))
    wh = tmp_path / "wh"
    result = run([notes, good], wh)
    formats = {Path(f.source).name: (f.format, f.records, f.rejected) for f in result.files}
    assert formats == {"NOTES.md": ("unrecognised", 1, 1), "c.jsonl": ("capture_jsonl", 2, 0)}
    (reject,) = table(wh, "rejects")
    assert reject["source"] == str(notes)


def test_an_otlp_export_whose_first_line_is_garbage_is_still_read_as_otlp(tmp_path: Path) -> None:
    spans = Path(__file__).parent / "fixtures" / "otlp" / "genai_spans.jsonl"
    export = tmp_path / "spans.jsonl"
    export.write_bytes(b"collector started, see resourceSpans below\n" + spans.read_bytes())
    result = run([export], tmp_path / "wh")
    fr = result.files[0]
    assert fr.format == "otlp_json" and fr.accepted > 0


def test_a_directory_walk_takes_capture_names_only(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    folder = tmp_path / "captures"
    folder.mkdir()
    _capture(folder / "c.jsonl", range(2))
    (folder / "README.md").write_text("# captures from the proxy\n")
    out = cli("ingest", str(folder), "--warehouse", str(tmp_path / "wh"))
    assert out.returncode == 0, out.stderr
    assert "ignoring 1 file(s)" in out.stderr and "README.md" in out.stderr
    assert "total: 2 records = 2 accepted" in out.stderr
