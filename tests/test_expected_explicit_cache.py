"""A Gemini request naming an explicit cache (`cachedContent`) reads a cache made outside the
captured traffic (a cachedContents.create call), whose size the request does not show: what the
rules would allow it to read is unknown (NULL), not 0, so report_provider_gap counts it as
unknown instead of showing the provider reading thousands of tokens more than allowed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from pipeline import sql
from pipeline.capture_format import dumps_record, make_record
from pipeline.ingest import ingest
from pipeline.warehouse import Warehouse

T0 = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)
GEMINI = "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent"
POLICY = "Policy text. " * 1500  # about 4900 tokens: above Gemini 2.5 Flash's minimum


def _exchange(
    at: datetime, rid: str, body: dict[str, Any], prompt: int, cached: int, session: str
) -> bytes:
    answer = {
        "candidates": [
            {"content": {"parts": [{"text": "ok"}], "role": "model"}, "finishReason": "STOP"}
        ],
        "usageMetadata": {
            "promptTokenCount": prompt,
            "cachedContentTokenCount": cached,
            "candidatesTokenCount": 2,
            "totalTokenCount": prompt + 2,
        },
        "modelVersion": "gemini-2.5-flash",
    }
    response_body = orjson.dumps(answer)
    record = make_record(
        started_at=at,
        method="POST",
        url=GEMINI,
        request_headers=[("content-type", "application/json"), ("x-goog-api-key", "AIza-x")],
        request_body=orjson.dumps(body),
        status=200,
        response_headers=[("content-type", "application/json")],
        response_body=response_body,
        chunks=[(500.0, len(response_body))],
        first_byte_ms=500.0,
        end_ms=600.0,
        record_id=rid,
        session_id=session,
    )
    return dumps_record(record)


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"text": text}]}


def _capture() -> bytes:
    explicit = {"cachedContent": "cachedContents/abc123", "contents": [_user("Q1")]}
    implicit = {"systemInstruction": {"parts": [{"text": POLICY}]}, "contents": [_user("Q1")]}
    return b"".join(
        [
            # a reproduction: the explicit cache is read, 4990 of 5000 tokens
            _exchange(T0, "gx-1", explicit, 5000, 4990, "gx"),
            # implicit caching: the second identical request may read the first one's prefix
            _exchange(T0, "gi-1", implicit, 4900, 0, "gi"),
            _exchange(T0 + timedelta(seconds=60), "gi-2", implicit, 4900, 4096, "gi"),
        ]
    )


@pytest.fixture(scope="module")
def wh(tmp_path_factory: pytest.TempPathFactory) -> Warehouse:
    base = tmp_path_factory.mktemp("explicit_cache")
    capture = base / "capture.jsonl"
    capture.write_bytes(_capture())
    warehouse = Warehouse(base / "wh")
    ingest([capture], warehouse, workers=1)
    return warehouse


def _rows(wh: Warehouse, view: str, key: str) -> dict[str, dict[str, Any]]:
    rel = sql.connect(wh, only=[view]).sql(f"SELECT * FROM {view}")
    rows = [dict(zip(rel.columns, row, strict=True)) for row in rel.fetchall()]
    return {str(r[key]): r for r in rows}


def test_a_request_naming_an_explicit_cache_has_an_unknown_expected_read(wh: Warehouse) -> None:
    row = _rows(wh, "expected_cache", "request_id")["gx-1"]
    assert (row["rule_id"], row["cache_read_tokens"]) == ("gemini-2-5-flash", 4990)
    assert row["expected_read_tokens"] is None  # was 0
    assert row["gap_tokens"] is None  # was -4990


def test_implicit_caching_still_has_an_expected_read(wh: Warehouse) -> None:
    rows = _rows(wh, "expected_cache", "request_id")
    assert rows["gi-1"]["expected_read_tokens"] == 0
    assert rows["gi-2"]["expected_read_tokens"] > 4000


def test_request_prefix_says_which_requests_name_an_explicit_cache(wh: Warehouse) -> None:
    rows = _rows(wh, "request_prefix", "request_id")
    assert {k: v["explicit_cache"] for k, v in rows.items()} == {
        "gx-1": True,
        "gi-1": False,
        "gi-2": False,
    }


def test_the_provider_gap_counts_an_explicit_cache_read_as_unknown(wh: Warehouse) -> None:
    (row,) = _rows(wh, "report_provider_gap", "series").values()
    assert (row["requests"], row["requests_unknown"]) == (3, 1)  # was 3, 0
    # the implicit reads only: gx-1's 4990 tokens against an expected 0 are left out
    assert row["reported_read_tokens"] == 4096
    assert row["gap_tokens"] == row["expected_read_tokens"] - 4096
