"""Failed requests in a HAR as Chrome DevTools and mitmproxy export them: the reason is kept,
and a request that got no response has no time to first byte."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from test_ingest_support import har_document, har_entry, run, table


def _failed(turn: int, error: str, timings: dict[str, Any], time: float) -> dict[str, Any]:
    """A failed request shaped like the exporters write it: status 0, no headers or body, and
    `_error` inside `response` (mitmproxy savehar; Chrome HARLog.buildResponse)."""
    entry = har_entry(turn)
    entry["response"] = {
        "status": 0,
        "statusText": "",
        "httpVersion": "",
        "headers": [],
        "cookies": [],
        "content": {"size": 0, "mimeType": "x-unknown"},
        "redirectURL": "",
        "headersSize": -1,
        "bodySize": -1,
        "_transferSize": 0,
        "_error": error,
    }
    entry["timings"] = timings
    entry["time"] = time
    return entry


def _rows(tmp_path: Path, entries: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    path = tmp_path / "failed.har"
    path.write_bytes(har_document(entries))
    result = run([path], tmp_path / "wh")
    assert (result.files[0].accepted, result.files[0].rejected) == (len(entries), 0)
    return {r["source_index"]: r for r in table(tmp_path / "wh", "requests")}


MITMPROXY_KILLED = _failed(
    0,
    "Connection killed.",
    {"connect": 10.0, "ssl": None, "send": 2.5, "receive": 0, "wait": 0},
    12.5,
)
CHROME_TIMED_OUT = _failed(
    1,
    "net::ERR_TIMED_OUT",
    {
        "blocked": 30012.0,  # Chrome puts the whole wait that ended in the timeout here
        "dns": -1,
        "ssl": -1,
        "connect": -1,
        "send": 0,
        "wait": 0,
        "receive": 0,
        "_blocked_queueing": -1,
    },
    30012.0,
)


def test_a_failed_entrys_reason_is_read_from_its_response_where_chrome_and_mitmproxy_write_it(
    tmp_path: Path,
) -> None:
    rows = _rows(tmp_path, [MITMPROXY_KILLED, CHROME_TIMED_OUT])
    assert rows[0]["error_message"] == "Connection killed."
    assert rows[1]["error_message"] == "net::ERR_TIMED_OUT"
    for row in rows.values():
        assert (row["status_code"], row["outcome"]) == (None, "interrupted")


def test_a_failed_entry_has_no_time_to_first_byte_but_keeps_its_duration(tmp_path: Path) -> None:
    no_response = har_entry(2)
    del no_response["response"]  # its timings still count up to a "first byte"
    rows = _rows(tmp_path, [MITMPROXY_KILLED, CHROME_TIMED_OUT, no_response])
    assert [rows[i]["ttfb_ms"] for i in range(3)] == [None, None, None]
    assert (rows[0]["duration_ms"], rows[1]["duration_ms"]) == (12.5, 30012.0)


def test_a_response_whose_wait_is_not_applicable_or_absent_has_unknown_time_to_first_byte(
    tmp_path: Path,
) -> None:
    all_unknown = har_entry(0)
    all_unknown["timings"] = dict.fromkeys(("blocked", "dns", "connect", "send", "wait"), -1)
    no_wait = har_entry(1)
    no_wait["timings"] = {"blocked": 3, "send": 1, "receive": 5}
    null_wait = har_entry(2)
    null_wait["timings"] = {"send": 1, "wait": None, "receive": 5}
    known = har_entry(3)  # blocked/dns/connect -1 ("not applicable") count as 0
    known["timings"] = {"blocked": -1, "dns": -1, "connect": -1, "send": 1, "wait": 100}
    rows = _rows(tmp_path, [all_unknown, no_wait, null_wait, known])
    assert [rows[i]["ttfb_ms"] for i in range(4)] == [None, None, None, 101.0]
    assert all(rows[i]["status_code"] == 200 for i in range(4))


def test_a_stream_chrome_saw_fail_after_its_headers_is_interrupted_with_the_reason(
    tmp_path: Path,
) -> None:
    cut = har_entry(4, mime="text/event-stream")
    events = [
        {"id": "c1", "object": "chat.completion.chunk", "model": "gpt-4o",
         "choices": [{"index": 0, "delta": {"content": "Hel"}, "finish_reason": None}]},
    ]  # fmt: skip
    cut["response"]["content"]["text"] = "".join(f"data: {json.dumps(e)}\n\n" for e in events)
    cut["response"]["_error"] = "net::ERR_INCOMPLETE_CHUNKED_ENCODING"
    row = _rows(tmp_path, [cut])[0]
    assert (row["status_code"], row["outcome"], row["usage_status"]) == (
        200,
        "interrupted",
        "missing",
    )
    assert row["error_message"] == "net::ERR_INCOMPLETE_CHUNKED_ENCODING"
