"""Every reference sample normalises to exact, hand-computed values.

tests/fixtures/dialects/expected.json is the fixture table (sqlglot style): one entry per file in
tests/fixtures/samples/, with every normalised column worked out by hand from the sample body
and the provider's documented usage semantics (docs/providers.md; the `_how` note says how).
This module builds an Exchange per sample (URL from
the manifest's request_uri, else the dialect's public endpoint), re-framing `.chunks.jsonl`
payload files as the SSE the provider sends, and runs it through `normalise`.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import SAMPLES

from pipeline.normalise import normalise
from pipeline.records import Exchange

EXPECTED_FILE = Path(__file__).resolve().parent / "fixtures" / "dialects" / "expected.json"
EXPECTED: dict[str, dict[str, Any]] = json.loads(EXPECTED_FILE.read_text())
COLUMNS = [
    "provider",
    "api",
    "outcome",
    "usage_status",
    "input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cache_write_1h_tokens",
    "uncached_input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "reported_cost",
    "model",
    "error_type",
]

GEMINI = "https://generativelanguage.googleapis.com/v1beta"
DEFAULT_URLS = {
    "alibaba_": "https://dashscope-intl.aliyuncs.com/compatible-mode/v1/chat/completions",
    "anthropic_": "https://api.anthropic.com/v1/messages",
    "deepseek_": "https://api.deepseek.com/chat/completions",
    "openai_chat_": "https://api.openai.com/v1/chat/completions",
    "openai_error_": "https://api.openai.com/v1/chat/completions",
    "openai_responses_": "https://api.openai.com/v1/responses",
    "gemini_interactions_": f"{GEMINI}/interactions",
    "gemini_error_": f"{GEMINI}/models/gemini-2.5-flash:generateContent",
    "gemini_generate_content_thoughts": f"{GEMINI}/models/gemini-3-pro-preview:generateContent",
    "gemini_stream_text_thoughts": (
        f"{GEMINI}/models/gemini-3-pro-preview:streamGenerateContent?alt=sse"
    ),
}
# HTTP statuses of error samples the manifest does not give.
STATUSES = {"openai_error_insufficient_quota.json": 429, "gemini_error_429_retry_info.json": 429}
# Models named in the request where the response names none (error bodies).
REQUESTED = {
    "anthropic_error_404_not_found.json": "claude-sonet-4-5",
    "deepseek_responses_error_400.json": "deepseek-v4-flash",
    "openai_error_insufficient_quota.json": "gpt-4o-mini",
}


def manifest() -> dict[str, dict[str, Any]]:
    entries = json.loads((SAMPLES / "_manifest.json").read_text())
    return {e["file"]: e for e in entries}


def sample_files() -> list[str]:
    return sorted(
        p.name for p in SAMPLES.iterdir() if p.name not in ("_manifest.json", "PROVENANCE.md")
    )


def url_for(name: str) -> str:
    uri = manifest().get(name, {}).get("request_uri")
    if uri:
        return str(uri)
    for prefix, url in DEFAULT_URLS.items():
        if name.startswith(prefix):
            return url
    raise AssertionError(f"no URL for sample {name}")


def is_stream(name: str) -> bool:
    return name.endswith((".sse", ".chunks.jsonl", ".eventstream"))


def reframe(name: str, raw: bytes) -> bytes:
    """A `.chunks.jsonl` payload file as the SSE body the provider actually sends."""
    out = []
    gemini_sse = name.startswith("gemini_stream")
    for line in raw.splitlines():
        if not line.strip():
            continue
        obj = orjson.loads(line)
        event = obj.get("type") or obj.get("event_type")
        if name.startswith(("anthropic_", "openai_responses_", "gemini_interactions_")) and event:
            out.append(b"event: " + event.encode() + b"\n")
        out.append(b"data: " + line + (b"\r\n\r\n" if gemini_sse else b"\n\n"))
    return b"".join(out)


def request_body(name: str, url: str) -> bytes:
    model = REQUESTED.get(name, "requested-model")
    stream = is_stream(name)
    if "/responses" in url:
        body: dict[str, Any] = {"model": model, "input": "hi", "stream": stream}
    elif "/messages" in url:
        body = {"model": model, "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
        body["stream"] = stream
    elif ":generateContent" in url or ":streamGenerateContent" in url:
        body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    elif "/interactions" in url:
        body = {"model": model, "input": "hi", "stream": stream}
    elif "/converse" in url:
        body = {"messages": [{"role": "user", "content": [{"text": "hi"}]}]}
    else:
        body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    return orjson.dumps(body)


def response_for(name: str) -> tuple[int, list[tuple[str, str]], bytes]:
    raw = (SAMPLES / name).read_bytes()
    entry = manifest().get(name, {})
    status = int(entry.get("status") or STATUSES.get(name, 200))
    if name.endswith(".chunks.jsonl"):
        raw = reframe(name, raw)
    if name.endswith(".eventstream"):
        ctype = "application/vnd.amazon.eventstream"
    elif is_stream(name):
        ctype = "text/event-stream"
    else:
        ctype = "application/json"
    return status, [("content-type", ctype)], raw


def exchange_for(name: str, index: int = 1) -> Exchange:
    url = url_for(name)
    status, headers, body = response_for(name)
    return Exchange(
        source="samples",
        index=index,
        started_at=datetime(2026, 7, 1, 12, 0, tzinfo=UTC),
        method="POST",
        url=url,
        request_headers=[("content-type", "application/json")],
        request_body=request_body(name, url),
        status=status,
        response_headers=headers,
        response_body=body,
        end_ms=100.0,
    )


def test_every_sample_has_an_expected_entry() -> None:
    assert sorted(EXPECTED) == sample_files()
    assert len(EXPECTED) == 51


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_sample_normalises_to_the_hand_computed_values(name: str) -> None:
    row = normalise(exchange_for(name), f"sample:{name}").row
    expected = EXPECTED[name]
    got = {column: row[column] for column in COLUMNS}
    want = {column: expected[column] for column in COLUMNS}
    assert got == want, expected["_how"]


def test_the_gemini_json_array_stream_gives_the_same_numbers_as_alt_sse() -> None:
    # Without ?alt=sse Gemini streams one JSON array of the same chunk objects.
    name = "gemini_stream_text_thoughts.chunks.jsonl"
    chunks = [line for line in (SAMPLES / name).read_bytes().splitlines() if line.strip()]
    ex = exchange_for(name)
    ex.url = ex.url.replace("?alt=sse", "")
    ex.response_body = b"[" + b",\r\n".join(chunks) + b"]"
    ex.response_headers = [("content-type", "application/json")]
    row = normalise(ex, "array").row
    assert (row["input_tokens"], row["output_tokens"], row["reasoning_tokens"]) == (9, 208, 185)
    assert row["outcome"] == "ok"


def test_a_gemini_json_array_cut_mid_element_keeps_earlier_chunks_and_is_interrupted() -> None:
    name = "gemini_stream_text_thoughts.chunks.jsonl"
    chunks = [line for line in (SAMPLES / name).read_bytes().splitlines() if line.strip()]
    ex = exchange_for(name)
    ex.url = ex.url.replace("?alt=sse", "")
    # First two chunks complete, the third cut in half: their counts are running totals that
    # can still change, the prompt count too (running totals until the end), so usage is unknown.
    ex.response_body = b"[" + chunks[0] + b",\n" + chunks[1] + b",\n" + chunks[2][:50]
    row = normalise(ex, "cut").row
    assert row["outcome"] == "interrupted"
    assert (row["usage_status"], row["input_tokens"], row["output_tokens"]) == (
        "missing",
        None,
        None,
    )


def test_bedrock_http_error_type_comes_from_the_amzn_errortype_header() -> None:
    ex = exchange_for("bedrock_converse_stream_error_400.json")
    ex.response_headers.append(
        ("x-amzn-ErrorType", "ValidationException:http://internal.amazon.com/coral/com.amazon/")
    )
    row = normalise(ex, "bedrock-400").row
    assert row["error_type"] == "ValidationException"
    assert row["outcome"] == "http_error"
    assert row["error_message"] == "The provided model identifier is invalid."
