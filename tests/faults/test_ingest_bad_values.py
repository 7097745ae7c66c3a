"""A record whose values no column can hold (a count past 64 bits, an object where a string
belongs) costs that record, never the batch: counts out of range become unknown (NULL) with
`usage_semantics` saying why, a value of the wrong type is a reject, and every other row of the
batch lands, including those of another file."""

from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_ingest_support import capture_record, run, table


def line(record: dict[str, Any]) -> bytes:
    """One capture line; json, not orjson, which cannot write integers past 64 bits."""
    return json.dumps(record).encode() + b"\n"


def _with_usage(turn: int, **usage: Any) -> dict[str, Any]:
    record = capture_record(turn, record_id=f"r{turn}")
    body = orjson.loads(record["response"]["body"])
    body["usage"].update(usage)
    record["response"]["body"] = json.dumps(body)
    return record


def test_counts_past_64_bits_and_wrong_types_cost_their_record_and_the_rest_lands(
    tmp_path: Path,
) -> None:
    overflow_int = _with_usage(1, prompt_tokens=2**70)  # a JSON integer orjson reads as a float
    overflow_exp = _with_usage(2, completion_tokens=10**30)
    object_session = capture_record(3, record_id="r3")
    object_session["hints"]["session_id"] = {"nested": "object"}
    list_agent = capture_record(4, record_id="r4")
    list_agent["hints"]["agent"] = ["a", "b"]
    huge_status = capture_record(5, record_id="r5")
    huge_status["response"]["status"] = 2**40
    good = [capture_record(t, record_id=f"r{t}") for t in (6, 7)]
    mixed = tmp_path / "mixed.jsonl"
    records = [overflow_int, overflow_exp, object_session, list_agent, huge_status, *good]
    mixed.write_bytes(b"".join(line(r) for r in records))
    other = tmp_path / "other.jsonl"
    other.write_bytes(b"".join(line(capture_record(t, record_id=f"o{t}")) for t in (8, 9, 10)))

    wh = tmp_path / "wh"
    result = run([mixed, other], wh, workers=1)

    first, second = result.files
    # 7 records: 2 with counts out of range (kept, counts NULL), 3 of a wrong type (rejected).
    assert (first.records, first.accepted, first.rejected, first.skipped) == (7, 4, 3, 0)
    assert (second.records, second.accepted, second.rejected, second.skipped) == (3, 3, 0, 0)
    rows = {r["request_id"]: r for r in table(wh, "requests")}
    assert sorted(rows) == ["o10", "o8", "o9", "r1", "r2", "r6", "r7"]
    assert rows["r1"]["input_tokens"] is None
    assert rows["r1"]["uncached_input_tokens"] is None
    assert rows["r1"]["output_tokens"] == 3  # the count in range is kept
    assert rows["r2"]["output_tokens"] is None
    assert rows["r2"]["input_tokens"] == 1002  # capture_record(2): 1000 + turn
    assert rows["r1"]["usage_semantics"] == rows["r2"]["usage_semantics"] == "out_of_range"
    assert orjson.loads(rows["r1"]["raw_usage"])["prompt_tokens"] == float(2**70)  # as sent
    assert rows["r6"]["input_tokens"] == 1006 and rows["r6"]["usage_semantics"] != "out_of_range"
    reasons = sorted(r["reason"] for r in table(wh, "rejects"))
    assert reasons == [
        "agent must be a string, not list",
        "response.status 1099511627776 is not an HTTP status",
        "session_id must be a string, not dict",
    ]


# Any JSON value, small enough to keep examples fast.
_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(string.printable, max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(string.ascii_letters, max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)

# Where a value is planted: the record's own fields, and the response's usage fields.
_RECORD_FIELDS = [
    ("id",),
    ("account",),
    ("outcome",),
    ("error",),
    ("hints", "session_id"),
    ("hints", "agent"),
    ("hints", "tags"),
    ("request", "method"),
    ("response", "status"),
    ("response", "chunks"),
    ("timing", "first_byte_ms"),
    ("timing", "end_ms"),
]
_BODY_FIELDS = [
    ("model",),
    ("id",),
    ("usage", "prompt_tokens"),
    ("usage", "completion_tokens"),
    ("usage", "prompt_tokens_details", "cached_tokens"),
    ("usage", "completion_tokens_details"),
    ("usage", "cost"),
    ("choices", 0, "finish_reason"),
]


def _plant(obj: Any, path: tuple[Any, ...], value: Any) -> None:
    for key in path[:-1]:
        obj = obj[key]
    obj[path[-1]] = value


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    st.lists(
        st.tuples(st.booleans(), st.integers(0, 100), _JSON),
        min_size=1,
        max_size=6,
    )
)
def test_any_json_value_in_any_field_is_a_row_or_a_reject_never_a_failed_batch(
    tmp_path_factory: Any, plants: list[tuple[bool, int, Any]]
) -> None:
    tmp = tmp_path_factory.mktemp("prop")
    records = []
    for turn, (in_body, which, value) in enumerate(plants):
        record = capture_record(turn, record_id=f"p{turn}")
        if in_body:
            body = orjson.loads(record["response"]["body"])
            _plant(body, _BODY_FIELDS[which % len(_BODY_FIELDS)], value)
            record["response"]["body"] = json.dumps(body)
        else:
            _plant(record, _RECORD_FIELDS[which % len(_RECORD_FIELDS)], value)
        records.append(record)
    capture = tmp / "planted.jsonl"
    capture.write_bytes(b"".join(line(r) for r in records) + line(capture_record(99)))
    result = run([capture], tmp / "wh", workers=1)
    fr = result.files[0]
    assert fr.records == len(records) + 1
    assert fr.records == fr.accepted + fr.rejected + fr.skipped
    rows = table(tmp / "wh", "requests")
    assert len(rows) == fr.accepted
    assert len(records) + 1 in {r["source_index"] for r in rows}  # the good last line landed
    assert len(table(tmp / "wh", "rejects")) == fr.rejected


_HAR_FIELDS = [
    ("startedDateTime",),
    ("time",),
    ("timings",),
    ("timings", "wait"),
    ("request", "method"),
    ("request", "url"),
    ("request", "headers"),
    ("request", "postData"),
    ("response", "status"),
    ("response", "headers"),
    ("response", "content"),
    ("response", "_error"),
]


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(st.tuples(st.integers(0, 100), _JSON), min_size=1, max_size=6))
def test_any_json_value_in_a_har_entry_is_a_row_or_a_reject_never_a_failed_batch(
    tmp_path_factory: Any, plants: list[tuple[int, Any]]
) -> None:
    from test_ingest_support import har_entry

    tmp = tmp_path_factory.mktemp("har")
    entries = []
    for turn, (which, value) in enumerate(plants):
        entry = har_entry(turn)
        _plant(entry, _HAR_FIELDS[which % len(_HAR_FIELDS)], value)
        entries.append(entry)
    entries.append(har_entry(59))
    path = tmp / "planted.har"
    path.write_bytes(json.dumps({"log": {"version": "1.2", "entries": entries}}).encode())
    fr = run([path], tmp / "wh", workers=1).files[0]
    assert fr.records == len(entries)
    assert fr.records == fr.accepted + fr.rejected + fr.skipped
    assert len(table(tmp / "wh", "requests")) == fr.accepted
    assert len(entries) - 1 in {r["source_index"] for r in table(tmp / "wh", "requests")}
