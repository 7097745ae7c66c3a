"""A full capture disk never changes what the client receives: the proxy and the SDK hooks pass
the upstream's bytes through unchanged, count what they could not record, say so on stderr
(rate-limited), and once space is back every record in the file is a whole JSON line."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from fixtures.capture.harness import recording_proxy, serving

from pipeline.capture import writer as writer_module
from pipeline.capture.hooks import recording_client
from pipeline.capture.writer import CaptureWriter, shared_writer

CHAT = "/v1/chat/completions"
BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}


class FullDisk:
    """Stands in for `os.write` on capture files: while `full`, the first call of a record
    writes `tear` bytes (a torn record, as a disk filling mid-write leaves) and then every
    call fails with ENOSPC, as the kernel does."""

    def __init__(self, tear: int = 17) -> None:
        self.full = False
        self.tear = tear
        self.torn = 0

    def __call__(self, fd: int, data: Any) -> int:
        if not self.full:
            return os.write(fd, data)
        if self.torn == 0 and len(data) > self.tear:
            self.torn += 1
            return os.write(fd, bytes(data[: self.tear]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> FullDisk:
    fake = FullDisk()
    monkeypatch.setattr(writer_module, "_os_write", fake)
    return fake


ANSWER = (
    b'{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o","choices":[{"index":0,'
    b'"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10,'
    b'"prompt_tokens_details":{"cached_tokens":0}}}'
)


async def _upstream_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """A loopback provider answering every chat call with ANSWER."""
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": ANSWER})


@pytest.fixture(scope="module")
def upstream() -> Iterator[Any]:
    with serving(_upstream_app) as server:
        yield server


def _direct(upstream: Any) -> bytes:
    """What the upstream answers with nobody in between: what the client must receive."""
    response = httpx.post(upstream.url + CHAT, json=BODY, timeout=10)
    assert response.status_code == 200 and response.content
    return response.content


def _lines(paths: list[Path]) -> list[bytes]:
    return [line for p in dict.fromkeys(paths) for line in p.read_bytes().splitlines() if line]


def _whole_records(paths: list[Path]) -> list[dict[str, Any]]:
    records = []
    for line in _lines(paths):
        try:
            records.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            continue
    return records


def test_a_write_torn_by_a_full_disk_is_isolated_and_the_next_record_is_whole(
    tmp_path: Path, disk: FullDisk
) -> None:
    warnings: list[str] = []
    writer = CaptureWriter(tmp_path, fsync="never", warn=warnings.append, warn_every=3600)
    pad = "x" * 40
    assert writer.write_record({"n": 1, "pad": pad})
    disk.full = True
    for n in range(2, 6):  # four records fail: one torn, three not written at all
        assert not writer.write_record({"n": n, "pad": pad})  # the caller is told
    disk.full = False
    writer.write_record({"n": 6, "pad": pad})
    writer.close()

    assert writer.failed == 4
    assert len(warnings) == 2  # rate-limited: the first failure, and at close the rest
    assert "could not record 1 exchange(s)" in warnings[0]
    assert "No space left on device" in warnings[0]
    assert "could not record 3 more exchange(s)" in warnings[1]
    assert "(4 unrecorded in total)" in warnings[1]
    lines = _lines(writer.paths)
    assert len(lines) == 3  # the good one, the fragment alone, the good one after recovery
    assert orjson.loads(lines[0]) == {"n": 1, "pad": pad}
    assert lines[1] == orjson.dumps({"n": 2, "pad": pad})[:17]
    assert orjson.loads(lines[2]) == {"n": 6, "pad": pad}


def test_the_proxy_passes_the_upstreams_bytes_through_a_full_capture_disk(
    tmp_path: Path, disk: FullDisk, upstream: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = _direct(upstream)
    with recording_proxy(upstream.url, tmp_path / "capture", verbose=False) as (proxy, app):
        before = httpx.post(proxy.url + CHAT, json=BODY, timeout=10)
        disk.full = True
        during = [httpx.post(proxy.url + CHAT, json=BODY, timeout=10) for _ in range(5)]
        disk.full = False
        after = [httpx.post(proxy.url + CHAT, json=BODY, timeout=10) for _ in range(2)]
        failed = app.writer.failed
        paths = list(app.writer.paths)

    for response in [before, *during, *after]:
        assert response.status_code == 200
        assert response.content == expected
    assert failed == 5
    # the five are not counted as recorded (the final line of `capture proxy` says both)
    assert app.stats.recorded == 3 and app.stats.outcomes["not recorded"] == 5
    stderr = capsys.readouterr().err
    assert stderr.count("capture: could not record 1 exchange(s)") == 1
    assert "could not record 4 more exchange(s)" in stderr  # said when the writer closed
    assert "No space left on device" in stderr
    lines = _lines(paths)
    assert len(lines) == 4  # before, the torn fragment alone, and both after recovery
    records = _whole_records(paths)
    assert len(records) == 3  # no good exchange lost to the fragment
    assert all(r["response"]["body"].encode() == expected for r in records)


def test_an_sdk_hook_returns_the_response_through_a_full_capture_disk(
    tmp_path: Path, disk: FullDisk, upstream: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "capture"
    expected = _direct(upstream)
    client = recording_client(out)
    disk.full = True
    during = [client.post(upstream.url + CHAT, json=BODY) for _ in range(3)]
    for response in during:
        assert response.read() == expected
    disk.full = False
    after = client.post(upstream.url + CHAT, json=BODY)
    assert after.read() == expected
    client.close()
    writer = shared_writer(out)
    writer.flush()

    assert writer.failed == 3
    assert "capture: could not record" in capsys.readouterr().err
    records = _whole_records(writer.paths)
    assert len(records) == 1
    assert records[0]["response"]["body"].encode() == expected
    writer.close()  # says the failures after its warning now, not when the test run exits
    assert "could not record 2 more exchange(s)" in capsys.readouterr().err


def test_the_otlp_receiver_answers_503_for_an_export_it_could_not_write(
    tmp_path: Path, disk: FullDisk
) -> None:
    # an OTLP exporter sends an export again after a 503; after a 200 it is gone for good
    from pipeline.capture.otlp_receiver import OtlpReceiver

    writer = CaptureWriter(tmp_path / "otlp", prefix="otlp", warn=lambda line: None)
    app = OtlpReceiver(writer, log=lambda line: None)
    export = {"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "chat"}]}]}]}
    try:
        with serving(app) as server:
            url = f"{server.url}/v1/traces"
            assert httpx.post(url, json=export, timeout=10).status_code == 200
            disk.full = True
            refused = httpx.post(url, json=export, timeout=10)
            disk.full = False
            again = httpx.post(url, json=export, timeout=10)
    finally:
        writer.close()
    assert refused.status_code == 503 and again.status_code == 200
    assert (app.exports, app.unwritten) == (2, 1)
