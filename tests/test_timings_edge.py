"""Timings and times a capture from another tool may get wrong: a bad chunk time costs that
timing (NULL), never the record or its usage, and never gives an impossible number (a negative
latency, a first text after the end); a body shaped like a stream is recorded as one; a
timestamp without its offset is a reject naming the field, as is an OTLP start time that is not
an unsigned 64-bit count of nanoseconds."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_ingest_support import capture_record, har_entry

from pipeline.capture_format import RecordError, parse_record
from pipeline.normalise import RejectRecord, normalise
from pipeline.records import Exchange, Reject
from pipeline.sources.har import read_entry
from pipeline.sources.otlp import iter_otlp

PROPERTY = settings(
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
USAGE = {"prompt_tokens": 10, "completion_tokens": 2}


def _chunk(delta: dict[str, Any], finish: str | None = None, usage: Any = None) -> str:
    obj: dict[str, Any] = {
        "id": "c",
        "object": "chat.completion.chunk",
        "model": "gpt-4o",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        obj["usage"] = usage
    return "data: " + json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n\n"


# One event per chunk, arriving at 100, 200, 300, 400 ms; the answer text is the second.
EVENTS = [
    _chunk({"role": "assistant", "content": ""}),
    _chunk({"content": "Hi"}),
    _chunk({}, "stop", USAGE),
    "data: [DONE]\n\n",
]
TIMES = [100.0, 200.0, 300.0, 400.0]


def _stream_record(
    *,
    times: list[Any] | None = None,
    chunks: Any = "auto",
    timing: dict[str, Any] | None = None,
    declared: bool = True,
    content_type: str = "text/event-stream",
) -> dict[str, Any]:
    record = capture_record(1, record_id="r")
    request = json.loads(record["request"]["body"])
    if declared:
        request["stream"] = True
    else:
        request.pop("stream", None)
    record["request"]["body"] = json.dumps(request)
    body = "".join(EVENTS)
    if chunks == "auto":
        chunks = [[t, len(e.encode())] for t, e in zip(times or TIMES, EVENTS, strict=True)]
    record["response"].update(body=body, headers=[["content-type", content_type]], chunks=chunks)
    record["timing"] = (
        {"response_headers_ms": 90.0, "first_byte_ms": 100.0, "end_ms": 401.0}
        if timing is None
        else timing
    )
    return record


def _row(record: dict[str, Any]) -> dict[str, Any]:
    return normalise(parse_record(orjson.loads(orjson.dumps(record)), "c.jsonl", 1), "r").row


def _timings(row: dict[str, Any]) -> tuple[Any, ...]:
    return row["ttfb_ms"], row["ttft_ms"], row["duration_ms"]


def test_a_well_timed_stream_gives_its_first_byte_first_text_and_end() -> None:
    row = _row(_stream_record())
    assert _timings(row) == (100.0, 200.0, 401.0)
    assert (row["stream"], row["input_tokens"], row["output_tokens"]) == (True, 10, 2)


@pytest.mark.parametrize("bad", [None, "200", True, -5, [200]])
def test_a_chunk_without_a_usable_time_keeps_the_row_and_its_usage_with_that_timing_unknown(
    bad: Any,
) -> None:
    row = _row(_stream_record(times=[100.0, bad, 300.0, 400.0]))
    assert (row["outcome"], row["input_tokens"], row["output_tokens"]) == ("ok", 10, 2)
    assert _timings(row) == (100.0, None, 401.0)


def test_chunks_that_do_not_cover_the_body_give_no_time_to_first_text() -> None:
    record = _stream_record()
    record["response"]["chunks"] = record["response"]["chunks"][:1]  # 1 of 4 events
    assert _timings(_row(record)) == (100.0, None, 401.0)


def test_chunks_that_are_not_time_length_pairs_give_no_timing_but_keep_the_row() -> None:
    record = _stream_record()
    record["response"]["chunks"][1].append(1)
    row = _row(record)
    assert (row["input_tokens"], _timings(row)) == (10, (100.0, None, 401.0))


def test_chunk_times_out_of_order_are_unknown_rather_than_after_the_end() -> None:
    row = _row(_stream_record(times=[100.0, 900.0, 300.0, 400.0]))
    assert _timings(row) == (100.0, None, 401.0)
    # Without an end to tell which is wrong, both times of the contradicting pair are unknown.
    row = _row(
        _stream_record(
            times=[100.0, 350.0, 300.0, 400.0],
            timing={"first_byte_ms": 100.0, "end_ms": None},
        )
    )
    assert _timings(row) == (100.0, None, None)


def test_a_chunk_time_before_the_first_byte_is_unknown() -> None:
    row = _row(_stream_record(timing={"first_byte_ms": 250.0, "end_ms": 401.0}))
    assert _timings(row) == (250.0, None, 401.0)


def test_without_timing_the_first_chunk_arrival_is_the_time_to_first_byte() -> None:
    row = _row(_stream_record(timing={}))
    assert _timings(row) == (100.0, 200.0, None)
    # The first chunk that holds bytes: an empty one says nothing about the body.
    record = _stream_record(timing={})
    record["response"]["chunks"].insert(0, [50.0, 0])
    assert _row(record)["ttfb_ms"] == 100.0
    record = _stream_record(timing={}, times=[None, 200.0, 300.0, 400.0])
    assert _timings(_row(record)) == (None, 200.0, None)


def test_negative_capture_timings_are_unknown() -> None:
    record = capture_record(1, record_id="n1")
    record["timing"] = {"response_headers_ms": -5, "first_byte_ms": -10, "end_ms": -1}
    exchange = parse_record(record, "c.jsonl", 1)
    assert (exchange.response_headers_ms, exchange.first_byte_ms, exchange.end_ms) == (
        None,
        None,
        None,
    )
    row = normalise(exchange, "n1").row
    assert _timings(row) == (None, None, None)


def test_a_first_byte_after_the_end_makes_both_unknown() -> None:
    record = capture_record(1, record_id="n3")
    record["timing"] = {"response_headers_ms": 100, "first_byte_ms": 500, "end_ms": 200}
    assert _timings(_row(record)) == (None, None, None)
    # Rounding of a chunk time to the microsecond is not a contradiction.
    ok = _stream_record(timing={"first_byte_ms": 100.0004, "end_ms": 399.9996})
    assert _timings(_row(ok)) == (100.0004, 200.0, 399.9996)


def test_an_undeclared_stream_body_is_recorded_as_a_stream() -> None:
    untimed = _stream_record(declared=False, content_type="text/plain", chunks=None)
    row = _row(untimed)
    assert (row["stream"], row["input_tokens"], row["output_tokens"]) == (True, 10, 2)
    assert _timings(row) == (100.0, None, 401.0)  # a stream without chunk times: unknown
    timed = _row(_stream_record(declared=False, content_type="text/plain"))
    assert (timed["stream"], timed["ttft_ms"]) == (True, 200.0)


def test_a_json_body_without_a_stream_flag_stays_a_non_stream() -> None:
    row = _row(capture_record(1, record_id="plain"))
    assert (row["stream"], row["ttft_ms"]) == (False, 300.0)


def _utf8_cut_record(outcome: str | None) -> dict[str, Any]:
    record = _stream_record(chunks=None)
    body = _chunk({"role": "assistant", "content": ""}) + _chunk({"content": "héllo €uro"})
    raw = body.encode()
    raw = raw[: raw.index("€".encode()) + 1]  # the stream stops inside the euro sign
    record["response"]["body"] = base64.b64encode(raw).decode()
    record["response"]["body_encoding"] = "base64"
    record["outcome"] = outcome
    return record


def test_a_stream_cut_inside_a_character_is_interrupted_as_one_cut_inside_json() -> None:
    labelled = _row(_utf8_cut_record("interrupted"))
    unlabelled = _row(_utf8_cut_record(None))
    for row in (labelled, unlabelled):
        assert (row["outcome"], row["usage_status"], row["input_tokens"]) == (
            "interrupted",
            "missing",
            None,
        )
    # Cut inside a JSON value instead, without a capture outcome: the same row.
    record = _stream_record(chunks=None)
    record["response"]["body"] = EVENTS[0] + EVENTS[1][:30]
    assert _row(record)["outcome"] == "interrupted"


def test_a_body_with_invalid_utf8_before_its_end_is_still_a_reject() -> None:
    record = _stream_record(chunks=None)
    raw = b"".join(e.encode() for e in EVENTS).replace(b"Hi", b"H\xff")
    record["response"]["body"] = base64.b64encode(raw).decode()
    record["response"]["body_encoding"] = "base64"
    with pytest.raises(RejectRecord, match="not valid UTF-8"):
        _row(record)


@given(
    times=st.lists(
        st.one_of(st.none(), st.floats(-50, 600, allow_nan=False), st.sampled_from(["x", True])),
        min_size=4,
        max_size=4,
    ),
    first=st.one_of(st.none(), st.floats(-50, 600, allow_nan=False)),
    end=st.one_of(st.none(), st.floats(-50, 600, allow_nan=False)),
)
# found by a run of the suite: a chunk within rounding after the end was a first token after it
@example(times=[None, 2.1495372255036627e-151, None, None], first=None, end=0.0)
@example(times=[10.0005, 20.0, 30.0, 40.0], first=10.001, end=39.9995)
@PROPERTY
def test_whatever_the_chunk_times_a_row_never_has_an_impossible_timing(
    times: list[Any], first: float | None, end: float | None
) -> None:
    row = _row(_stream_record(times=times, timing={"first_byte_ms": first, "end_ms": end}))
    assert (row["input_tokens"], row["output_tokens"]) == (10, 2)
    known = [v for v in _timings(row) if v is not None]
    assert all(v >= 0 for v in known)
    assert known == sorted(known), _timings(row)


@pytest.mark.parametrize(
    "value", ["2026-03-31T23:30:00", "2026-03-31", "2026-03-31T23:30:00.123456"]
)
def test_a_capture_time_without_an_offset_is_a_reject_naming_started_at(value: str) -> None:
    record = capture_record(1)
    record["started_at"] = value
    with pytest.raises(RecordError, match=r"^started_at has no time zone"):
        parse_record(record, "c.jsonl", 1)


def test_a_har_time_without_an_offset_is_a_reject_naming_started_date_time() -> None:
    entry = har_entry(1)
    entry["startedDateTime"] = "2026-03-31T23:30:00.000"
    item = read_entry(entry, "x.har", 0)
    assert isinstance(item, Reject)
    assert "startedDateTime has no time zone" in item.reason
    entry["startedDateTime"] = "yesterday"
    item = read_entry(entry, "x.har", 0)
    assert isinstance(item, Reject) and "startedDateTime is not a timestamp" in item.reason


@pytest.mark.parametrize(
    ("value", "utc"),
    [
        ("2026-03-31T15:30:00z", "2026-03-31T15:30:00+00:00"),
        ("2026-03-31T15:30:00Z", "2026-03-31T15:30:00+00:00"),
        ("2026-03-31T23:30:00+08:00", "2026-03-31T15:30:00+00:00"),
        ("2026-03-31T15:30:00.123456789-00:00", "2026-03-31T15:30:00.123456+00:00"),
    ],
)
def test_a_time_with_an_offset_or_either_z_is_read_as_utc(value: str, utc: str) -> None:
    record = capture_record(1)
    record["started_at"] = value
    assert parse_record(record, "c.jsonl", 1).started_at.isoformat() == utc
    entry = har_entry(1)
    entry["startedDateTime"] = value
    exchange = read_entry(entry, "x.har", 0)
    assert isinstance(exchange, Exchange) and exchange.started_at.isoformat() == utc


def _span(tmp_path: Path, start: Any) -> Exchange | Reject:
    span = {
        "traceId": "a",
        "spanId": "b",
        "startTimeUnixNano": start,
        "endTimeUnixNano": "1782907201000000000",
        "attributes": [{"key": "gen_ai.system", "value": {"stringValue": "openai"}}],
    }
    path = tmp_path / "t.jsonl"
    doc = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
    path.write_bytes(orjson.dumps(doc) + b"\n")
    (item,) = list(iter_otlp(path))
    return item


@pytest.mark.parametrize(
    "start",
    [
        "-1000000000",
        -1000000000,
        True,
        "99999999999999999999",
        1e30,
        "1782907200000000000.5",
        "",
        "1782907200000",  # milliseconds: 1970-01-01T00:29:42
    ],
)
def test_an_otlp_start_time_that_is_not_an_unsigned_count_of_nanoseconds_is_a_reject(
    tmp_path: Path, start: Any
) -> None:
    item = _span(tmp_path, start)
    assert isinstance(item, Reject), item
    assert "startTimeUnixNano" in item.reason and "not a time" in item.reason


def test_an_otlp_start_time_is_truncated_to_the_microsecond_like_the_other_sources(
    tmp_path: Path,
) -> None:
    item = _span(tmp_path, "1782907199999999999")  # 11:59:59.999999999 on 2026-07-01
    assert isinstance(item, Exchange)
    assert item.started_at.isoformat() == "2026-07-01T11:59:59.999999+00:00"
    assert item.end_ms == pytest.approx(1000.000001)
    numeric = _span(tmp_path, 1782907200000000000)
    assert isinstance(numeric, Exchange)
    assert numeric.started_at.isoformat() == "2026-07-01T12:00:00+00:00"
