"""A key the model echoes back in a streamed answer is cut across events (`sk-proj` in one, the
rest in the next): no one event shows a key's shape, so each piece is masked where it lies,
found in the answer's text put back together. Every event stays valid JSON, every byte count
the same."""

from __future__ import annotations

import base64
import itertools
from datetime import UTC, datetime
from pathlib import Path

import httpx
import orjson
from fixtures.capture.fake_upstream import FakeUpstream
from fixtures.capture.harness import capture_lines, ingest_rows, recording_proxy, serving

from pipeline.capture.mitm_flow import FlowSnapshot, snapshot_record
from pipeline.capture_format import dumps_record, make_record
from pipeline.eventstream import encode_message, iter_eventstream
from pipeline.stream_secrets import looks_streamed, mask_event_stream, mask_split_keys

KEY = "sk-proj-Q7rT2mX9vLp4Wd8sKz3NbY6c"  # an OpenAI key's shape, 32 characters


def _pieces(text: str, cuts: list[int]) -> list[str]:
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def _openai_stream(pieces: list[str]) -> bytes:
    events = [
        {"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"content": p}}]} for p in pieces
    ]
    events.append(
        {
            "id": "chatcmpl-1",
            "choices": [],
            "usage": {"prompt_tokens": 20, "completion_tokens": 9, "total_tokens": 29},
        }
    )
    body = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events)
    return body + b"data: [DONE]\n\n"


def _text_of(body: bytes, field: str) -> str:
    """The answer's text as a reader of the stream puts it together."""
    out = []
    for line in body.split(b"\n"):
        if line.startswith(b"data: {"):
            event = orjson.loads(line[6:])
            for choice in event.get("choices", []):
                out.append(choice["delta"].get(field, ""))
    return "".join(out)


def _eight_char_pieces(key: str) -> list[bytes]:
    return [key[i : i + 8].encode() for i in range(len(key) - 7)]


def test_a_key_cut_across_three_openai_events_is_masked_in_each_of_them() -> None:
    answer = f"Your key is {KEY}, keep it safe."
    start = answer.index("sk-")
    body = _openai_stream(_pieces(answer, [start + 7, start + 19, start + 30]))
    masked = mask_split_keys(body)

    assert len(masked) == len(body)
    for piece in _eight_char_pieces(KEY):
        assert piece not in masked
    text = _text_of(masked, "content")  # every event still parses
    assert text == "Your key is " + "*" * len(KEY) + ", keep it safe."


def test_a_stream_without_a_secret_is_returned_as_it_came() -> None:
    body = _openai_stream(_pieces("the task-runner and sk-short are fine", [5, 12, 22]))
    assert mask_split_keys(body) is body


def test_escaped_characters_of_a_key_are_masked_whole() -> None:
    # A writer may escape any character: `\u002d` is `-`, and the mask covers all six bytes.
    first = b'data: {"choices":[{"delta":{"content":"key: sk\\u002dproj"}}]}\n\n'
    second = b'data: {"choices":[{"delta":{"content":"-Q7rT2mX9vLp4Wd8sKz3NbY6c done"}}]}\n\n'
    masked = mask_split_keys(first + second)
    assert len(masked) == len(first + second)
    assert b"\\u002d" not in masked and b"Q7rT2mX9" not in masked
    assert _text_of(masked, "content") == "key: " + "*" * 12 + "*" * 25 + " done"


def test_a_credential_written_across_anthropic_tool_input_pieces_is_masked() -> None:
    # Tool input streams as pieces of JSON text (`partial_json`), escaped once more in the event.
    pieces = ['{"command": "export DB_PASS', "WORD=hunter2horse", ' && make"}']
    events = [
        {"type": "content_block_delta", "index": 1,
         "delta": {"type": "input_json_delta", "partial_json": p}}
        for p in pieces
    ]  # fmt: skip
    body = b"".join(
        b"event: content_block_delta\ndata: " + orjson.dumps(e) + b"\n\n" for e in events
    )
    masked = mask_split_keys(body)
    assert b"hunter2" not in masked and len(masked) == len(body)
    joined = "".join(
        orjson.loads(line[6:])["delta"]["partial_json"]
        for line in masked.split(b"\n")
        if line.startswith(b"data: ")
    )
    assert joined == '{"command": "export DB_PASSWORD=' + "*" * 12 + ' && make"}'


def test_a_gemini_json_array_stream_is_read_as_pieces_too() -> None:
    chunks = [
        {"candidates": [{"content": {"parts": [{"text": p}], "role": "model"}}]}
        for p in ["Use AIzaSyD4", "x9Q2mV7pLk3Rt8Wn6Yb1Zc5Hj0Fg", " in the header."]
    ]
    body = orjson.dumps(chunks)
    assert looks_streamed(body)
    masked = mask_split_keys(body)
    parts = [c["candidates"][0]["content"]["parts"][0]["text"] for c in orjson.loads(masked)]
    assert "".join(parts) == "Use " + "*" * 36 + " in the header."


