"""`cacheaudit capture otlp`: the official OpenTelemetry Python SDK's OTLP/HTTP exporter
(protobuf, gzip) and a plain OTLP/JSON post reach the receiver, whose lines `cacheaudit ingest`
turns into `requests` rows with the usage the spans carried."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from fixtures.capture.harness import ServerThread, ingest_rows, serving
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind

from pipeline.capture.otlp_receiver import OtlpReceiver
from pipeline.capture.writer import CaptureWriter

SECRET = "sk-otlp-secret-0123456789abcdef"
FIXTURE = Path(__file__).parent / "fixtures" / "otlp" / "genai_spans.jsonl"


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[tuple[ServerThread, OtlpReceiver, Path]]:
    out = tmp_path / "otlp"
    writer = CaptureWriter(out, prefix="otlp")
    app = OtlpReceiver(writer, log=lambda line: None)
    try:
        with serving(app) as server:
            yield server, app, out
    finally:
        writer.close()


def _lines(out: Path) -> list[dict[str, Any]]:
    return [
        orjson.loads(line)
        for f in sorted(out.glob("*.jsonl"))
        for line in f.read_bytes().splitlines()
    ]


def test_spans_from_the_opentelemetry_sdk_exporter_become_requests_with_their_usage(
    receiver: tuple[ServerThread, OtlpReceiver, Path], tmp_path: Path
) -> None:
    server, app, out = receiver
    exporter = OTLPSpanExporter(endpoint=f"{server.url}/v1/traces", compression=Compression.Gzip)
    provider = TracerProvider(resource=Resource.create({"service.name": "agent"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("chat gpt-4o", kind=SpanKind.CLIENT) as span:
        span.set_attributes(
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.response.model": "gpt-4o-2024-08-06",
                "gen_ai.usage.input_tokens": 2000,
                "gen_ai.usage.cache_read.input_tokens": 1536,
                "gen_ai.usage.output_tokens": 50,
                "server.address": "api.openai.com",
                "http.request.header.authorization": f"Bearer {SECRET}",
            }
        )
        trace_id = format(span.get_span_context().trace_id, "032x")
        span_id = format(span.get_span_context().span_id, "016x")
    provider.shutdown()
    assert (app.exports, app.spans) == (1, 1)

    [line] = _lines(out)
    [written] = line["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert (written["traceId"], written["spanId"]) == (trace_id, span_id)  # hex, as OTLP/JSON
    attrs = {a["key"]: a["value"] for a in written["attributes"]}
    assert attrs["http.request.header.authorization"] == {"stringValue": "[REDACTED]"}
    for f in out.glob("*"):
        assert SECRET.encode() not in f.read_bytes()

    _, rows = ingest_rows(sorted(out.glob("*.jsonl")), tmp_path / "wh")
    [row] = rows
    # OpenAI's input count includes the cached tokens: 2000 in all, 1536 of them read.
    assert (row["provider"], row["model"]) == ("openai", "gpt-4o-2024-08-06")
    assert (row["input_tokens"], row["cache_read_tokens"], row["output_tokens"]) == (2000, 1536, 50)
    assert row["uncached_input_tokens"] == 2000 - 1536


def test_an_otlp_json_export_gzip_posted_is_written_as_received(
    receiver: tuple[ServerThread, OtlpReceiver, Path], tmp_path: Path
) -> None:
    server, _, out = receiver
    export = FIXTURE.read_bytes().splitlines()[0]
    response = httpx.post(
        f"{server.url}/v1/traces",
        content=gzip.compress(export),
        headers={"content-type": "application/json", "content-encoding": "gzip"},
    )
    assert response.status_code == 200 and response.json() == {}
    assert _lines(out) == [json.loads(export)]
    _, rows = ingest_rows(sorted(out.glob("*.jsonl")), tmp_path / "wh")
    _, direct_rows = ingest_rows([FIXTURE], tmp_path / "wh-direct")
    first = {r["request_id"] for r in rows}
    expected = [r for r in direct_rows if r["request_id"] in first]
    assert rows and len(rows) == len(expected)
    key = ("input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens")
    assert sorted(tuple(r[k] for k in key) for r in rows) == sorted(
        tuple(r[k] for k in key) for r in expected
    )
    # The fixture's first span (Anthropic): 1532 input, 1111 read, 418 written, 33 output.
    assert (1532, 1111, 418, 33) in {tuple(r[k] for k in key) for r in rows}


def test_what_is_not_a_trace_export_is_refused_and_nothing_is_written(
    receiver: tuple[ServerThread, OtlpReceiver, Path],
) -> None:
    server, app, out = receiver
    url = f"{server.url}/v1/traces"
    assert httpx.get(url).status_code == 405
    assert httpx.post(f"{server.url}/v1/metrics", content=b"{}").status_code == 404
    plain = httpx.post(url, content=b"hello", headers={"content-type": "text/plain"})
    assert plain.status_code == 415
    bad = httpx.post(
        url, content=b"\xff\xff\xff", headers={"content-type": "application/x-protobuf"}
    )
    assert bad.status_code == 400
    not_gzip = httpx.post(
        url, content=b"{}", headers={"content-type": "application/json", "content-encoding": "gzip"}
    )
    assert not_gzip.status_code == 400
    assert app.exports == 0
    assert _lines(out) == []


def test_query_strings_and_a_stack_trace_lose_their_credentials_before_the_file(
    receiver: tuple[ServerThread, OtlpReceiver, Path],
) -> None:
    server, _, out = receiver
    token, code, password = "q7Zp3Lr8Tn2Vw5Yc1Xk", "Zm9vYmFyYmF6cXV4enp6", "c0rrect-h0rse-9"

    def attr(key: str, value: str) -> dict[str, Any]:
        return {"key": key, "value": {"stringValue": value}}

    stack = f'Traceback:\n  File "app.py", line 3\n    DB_PASSWORD="{password}"\nValueError'
    span = {
        "traceId": "0" * 31 + "1",
        "spanId": "0" * 15 + "1",
        "name": "chat",
        "attributes": [
            attr("http.target", f"/v1/chat?access_token={token}&v=1"),
            attr("url.query", f"code={code}&v=1"),
        ],
        "events": [{"name": "exception", "attributes": [attr("exception.stacktrace", stack)]}],
    }
    export = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
    response = httpx.post(f"{server.url}/v1/traces", json=export)
    assert response.status_code == 200
    written = b"".join(f.read_bytes() for f in out.glob("*.jsonl"))
    for secret in (token, code, password):
        assert secret.encode() not in written, secret
    attrs = {
        a["key"]: a["value"]["stringValue"]
        for a in _lines(out)[0]["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"]
    }
    assert attrs == {
        "http.target": "/v1/chat?access_token=[REDACTED]&v=1",
        "url.query": "code=[REDACTED]&v=1",
    }
