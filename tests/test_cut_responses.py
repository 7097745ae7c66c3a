"""Exchanges the capture saw cut: a body that ends inside its JSON (or inside a UTF-8 sequence) is
an interrupted request with unknown usage, and a client that left before the response headers
is interrupted too, not a provider error. Neither is a reject: nothing is lost from the counts."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from test_ingest_support import capture_record, line, run, table

ANTHROPIC_URL = "https://api.anthropic.com/v1/messages"


def _ingest(tmp_path: Path, records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    capture = tmp_path / "c.jsonl"
    capture.write_bytes(b"".join(map(line, records)))
    result = run([capture], tmp_path / "wh", workers=1)
    assert result.total("rejected") == 0, table(tmp_path / "wh", "rejects")
    return {r["request_id"]: r for r in table(tmp_path / "wh", "requests")}


def _cut(record: dict[str, Any], keep: int, outcome: str = "interrupted") -> dict[str, Any]:
    record["response"]["body"] = record["response"]["body"][:keep]
    record["outcome"] = outcome
    record["error"] = "upstream stream ended early (100 of 212 bytes)"
    return record


def test_a_plain_json_body_cut_short_is_an_interrupted_row_with_unknown_usage(
    tmp_path: Path,
) -> None:
    rows = _ingest(tmp_path, [_cut(capture_record(1, record_id="short"), 60)])
    row = rows["short"]
    assert (row["outcome"], row["usage_status"], row["status_code"]) == (
        "interrupted",
        "missing",
        200,
    )
    assert row["input_tokens"] is None and row["output_tokens"] is None
    assert row["error_message"].startswith("upstream stream ended early")


def test_an_anthropic_body_cut_inside_a_utf8_character_is_an_interrupted_row(
    tmp_path: Path,
) -> None:
    record = capture_record(2, record_id="utf8", url=ANTHROPIC_URL)
    body = (
        '{"id":"msg_1","type":"message","role":"assistant",'
        '"content":[{"type":"text","text":"Grüße"}]}'
    ).encode()
    cut = body[: body.index("ü".encode()) + 1]  # half of the ü
    record["response"]["body"] = base64.b64encode(cut).decode()
    record["response"]["body_encoding"] = "base64"
    record["outcome"] = "client_disconnected"
    row = _ingest(tmp_path, [record])["utf8"]
    assert (row["outcome"], row["usage_status"]) == ("interrupted", "missing")


def test_a_client_that_left_before_the_headers_is_interrupted_not_an_http_error(
    tmp_path: Path,
) -> None:
    record = capture_record(3, record_id="gone")
    record["response"] = None
    record["outcome"] = "client_disconnected"
    record["error"] = "client disconnected before the response headers"
    row = _ingest(tmp_path, [record])["gone"]
    assert (row["outcome"], row["status_code"], row["error_type"]) == ("interrupted", None, None)
    assert row["usage_status"] == "missing"


def test_an_unreadable_body_the_capture_saw_complete_is_still_a_reject(tmp_path: Path) -> None:
    record = capture_record(4, record_id="bad")
    record["response"]["body"] = record["response"]["body"][:60]  # no outcome: complete
    capture = tmp_path / "c.jsonl"
    capture.write_bytes(line(record))
    result = run([capture], tmp_path / "wh", workers=1)
    assert result.total("rejected") == 1
    (reject,) = table(tmp_path / "wh", "rejects")
    assert "response not understood" in reject["reason"]
