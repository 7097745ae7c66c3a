"""The bench capture in every input format we accept: capture JSONL, HAR 1.2, OTLP/JSON.

`make_capture` concatenates `pipeline.demo.write_demo` runs with different seeds (so content is
not repeated across blocks, as it would not be in real traffic) and renames record and session
ids per block so they stay unique. `to_har` and `to_otlp` convert the same records, streaming,
so the three files carry the same exchanges.
"""

from __future__ import annotations

import base64
import tempfile
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from pipeline.demo import write_demo

SESSIONS_PER_BLOCK = 24  # about 62 MB of capture per block


def _block(seed: int, tmpdir: str) -> Path:
    out = Path(tmpdir) / f"block-{seed:04d}.jsonl"
    write_demo(out, seed=seed, sessions=SESSIONS_PER_BLOCK)
    tag = f"b{seed:04d}-".encode()
    data = out.read_bytes()
    data = data.replace(b'"id":"demo-', b'"id":"' + tag + b"demo-")
    data = data.replace(b'"session_id":"', b'"session_id":"' + tag)
    out.write_bytes(data)
    return out


def make_capture(out: Path, target_bytes: int, workers: int = 2) -> int:
    """Write a capture JSONL of at least `target_bytes`; returns its size."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = out.with_name(out.name + ".tmp")
    written = 0
    seed = 1000
    with (
        tempfile.TemporaryDirectory(dir=out.parent) as tmpdir,
        tmp_out.open("wb") as fh,
        ProcessPoolExecutor(max_workers=workers) as pool,
    ):
        while written < target_bytes:
            seeds = list(range(seed, seed + workers))
            seed += workers
            for path in pool.map(_block, seeds, [tmpdir] * len(seeds)):
                if written < target_bytes:
                    with path.open("rb") as block:
                        while data := block.read(16 * 1024 * 1024):
                            fh.write(data)
                            written += len(data)
                path.unlink()
    tmp_out.replace(out)
    return written


def _records(path: Path) -> Iterator[dict[str, Any]]:
    with path.open("rb") as fh:
        for line in fh:
            yield orjson.loads(line)


def _har_content(body: str | None, encoding: str | None, mime: str) -> dict[str, Any]:
    text = body or ""
    out: dict[str, Any] = {"size": len(text), "mimeType": mime, "text": text}
    if encoding == "base64":
        out["encoding"] = "base64"
        out["size"] = len(base64.b64decode(text))
    return out


def _har_headers(headers: list[list[str]]) -> list[dict[str, str]]:
    return [{"name": n, "value": v} for n, v in headers]


def _har_entry(rec: dict[str, Any]) -> dict[str, Any]:
    req = rec["request"]
    resp = rec.get("response") or {}
    timing = rec.get("timing") or {}
    wait = timing.get("first_byte_ms") or 0.0
    end = timing.get("end_ms") or wait
    mime = next((v for n, v in resp.get("headers", []) if n.lower() == "content-type"), "")
    return {
        "startedDateTime": rec["started_at"],
        "time": end,
        "request": {
            "method": req["method"],
            "url": req["url"],
            "httpVersion": "HTTP/1.1",
            "cookies": [],
            "headers": _har_headers(req["headers"]),
            "queryString": [],
            "postData": {"mimeType": "application/json", "text": req["body"]},
            "headersSize": -1,
            "bodySize": len(req["body"]),
        },
        "response": {
            "status": resp.get("status") or 0,
            "statusText": "",
            "httpVersion": "HTTP/1.1",
            "cookies": [],
            "headers": _har_headers(resp.get("headers") or []),
            "content": _har_content(resp.get("body"), resp.get("body_encoding"), mime),
            "redirectURL": "",
            "headersSize": -1,
            "bodySize": -1,
        },
        "cache": {},
        "timings": {
            "blocked": -1,
            "dns": -1,
            "connect": -1,
            "send": 0,
            "wait": wait,
            "receive": max(0.0, end - wait),
        },
    }


def _image_entry(started_at: str, n: int) -> dict[str, Any]:
    """A non-API exchange, as a browser HAR has many: it must count as skipped."""
    return {
        "startedDateTime": started_at,
        "time": 12.0,
        "request": {
            "method": "GET",
            "url": f"https://dashboard.example.com/static/img/{n}.png",
            "httpVersion": "HTTP/1.1",
            "cookies": [],
            "headers": [{"name": "accept", "value": "image/png"}],
            "queryString": [],
            "headersSize": -1,
            "bodySize": 0,
        },
        "response": {
            "status": 200,
            "statusText": "OK",
            "httpVersion": "HTTP/1.1",
            "cookies": [],
            "headers": [{"name": "content-type", "value": "image/png"}],
            "content": {
                "size": 4,
                "mimeType": "image/png",
                "text": "iVBORw==",
                "encoding": "base64",
            },
            "redirectURL": "",
            "headersSize": -1,
            "bodySize": 4,
        },
        "cache": {},
        "timings": {"send": 0, "wait": 10, "receive": 2},
    }


IMAGE_EVERY = 50  # one image entry per 50 API entries


def to_har(src: Path, out: Path) -> tuple[int, int]:
    """Write `src` as a HAR 1.2 document, pretty-printed like browsers do; (api, other) entries."""
    tmp_out = out.with_name(out.name + ".tmp")
    api = other = 0
    with tmp_out.open("wb") as fh:
        fh.write(
            b'{\n  "log": {\n    "version": "1.2",\n    "creator": {"name": "cacheaudit-bench",'
        )
        fh.write(b' "version": "1"},\n    "pages": [],\n    "entries": [\n')
        first = True
        for rec in _records(src):
            entries = [_har_entry(rec)]
            api += 1
            if api % IMAGE_EVERY == 0:
                entries.append(_image_entry(rec["started_at"], api))
                other += 1
            for entry in entries:
                if not first:
                    fh.write(b",\n")
                first = False
                fh.write(orjson.dumps(entry, option=orjson.OPT_INDENT_2))
        fh.write(b"\n    ]\n  }\n}\n")
    tmp_out.replace(out)
    return api, other


def _nanos(iso: str, offset_ms: float) -> str:
    ts = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    return str(int(ts.timestamp() * 1_000_000) * 1000 + int(offset_ms * 1_000_000))


def _attr(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": str(value)}}


def _usage_of(resp_body: str) -> dict[str, Any]:
    """The usage object of a demo response (JSON or SSE)."""
    usage: dict[str, Any] = {}
    if resp_body.startswith("data:"):
        for frame in resp_body.split("\n\n"):
            data = frame[6:]
            if '"usage":{' in data:
                usage = orjson.loads(data)["usage"]
        return usage
    try:
        return orjson.loads(resp_body).get("usage") or {}
    except orjson.JSONDecodeError:
        return {}


def _span(rec: dict[str, Any], n: int) -> dict[str, Any]:
    body = orjson.loads(rec["request"]["body"])
    resp = rec.get("response") or {}
    usage = _usage_of(resp.get("body") or "")
    host = rec["request"]["url"].split("/")[2]
    provider = "deepseek" if "deepseek" in host else "openai"
    attrs = [
        _attr("gen_ai.operation.name", "chat"),
        _attr("gen_ai.provider.name", provider),
        _attr("gen_ai.request.model", body.get("model", "")),
        _attr("gen_ai.response.model", body.get("model", "")),
        _attr("server.address", host),
        _attr("gen_ai.conversation.id", (rec.get("hints") or {}).get("session_id") or ""),
        _attr("gen_ai.input.messages", orjson.dumps(body.get("messages", [])).decode()),
    ]
    if body.get("tools"):
        attrs.append(_attr("gen_ai.tool.definitions", orjson.dumps(body["tools"]).decode()))
    if usage:
        attrs.append(_attr("gen_ai.usage.input_tokens", usage.get("prompt_tokens", 0)))
        attrs.append(_attr("gen_ai.usage.output_tokens", usage.get("completion_tokens", 0)))
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
        if cached is not None:
            attrs.append(_attr("gen_ai.usage.cache_read.input_tokens", cached))
    timing = rec.get("timing") or {}
    status = resp.get("status") or 0
    return {
        "traceId": f"{n:032x}",
        "spanId": f"{n:016x}",
        "name": f"chat {body.get('model', '')}",
        "kind": 3,
        "startTimeUnixNano": _nanos(rec["started_at"], 0.0),
        "endTimeUnixNano": _nanos(rec["started_at"], timing.get("end_ms") or 0.0),
        "attributes": attrs,
        "status": {"code": 2 if status >= 400 else 1},
    }


SPANS_PER_LINE = 16  # the file exporter writes one export batch per line


def to_otlp(src: Path, out: Path) -> int:
    """Write `src` as OTLP/JSON trace export lines (gen_ai semantic conventions); spans."""
    tmp_out = out.with_name(out.name + ".tmp")
    n = 0
    batch: list[dict[str, Any]] = []

    def flush(fh: Any) -> None:
        doc = {
            "resourceSpans": [
                {
                    "resource": {"attributes": [_attr("service.name", "bench-agents")]},
                    "scopeSpans": [{"scope": {"name": "cacheaudit.bench"}, "spans": batch}],
                }
            ]
        }
        fh.write(orjson.dumps(doc) + b"\n")
        batch.clear()

    with tmp_out.open("wb") as fh:
        for rec in _records(src):
            n += 1
            batch.append(_span(rec, n))
            if len(batch) >= SPANS_PER_LINE:
                flush(fh)
        if batch:
            flush(fh)
    tmp_out.replace(out)
    return n