def test_a_split_key_never_reaches_the_capture_file_through_the_proxy(tmp_path: Path) -> None:
    answer = f"Here it is: {KEY}"
    start = answer.index("sk-")
    upstream = FakeUpstream(
        first_pause_ms=1,
        gap_ms=1,
        stream_body=_openai_stream(_pieces(answer, [start + 7, start + 21])),
    )
    out = tmp_path / "capture"
    with (
        serving(upstream) as up,
        recording_proxy(up.url, out) as (proxy, _app),
        httpx.Client() as client,
    ):
        messages = [{"role": "user", "content": "k"}]
        request = {"model": "gpt-4o", "stream": True, "messages": messages}
        with client.stream("POST", f"{proxy.url}/v1/chat/completions", json=request) as response:
            received = b"".join(response.iter_bytes())
    assert _text_of(received, "content") == answer  # the client got its answer as sent
    blob = b"\n".join(capture_lines(out))
    for piece in _eight_char_pieces(KEY):
        assert piece not in blob
    record = orjson.loads(capture_lines(out)[0])
    chunk_bytes = sum(n for _, n in record["response"]["chunks"])
    assert chunk_bytes == len(record["response"]["body"].encode()) == len(received)
    _result, rows = ingest_rows(out, tmp_path / "wh")
    assert [(r["input_tokens"], r["output_tokens"]) for r in rows] == [(20, 9)]


def test_a_mitmproxy_flow_of_a_split_key_is_written_without_it() -> None:
    body = _openai_stream(_pieces(f"key={KEY}", [8, 20]))
    snap = FlowSnapshot(
        started_at=1_767_000_000.0,
        method="POST",
        url="https://api.openai.com/v1/chat/completions",
        request_headers=[],
        request_body=b'{"stream": true}',
        status=200,
        response_headers=[("content-type", "text/event-stream")],
        response_body=body,
        chunks=[(1_767_000_000.5, len(body))],
    )
    line = dumps_record(snapshot_record(snap))
    for piece in _eight_char_pieces(KEY):
        assert piece not in line


def _converse_stream(pieces: list[str]) -> bytes:
    """A Bedrock ConverseStream answer: one contentBlockDelta message per piece."""
    head = {":message-type": "event", ":content-type": "application/json"}
    body = encode_message({**head, ":event-type": "messageStart"}, b'{"role":"assistant"}')
    for p in pieces:
        delta = {"contentBlockIndex": 0, "delta": {"text": p}}
        body += encode_message({**head, ":event-type": "contentBlockDelta"}, orjson.dumps(delta))
    usage = {"usage": {"inputTokens": 20, "outputTokens": 9, "totalTokens": 29}, "metrics": {}}
    return body + encode_message({**head, ":event-type": "metadata"}, orjson.dumps(usage))


def _invoke_model_stream(pieces: list[str]) -> bytes:
    """A Bedrock InvokeModel response stream: each chunk a PayloadPart whose base64 holds one
    Anthropic stream event."""
    head = {":message-type": "event", ":content-type": "application/json", ":event-type": "chunk"}
    events = [
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}}
        for p in pieces
    ]
    return b"".join(
        encode_message(head, orjson.dumps({"bytes": base64.b64encode(orjson.dumps(e)).decode()}))
        for e in events
    )


def _event_texts(body: bytes) -> str:
    """The answer's text, read through the event stream's framing (every CRC checked)."""
    out = []
    for message in iter_eventstream(body):
        event = orjson.loads(message.payload)
        if "bytes" in event:
            event = orjson.loads(base64.b64decode(event["bytes"]))
        out.append(event.get("delta", {}).get("text", ""))
    return "".join(out)


def test_a_key_cut_across_converse_stream_messages_is_masked_with_each_crc_made_again() -> None:
    answer = f"Your key is {KEY}."
    start = answer.index("sk-")
    body = _converse_stream(_pieces(answer, [start + 5, start + 17]))
    masked = mask_event_stream(body)
    assert len(masked) == len(body)
    for piece in _eight_char_pieces(KEY):
        assert piece not in masked
    assert _event_texts(masked) == "Your key is " + "*" * len(KEY) + "."


def test_a_key_inside_invoke_model_base64_chunks_is_masked_and_encoded_again() -> None:
    # whole in one chunk or cut across two: base64 hides it from any masking of the raw bytes
    for cuts in ([], [13]):
        body = _invoke_model_stream(_pieces(f"key={KEY} ok", cuts))
        masked = mask_event_stream(body)
        assert len(masked) == len(body)
        assert _event_texts(masked) == "key=" + "*" * len(KEY) + " ok"


def test_a_recorded_bedrock_stream_keeps_no_key_and_still_gives_its_usage(tmp_path: Path) -> None:
    body = _converse_stream(_pieces(f"use {KEY}", [9, 20]))
    record = make_record(
        started_at=datetime(2026, 11, 16, 9, tzinfo=UTC),
        method="POST",
        url="https://bedrock-runtime.us-east-1.amazonaws.com/model/m/converse-stream",
        request_headers=[("content-type", "application/json")],
        request_body=b'{"messages":[{"role":"user","content":[{"text":"k"}]}]}',
        status=200,
        response_headers=[("content-type", "application/vnd.amazon.eventstream")],
        response_body=body,
    )
    stored = base64.b64decode(record["response"]["body"])
    assert record["response"]["body_encoding"] == "base64"
    for piece in _eight_char_pieces(KEY):
        assert piece not in stored
    capture = tmp_path / "c.jsonl"
    capture.write_bytes(dumps_record(record))
    _result, rows = ingest_rows([capture], tmp_path / "wh")
    assert [(r["input_tokens"], r["output_tokens"]) for r in rows] == [(20, 9)]
