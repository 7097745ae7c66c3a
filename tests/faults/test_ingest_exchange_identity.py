"""An exchange without an id of its own is known by its request and by the completion the
provider answered with: two calls with the same request at the same instant answered by two
completions are two rows, while a copy of one (in another export, in a body that names no
completion, or in a warehouse written before ids named the response) is still recognised."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
from test_ingest_support import har_document, har_entry, run, table

from pipeline.warehouse import Warehouse


def _answered(completion_id: str | None) -> dict[str, Any]:
    """Turn 1 (same start, URL and request body every time), answered with this completion."""
    entry = har_entry(1)
    content = entry["response"]["content"]
    body = orjson.loads(content["text"])
    if completion_id is None:
        del body["id"]  # a body that names no completion (a server that sends none)
    else:
        body["id"] = completion_id
    content["text"] = orjson.dumps(body).decode()
    return entry


def _har(path: Path, *entries: dict[str, Any]) -> Path:
    path.write_bytes(har_document(list(entries)))
    return path


def _counts(result: Any) -> list[tuple[int, int]]:
    return [(f.accepted, f.duplicates) for f in result.files]


def test_two_completions_of_one_request_at_one_instant_are_two_rows_in_any_files(
    tmp_path: Path,
) -> None:
    a = _har(tmp_path / "a.har", _answered("chatcmpl-A"))
    b = _har(tmp_path / "b.har", _answered("chatcmpl-B"))
    one_by_one = tmp_path / "wh1"
    assert _counts(run([a], one_by_one)) == [(1, 0)]
    assert _counts(run([b], one_by_one)) == [(1, 0)]
    assert len(table(one_by_one, "requests")) == 2
    batch = tmp_path / "wh2"
    assert _counts(run([a, b], batch)) == [(1, 0), (1, 0)]
    ids = sorted(r["request_id"] for r in table(batch, "requests"))
    assert ids[0].split("-")[0] == ids[1].split("-")[0]  # the same request, two responses
    assert ids[0] != ids[1]


def test_a_copy_of_a_completion_is_recognised_whether_or_not_its_body_names_it(
    tmp_path: Path,
) -> None:
    wh = tmp_path / "wh"
    run([_har(tmp_path / "a.har", _answered("chatcmpl-A"))], wh)
    again = _har(tmp_path / "again.har", _answered("chatcmpl-A"), har_entry(2))
    assert _counts(run([again], wh)) == [(1, 1)]
    unnamed = _har(tmp_path / "unnamed.har", _answered(None))
    assert _counts(run([unnamed], wh)) == [(0, 1)]
    assert len(table(wh, "requests")) == 2
    # And the other way: the copy without a body first, then the one with it.
    wh2 = tmp_path / "wh2"
    assert _counts(run([unnamed, again], wh2)) == [(1, 0), (1, 1)]


def _strip_response_parts(wh: Path) -> None:
    """Rewrite derived ids as cacheaudit wrote them before they named the response."""
    for name in ("requests", "segments"):
        for path in Warehouse(wh).files(name):
            t = pq.read_table(path)
            i = t.schema.get_field_index("request_id")
            ids = [v.split("-")[0] + ":" + v.rsplit(":", 1)[1] for v in t.column(i).to_pylist()]
            pq.write_table(t.set_column(i, t.schema.field(i), pa.array(ids, pa.string())), path)


def test_a_warehouse_whose_ids_do_not_name_the_response_still_recognises_copies(
    tmp_path: Path,
) -> None:
    wh = tmp_path / "wh"
    first = _har(tmp_path / "a.har", _answered("chatcmpl-A"), har_entry(2))
    run([first], wh)
    _strip_response_parts(wh)
    assert all("-" not in r["request_id"] for r in table(wh, "requests"))
    copy = tmp_path / "copy.har"
    copy.write_bytes(first.read_bytes() + b"\n")  # other bytes, the same exchanges
    assert _counts(run([copy, _har(tmp_path / "new.har", har_entry(3))], wh)) == [(0, 2), (1, 0)]
    assert len(table(wh, "requests")) == 3
