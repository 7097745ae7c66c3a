"""Builders for ingest tests: raw capture lines and HAR entries, written as a client would see
them (secrets included: these files are the *input*, before redaction)."""

from __future__ import annotations

import base64
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq

from pipeline import sql
from pipeline.capture_format import dumps_record, make_record
from pipeline.ingest import ingest
from pipeline.warehouse import Warehouse

OPENAI_URL = "https://api.openai.com/v1/chat/completions"


def request_body(turn: int) -> bytes:
    return orjson.dumps(
        {
            "model": "gpt-4.1-mini",
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": f"question {turn}"},
            ],
        }
    )


def response_body(prompt_tokens: int, cached: int) -> bytes:
    return orjson.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": "gpt-4.1-mini-2025-04-14",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "ok"},
                    "finish_reason": "stop",
                }
            ],
            "usage": chat_usage(prompt_tokens, cached),
        }
    )


def chat_usage(prompt_tokens: int, cached: int) -> dict[str, Any]:
    """OpenAI chat usage: `cached` of `prompt_tokens` read from the cache, 3 tokens out."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": 3,
        "total_tokens": prompt_tokens + 3,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def chat_line(
    at: datetime,
    rid: str,
    body: dict[str, Any],
    usage: dict[str, Any],
    *,
    session_id: str | None = None,
) -> bytes:
    """One capture JSONL line: an OpenAI chat completion request `body` sent at `at`, answered
    "Done." (JSON, not streamed) with this `usage`, as the capture tools record it."""
    answer = {
        "id": rid,
        "object": "chat.completion",
        "model": body["model"],
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Done."},
                "finish_reason": "stop",
            }
        ],
        "usage": usage,
    }
    record = make_record(
        started_at=at,
        method="POST",
        url=OPENAI_URL,
        request_headers=[("content-type", "application/json"), ("authorization", "Bearer sk-x")],
        request_body=orjson.dumps(body),
        status=200,
        response_headers=[("content-type", "application/json")],
        response_body=orjson.dumps(answer),
        end_ms=400.0,
        record_id=rid,
        session_id=session_id,
    )
    return dumps_record(record)


def capture_record(
    turn: int,
    *,
    headers: list[list[str]] | None = None,
    url: str = OPENAI_URL,
    body: bytes | None = None,
    record_id: str | None = None,
) -> dict[str, Any]:
    raw = request_body(turn) if body is None else body
    try:
        text, encoding = raw.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        text, encoding = base64.b64encode(raw).decode(), "base64"
    return {
        "schema_version": 1,
        "id": record_id,
        "started_at": f"2026-11-16T08:{turn // 60 % 60:02d}:{turn % 60:02d}.000000Z",
        "request": {
            "method": "POST",
            "url": url,
            "headers": headers or [["content-type", "application/json"]],
            "body": text,
            "body_encoding": encoding,
        },
        "response": {
            "status": 200,
            "headers": [["content-type", "application/json"]],
            "body": response_body(1000 + turn, 512).decode(),
            "body_encoding": "utf-8",
            "chunks": None,
        },
        "timing": {"response_headers_ms": 100.0, "first_byte_ms": 120.0, "end_ms": 300.0},
        "hints": {"session_id": "s1", "agent": "a", "tags": []},
    }


def line(record: dict[str, Any]) -> bytes:
    return orjson.dumps(record) + b"\n"


def har_entry(
    turn: int,
    *,
    method: str = "POST",
    url: str = OPENAI_URL,
    headers: list[dict[str, str]] | None = None,
    mime: str = "application/json",
) -> dict[str, Any]:
    post = {"mimeType": "application/json", "text": request_body(turn).decode()}
    content = {"size": 10, "mimeType": mime, "text": response_body(1000 + turn, 512).decode()}
    if method == "GET":
        content = {"size": 4, "mimeType": mime, "text": "iVBORw==", "encoding": "base64"}
    request: dict[str, Any] = {
        "method": method,
        "url": url,
        "httpVersion": "HTTP/1.1",
        "headers": headers or [{"name": "content-type", "value": "application/json"}],
        "queryString": [],
        "cookies": [],
        "headersSize": -1,
        "bodySize": -1,
    }
    if method == "POST":
        request["postData"] = post
    return {
        "startedDateTime": f"2026-11-16T08:00:{turn % 60:02d}.000Z",
        "time": 300,
        "request": request,
        "response": {
            "status": 200,
            "statusText": "OK",
            "httpVersion": "HTTP/1.1",
            "headers": [{"name": "content-type", "value": mime}],
            "cookies": [],
            "content": content,
            "redirectURL": "",
            "headersSize": -1,
            "bodySize": -1,
        },
        "cache": {},
        "timings": {"blocked": -1, "dns": -1, "connect": -1, "send": 1, "wait": 100, "receive": 5},
    }


def har_document(entries: list[dict[str, Any]], *, pretty: bool = False) -> bytes:
    doc = {
        "log": {
            "version": "1.2",
            "creator": {"name": "test", "version": "1"},
            "pages": [
                {"id": "page_1", "title": "chat [1]", "startedDateTime": "2026-11-16T08:00:00Z"}
            ],
            "entries": entries,
        }
    }
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2 if pretty else 0)


def table(wh: Path, name: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for path in Warehouse(wh).files(name):
        rows.extend(pq.read_table(path).to_pylist())
    return rows


def run(paths: list[Path], wh: Path, **kwargs: Any) -> Any:
    return ingest(paths, Warehouse(wh), **kwargs)


def ingested_rows(capture: Path, wh: Path, query: str) -> dict[str, dict[str, Any]]:
    """Ingest `capture` into a new warehouse and run `query` over its views: rows by their first
    column (a request id), each as {column: value}."""
    warehouse = Warehouse(wh)
    ingest([capture], warehouse, workers=1)
    rel = sql.connect(warehouse).sql(query)
    return {str(r[0]): dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()}
