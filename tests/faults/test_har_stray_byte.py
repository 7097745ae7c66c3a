"""A stray byte inside a HAR entry costs that entry, as one reject, and never adds records: a
file of 13 entries reads as at most 13 records, wherever the byte lands and whatever it is (a
stray quote turns every string after it inside out, and the entry scan used to cut the damaged
stretch into several rejects, so 13 entries read as 14 to 17)."""

from __future__ import annotations

from pathlib import Path

from test_ingest_support import har_document, har_entry

from pipeline.errors import InputError
from pipeline.ingest import ingest
from pipeline.records import Exchange, Reject
from pipeline.sources.har import iter_har
from pipeline.warehouse import Warehouse

ENTRIES = 13
DOC = har_document([har_entry(t) for t in range(ENTRIES)])
STRAY = [b"x", b"{", b"}", b'"', b"[", b"]", b",", b"\\"]


def _read(path: Path, data: bytes) -> list[Exchange | Reject] | None:
    path.write_bytes(data)
    try:
        return list(iter_har(path))
    except InputError:  # damage before log.entries: the whole file is refused, not miscounted
        return None


def test_a_stray_byte_anywhere_never_makes_more_records_than_entries(tmp_path: Path) -> None:
    path = tmp_path / "damaged.har"
    start = DOC.index(b'"entries"')
    over = []
    for pos in range(start, len(DOC), 37):
        for byte in STRAY:
            items = _read(path, DOC[:pos] + byte + DOC[pos:])
            if items is not None and len(items) > ENTRIES:
                over.append((pos, byte, len(items)))
    assert over == []


def test_a_stray_quote_inside_an_entry_is_one_reject_beside_the_other_twelve(
    tmp_path: Path,
) -> None:
    pos = DOC.index(b'T08:00:07.000Z"') + 1  # inside the 8th entry's start time
    items = _read(tmp_path / "quote.har", DOC[:pos] + b'"' + DOC[pos:])
    assert items is not None
    assert [type(i).__name__ for i in items] == ["Exchange"] * 7 + ["Reject"] + ["Exchange"] * 5


def test_a_stray_brace_that_closes_an_entry_early_is_one_reject(tmp_path: Path) -> None:
    pos = DOC.index(b'"time":300', DOC.index(b"T08:00:08.000Z")) + len(b'"time":3')
    items = _read(tmp_path / "brace.har", DOC[:pos] + b"}" + DOC[pos:])
    assert items is not None
    assert [type(i).__name__ for i in items] == ["Exchange"] * 8 + ["Reject"] + ["Exchange"] * 4


def test_ingest_counts_the_damaged_har_as_read_accepted_and_rejected(tmp_path: Path) -> None:
    pos = DOC.index(b'T08:00:07.000Z"') + 1
    path = tmp_path / "quote.har"
    path.write_bytes(DOC[:pos] + b'"' + DOC[pos:])
    result = ingest([path], Warehouse(tmp_path / "wh"), workers=1)
    assert (result.total("records"), result.total("accepted"), result.total("rejected")) == (
        ENTRIES,
        ENTRIES - 1,
        1,
    )
