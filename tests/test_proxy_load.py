"""Load: 200 concurrent streams through the proxy, zero lost or corrupted records."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import orjson
from fixtures.capture.fake_upstream import OPENAI_STREAM, FakeUpstream, sample_bytes
from fixtures.capture.harness import capture_lines, ingest_rows, recording_proxy, serving

CONCURRENT = 200


async def _one(client: httpx.AsyncClient, url: str, i: int) -> bytes:
    body = {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": f"request {i}"}],
        "stream": True,
    }
    async with client.stream("POST", url, json=body) as response:
        assert response.status_code == 200
        return b"".join([chunk async for chunk in response.aiter_raw()])


async def _all(url: str) -> list[bytes]:
    limits = httpx.Limits(max_connections=CONCURRENT)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:
        return await asyncio.gather(*(_one(client, url, i) for i in range(CONCURRENT)))


def test_200_concurrent_streams_are_all_recorded_whole_and_ingest_cleanly(tmp_path: Path) -> None:
    out = tmp_path / "capture"
    expected = sample_bytes(OPENAI_STREAM)
    upstream = FakeUpstream(first_pause_ms=20, gap_ms=3)
    started = time.perf_counter()
    with serving(upstream) as up, recording_proxy(up.url, out, verbose=False) as (proxy, app):
        bodies = asyncio.run(_all(proxy.url + "/v1/chat/completions"))
        paths = list(app.writer.paths)
    elapsed = time.perf_counter() - started
    assert all(body == expected for body in bodies)

    lines = capture_lines(out)
    assert len(lines) == CONCURRENT  # one line per exchange, none torn or merged
    records = [orjson.loads(line) for line in lines]
    prompts = sorted(orjson.loads(r["request"]["body"])["messages"][0]["content"] for r in records)
    assert prompts == sorted(f"request {i}" for i in range(CONCURRENT))
    assert {r["outcome"] for r in records} == {"complete"}
    assert all(r["response"]["body"].encode() == expected for r in records)
    assert len({r["id"] for r in records}) == CONCURRENT

    result, rows = ingest_rows(paths, tmp_path / "wh")
    assert (result.total("records"), result.total("accepted")) == (CONCURRENT, CONCURRENT)
    assert len(rows) == CONCURRENT
    # Every stream's usage chunk: prompt_tokens 14, completion_tokens 30.
    assert {(r["input_tokens"], r["output_tokens"], r["outcome"]) for r in rows} == {(14, 30, "ok")}
    print(f"{CONCURRENT} concurrent streams through the proxy in {elapsed:.1f}s")
