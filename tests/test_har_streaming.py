"""The streaming HAR reader: entries found by scanning, never the whole document in memory."""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import pytest
from test_ingest_support import har_document, har_entry, run, table

from pipeline.errors import InputError
from pipeline.records import Exchange, Reject
from pipeline.sources import har


def _entries(data: bytes) -> list[object]:
    return [e for _, e in har.iter_entries(io.BytesIO(data))]


@pytest.mark.parametrize("pretty", [False, True])
def test_every_entry_is_read_whatever_the_block_size(
    pretty: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    entries = [har_entry(i) for i in range(7)]
    data = har_document(entries, pretty=pretty)
    for block in (1, 7, 64, 1000, 1 << 20):
        monkeypatch.setattr(har, "READ_BYTES", block)
        assert _entries(data) == entries


def test_brackets_and_boundaries_inside_strings_do_not_cut_an_entry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tricky = har_entry(1)
    # A body that ends in `},{` followed by a closing quote looks exactly like an entry
    # boundary to the fast guess; escaped quotes and backslashes around brackets too.
    tricky["request"]["postData"]["text"] = "x},{"
    tricky["comment"] = 'a "quoted" }]\\ {[ string \\"},{"'
    entries = [har_entry(0), tricky, har_entry(2)]
    data = har_document(entries)
    for block in (3, 50, 1 << 20):
        monkeypatch.setattr(har, "READ_BYTES", block)
        assert _entries(data) == entries


def test_log_entries_is_found_after_pages_and_other_keys_named_entries() -> None:
    doc = {
        "log": {
            "creator": {"name": "x", "entries": [{"not": "these"}]},
            "pages": [{"id": "p", "entries": []}],
            "entries": [har_entry(3)],
        },
        "entries": [{"nor": "these"}],
    }
    assert _entries(orjson.dumps(doc)) == [har_entry(3)]


def test_a_document_without_log_entries_is_an_input_error() -> None:
    with pytest.raises(InputError):
        _entries(b'{"log": {"version": "1.2", "pages": []}}')


def test_a_truncated_har_yields_the_complete_entries_and_rejects_the_cut_one(
    tmp_path: Path,
) -> None:
    data = har_document([har_entry(i) for i in range(3)])
    path = tmp_path / "cut.har"
    path.write_bytes(data[: len(data) - 300])  # cut inside the third entry
    items = list(har.iter_har(path))
    assert [type(i) for i in items] == [Exchange, Exchange, Reject]
    assert isinstance(items[2], Reject)
    assert items[2].index == 2
    assert "truncated" in items[2].reason


def test_an_invalid_entry_is_rejected_and_the_next_one_still_read() -> None:
    good = orjson.dumps(har_entry(0))
    data = b'{"log": {"entries": [' + good + b', {"request": {,}}, ' + good + b"]}}"
    items = _entries(data)
    assert items[0] == har_entry(0) and items[2] == har_entry(0)
    assert isinstance(items[1], har.BadEntry)
    assert items[1].raw == b'{"request": {,}}'


def test_pages_and_images_in_a_har_count_as_skipped(tmp_path: Path) -> None:
    entries = [
        har_entry(0),
        har_entry(1, method="GET", url="https://chat.example.com/", mime="text/html"),
        har_entry(2, method="GET", url="https://chat.example.com/logo.png", mime="image/png"),
        har_entry(3),
    ]
    path = tmp_path / "browser.har"
    path.write_bytes(har_document(entries, pretty=True))
    result = run([path], tmp_path / "wh")
    fr = result.files[0]
    assert (fr.records, fr.accepted, fr.rejected, fr.skipped) == (4, 2, 0, 2)
    assert sorted(r["source_index"] for r in table(tmp_path / "wh", "requests")) == [0, 3]


def test_a_har_split_into_batches_over_two_workers_keeps_every_entry_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pipeline import ingest as ingest_module
    from pipeline import ingest_plan

    entries = [har_entry(i) for i in range(30)]
    entries[7] = har_entry(7, method="GET", url="https://x.example.com/a.png", mime="image/png")
    entries[20]["startedDateTime"] = "yesterday"  # unreadable: rejected at index 20
    path = tmp_path / "big.har"
    path.write_bytes(har_document(entries))
    monkeypatch.setattr(ingest_plan, "BATCH_BYTES", 3000)  # a few entries per batch
    monkeypatch.setattr(ingest_module, "PARALLEL_MIN_BYTES", 0)
    result = run([path], tmp_path / "wh", workers=2)
    fr = result.files[0]
    assert (fr.records, fr.accepted, fr.rejected, fr.skipped) == (30, 28, 1, 1)
    rows = table(tmp_path / "wh", "requests")
    assert sorted(r["source_index"] for r in rows) == sorted(set(range(30)) - {7, 20})
    assert [r["source_index"] for r in table(tmp_path / "wh", "rejects")] == [20]


def test_a_har_entry_without_a_response_is_interrupted_with_unknown_status(
    tmp_path: Path,
) -> None:
    # Browsers export an aborted or blocked request with status 0 (or no `response` at all):
    # no response arrived, so it is interrupted, not an HTTP error, and its status is unknown.
    blocked = har_entry(1)
    blocked["response"].update(status=0, statusText="", content={"size": 0, "mimeType": "x"})
    blocked["_error"] = "net::ERR_BLOCKED_BY_CLIENT"
    aborted = har_entry(2)
    del aborted["response"]
    path = tmp_path / "aborted.har"
    path.write_bytes(har_document([har_entry(0), blocked, aborted]))
    result = run([path], tmp_path / "wh")
    assert (result.files[0].accepted, result.files[0].rejected) == (3, 0)
    rows = {r["source_index"]: r for r in table(tmp_path / "wh", "requests")}
    assert (rows[0]["outcome"], rows[0]["status_code"]) == ("ok", 200)
    for index in (1, 2):
        assert rows[index]["outcome"] == "interrupted"
        assert rows[index]["status_code"] is None
        assert rows[index]["usage_status"] == "missing"
        assert rows[index]["input_tokens"] is None
    assert rows[1]["error_message"] == "net::ERR_BLOCKED_BY_CLIENT"
