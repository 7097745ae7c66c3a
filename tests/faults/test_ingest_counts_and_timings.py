"""Every part of an input is counted (records = accepted + rejected + skipped), and a timing the
format cannot tell from "not measured" is unknown, not 0."""

from __future__ import annotations

from pathlib import Path

import orjson
from test_ingest_support import har_document, har_entry, run, table

SPAN = {
    "traceId": "0af7651916cd43dd8448eb211c80319c",
    "spanId": "b7ad6b7169203331",
    "name": "chat gpt-4o",
    "startTimeUnixNano": "1763280000000000000",
    "endTimeUnixNano": "1763280001000000000",
    "attributes": [
        {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
        {"key": "gen_ai.provider.name", "value": {"stringValue": "openai"}},
        {"key": "gen_ai.request.model", "value": {"stringValue": "gpt-4o"}},
        {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "100"}},
        {"key": "gen_ai.usage.output_tokens", "value": {"intValue": "5"}},
    ],
}


def _export(*spans: object) -> dict[str, object]:
    return {"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": list(spans)}]}]}


def test_an_otlp_line_shaped_wrong_is_counted_as_rejected_not_dropped(tmp_path: Path) -> None:
    lines = [
        _export(SPAN),
        {"resourceSpans": "x"},  # not a list: one reject
        {"resourceSpans": ["x", {"scopeSpans": "y"}]},  # two parts of the wrong shape
        _export(SPAN | {"spanId": "b7ad6b7169203332"}, 7),  # a good span and one that is not
        {"resourceSpans": []},  # an export of no spans: nothing to count
    ]
    path = tmp_path / "spans.jsonl"
    path.write_bytes(b"".join(orjson.dumps(doc) + b"\n" for doc in lines))
    fr = run([path], tmp_path / "wh").files[0]
    assert fr.format == "otlp_json"
    assert (fr.records, fr.accepted, fr.rejected, fr.skipped) == (6, 2, 4, 0)
    rejects = sorted((r["source_index"], r["reason"]) for r in table(tmp_path / "wh", "rejects"))
    assert rejects == [
        (2_000_000, "OTLP line not readable: resourceSpans is not a list"),
        (3_000_000, "OTLP line not readable: a resourceSpans element is not an object"),
        (3_000_001, "OTLP line not readable: scopeSpans is not a list"),
        (4_000_001, "OTLP line not readable: a span is not an object"),
    ]


def test_a_har_time_of_zero_or_absent_is_unknown_not_an_instant_answer(tmp_path: Path) -> None:
    zero = har_entry(0)
    zero["time"] = 0
    zero["timings"] = dict.fromkeys(("blocked", "dns", "connect", "send", "wait", "receive"), 0)
    absent = har_entry(1)
    del absent["time"], absent["timings"]
    measured = har_entry(2)  # time 300, send 1 + wait 100 (har_entry's defaults)
    path = tmp_path / "converted.har"
    path.write_bytes(har_document([zero, absent, measured]))
    fr = run([path], tmp_path / "wh").files[0]
    assert (fr.records, fr.accepted) == (3, 3)
    rows = {r["source_index"]: r for r in table(tmp_path / "wh", "requests")}
    timings = [
        (rows[i]["stream"], rows[i]["ttfb_ms"], rows[i]["ttft_ms"], rows[i]["duration_ms"])
        for i in range(3)
    ]
    assert timings == [
        (False, None, None, None),
        (False, None, None, None),
        (False, 101.0, 300.0, 300.0),  # not streamed: the answer came with the whole body
    ]
