"""Records without an id (HAR entries, capture lines written without one) get an id from what
the exchange was and which exchange of that content in its file it is, never from where it sits:
two exports of one session that overlap add each exchange once, and two identical requests sent
at the same instant stay two rows, whichever worker read them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from test_ingest_support import capture_record, har_document, har_entry, line, run, table

from pipeline.ingest import PARALLEL_MIN_BYTES


def _har(path: Path, turns: list[int]) -> Path:
    path.write_bytes(har_document([har_entry(t) for t in turns]))
    return path


def _capture(path: Path, turns: list[int], *, pad: int = 0) -> Path:
    records = [capture_record(t) for t in turns]  # no "id": the derived one is used
    for r in records:
        assert r["id"] is None
        if pad:  # a long tag (not part of the id) makes the file big enough to split
            r["hints"]["tags"] = ["x" * pad]
    path.write_bytes(b"".join(line(r) for r in records))
    return path


def _rows(wh: Path) -> list[tuple[str, int]]:
    return sorted((r["request_id"], r["source_index"]) for r in table(wh, "requests"))


def _by_turn(wh: Path) -> dict[str, Any]:
    return {r["request_id"]: r["started_at"].second for r in table(wh, "requests")}


def test_two_overlapping_har_exports_add_each_shared_exchange_once(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    run([_har(tmp_path / "export1.har", list(range(0, 6)))], wh)
    result = run([_har(tmp_path / "export2.har", list(range(3, 10)))], wh)
    fr = result.files[0]
    assert (fr.records, fr.accepted, fr.skipped, fr.duplicates) == (7, 4, 3, 3)
    assert sorted(_by_turn(wh).values()) == list(range(10))
    kept = {r["started_at"].second: r["source"] for r in table(wh, "requests")}
    assert all(kept[t].endswith("export1.har") for t in (3, 4, 5))


def test_capture_records_without_an_id_in_overlapping_files_land_once(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    run([_capture(tmp_path / "a.jsonl", list(range(0, 6)))], wh)
    result = run([_capture(tmp_path / "b.jsonl", list(range(3, 10)))], wh)
    assert (result.files[0].accepted, result.files[0].duplicates) == (4, 3)
    assert sorted(_by_turn(wh).values()) == list(range(10))
    assert len(table(wh, "segments")) == 20  # 10 requests x (system + user), none twice


def test_identical_exchanges_in_one_file_stay_apart_and_match_the_same_ones_elsewhere(
    tmp_path: Path,
) -> None:
    wh = tmp_path / "wh"
    # Turn 1 sent twice at the same instant with the same body: two exchanges.
    run([_har(tmp_path / "one.har", [1, 1, 2])], wh)
    ids = _by_turn(wh)
    assert sorted(ids.values()) == [1, 1, 2]
    twins = sorted(i for i, turn in ids.items() if turn == 1)
    assert [i.rsplit(":", 1)[1] for i in twins] == ["0", "1"]
    assert twins[0].rsplit(":", 1)[0] == twins[1].rsplit(":", 1)[0]
    # Another export holding both of them (at other positions) and a new one adds the new one.
    second = run([_har(tmp_path / "two.har", [0, 1, 1])], wh)
    assert (second.files[0].accepted, second.files[0].duplicates) == (1, 2)
    # One holding turn 1 three times: one of them was not seen before.
    third = run([_har(tmp_path / "three.har", [1, 1, 1])], wh)
    assert (third.files[0].accepted, third.files[0].duplicates) == (1, 2)
    assert sorted(_by_turn(wh).values()) == [0, 1, 1, 1, 2]


def test_repeated_content_read_by_several_workers_is_numbered_in_file_order(
    tmp_path: Path,
) -> None:
    # Turn 3 four times, in different byte ranges of a file split between two workers.
    turns = [*range(0, 20), 3, 3, *range(20, 40), 3]
    capture = _capture(tmp_path / "c.jsonl", turns, pad=250_000)
    assert capture.stat().st_size > PARALLEL_MIN_BYTES
    one, two = tmp_path / "one", tmp_path / "two"
    run([capture], one, workers=1)
    result = run([capture], two, workers=2)
    assert (result.files[0].accepted, result.files[0].skipped) == (len(turns), 0)
    assert _rows(two) == _rows(one)
    rows = table(two, "requests")
    threes = sorted(
        (r["source_index"], r["request_id"]) for r in rows if r["started_at"].second == 3
    )
    assert [rid.rsplit(":", 1)[1] for _, rid in threes] == ["0", "1", "2", "3"]
    segments = sorted((r["request_id"], r["position"]) for r in table(two, "segments"))
    assert segments == sorted((r["request_id"], r["position"]) for r in table(one, "segments"))
    assert len(segments) == len(set(segments)) == 2 * len(turns)


def test_records_that_carry_an_id_keep_it(tmp_path: Path) -> None:
    capture = tmp_path / "c.jsonl"
    capture.write_bytes(line(capture_record(1, record_id="req-1")) + line(capture_record(2)))
    run([capture], tmp_path / "wh")
    ids = sorted(r["request_id"] for r in table(tmp_path / "wh", "requests"))
    assert ids[0] == "req-1" and ids[1].startswith("x") and ids[1].endswith(":0")


def _as_written_before_occurrence_ids(wh: Path) -> None:
    """Rewrite a warehouse's derived ids the way cacheaudit wrote them before they counted
    identical exchanges, or named the response: x<hash>:<the entry's position in its file>."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline.warehouse import Warehouse

    positions = {r["request_id"]: r["source_index"] for r in table(wh, "requests")}
    old = {rid: rid.rsplit(":", 1)[0][:17] + f":{positions[rid]}" for rid in positions}
    for name in ("requests", "segments"):
        for path in Warehouse(wh).files(name):
            t = pq.read_table(path)
            i = t.schema.get_field_index("request_id")
            ids = [old[v] for v in t.column(i).to_pylist()]
            pq.write_table(t.set_column(i, t.schema.field(i), pa.array(ids, pa.string())), path)


def test_a_warehouse_with_the_older_position_ids_still_recognises_copies_and_overlaps(
    tmp_path: Path,
) -> None:
    wh = tmp_path / "wh"
    first = _har(tmp_path / "export1.har", list(range(0, 6)))
    run([first], wh)
    _as_written_before_occurrence_ids(wh)
    assert sorted(r["request_id"].rsplit(":", 1)[1] for r in table(wh, "requests")) == [
        str(i) for i in range(6)
    ]
    copy = tmp_path / "copy.har"
    copy.write_bytes(first.read_bytes() + b"\n")  # other bytes, the same exchanges
    overlap = _har(tmp_path / "export2.har", list(range(3, 10)))
    result = run([copy, overlap], wh)
    assert [(f.accepted, f.duplicates) for f in result.files] == [(0, 6), (4, 3)]
    assert sorted(_by_turn(wh).values()) == list(range(10))
