"""The capture writer: whole lines under concurrency, rotation by size and hour, and crash
leftovers that ingest rejects cleanly without losing the records around them."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path

import orjson
from conftest import SAMPLES
from fixtures.capture.harness import ingest_rows

from pipeline.capture.writer import CaptureWriter
from pipeline.capture_format import dumps_record, make_record


def _record(i: int) -> dict[str, object]:
    body = orjson.dumps(
        {"model": "gpt-4.1-nano", "messages": [{"role": "user", "content": f"hello {i}"}]}
    )
    return make_record(
        record_id=f"rec-{i}",
        started_at=datetime(2026, 1, 2, 13, 0, 0, tzinfo=UTC),
        method="POST",
        url="https://api.openai.com/v1/chat/completions",
        request_headers=[("authorization", "Bearer sk-test-0123456789abcdef0123")],
        request_body=body,
        status=200,
        response_headers=[("content-type", "application/json")],
        response_body=(SAMPLES / "openai_chat_nonstream.json").read_bytes(),
        end_ms=12.0,
        outcome="complete",
    )


def test_many_threads_writing_at_once_leave_only_whole_lines(tmp_path: Path) -> None:
    writer = CaptureWriter(tmp_path, fsync="never")
    lines = [dumps_record(_record(i)) for i in range(400)]

    def work(part: list[bytes]) -> None:
        for line in part:
            writer.write(line)

    threads = [threading.Thread(target=work, args=(lines[i::8],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    writer.close()
    [path] = writer.paths
    written = path.read_bytes().splitlines(keepends=True)
    assert sorted(written) == sorted(lines)


def test_a_file_past_the_size_limit_rotates_to_a_numbered_sibling(tmp_path: Path) -> None:
    line = dumps_record(_record(0))
    clock = lambda: datetime(2026, 1, 2, 13, 30, tzinfo=UTC)  # noqa: E731
    writer = CaptureWriter(tmp_path, rotate_bytes=len(line) * 2, clock=clock)
    for _ in range(5):
        writer.write(line)
    writer.close()
    names = [p.name.split("-p")[1].split(".")[0].split("-")[1:] for p in writer.paths]
    assert names == [[], ["2"], ["3"]]  # 2 + 2 + 1 lines
    assert [p.read_bytes().count(b"\n") for p in writer.paths] == [2, 2, 1]
    assert all(p.name.startswith("capture-20260102T13Z-p") for p in writer.paths)


def test_a_new_utc_hour_starts_a_new_file(tmp_path: Path) -> None:
    now = [datetime(2026, 1, 2, 13, 59, 59, tzinfo=UTC)]
    writer = CaptureWriter(tmp_path, clock=lambda: now[0])
    writer.write(dumps_record(_record(0)))
    now[0] = datetime(2026, 1, 2, 14, 0, 0, tzinfo=UTC)
    writer.write(dumps_record(_record(1)))
    writer.close()
    assert [p.name[:21] for p in writer.paths] == ["capture-20260102T13Z-", "capture-20260102T14Z-"]


def test_a_torn_last_line_is_isolated_on_reopen_and_ingest_rejects_only_it(
    tmp_path: Path,
) -> None:
    clock = lambda: datetime(2026, 1, 2, 13, 0, tzinfo=UTC)  # noqa: E731
    first = CaptureWriter(tmp_path, clock=clock)
    first.write(dumps_record(_record(1)))
    first.close()
    [path] = first.paths
    torn = dumps_record(_record(2))[:150]  # power lost mid-write: no newline
    with path.open("ab") as fh:
        fh.write(torn)
    second = CaptureWriter(tmp_path, clock=clock)  # same pid and hour: same file reopened
    second.write(dumps_record(_record(3)))
    second.close()
    assert second.paths == [path]
    assert path.read_bytes().splitlines()[1] == torn

    result, rows = ingest_rows([path], tmp_path / "wh")
    assert (result.total("records"), result.total("accepted"), result.total("rejected")) == (
        3,
        2,
        1,
    )
    assert sorted(r["request_id"] for r in rows) == ["rec-1", "rec-3"]


def test_a_capture_ending_in_a_torn_line_ingests_every_whole_record(tmp_path: Path) -> None:
    path = tmp_path / "capture.jsonl"
    path.write_bytes(dumps_record(_record(1)) + dumps_record(_record(2))[:-40])
    result, rows = ingest_rows([path], tmp_path / "wh")
    assert (result.total("accepted"), result.total("rejected")) == (1, 1)
    assert [r["request_id"] for r in rows] == ["rec-1"]


def test_a_line_that_is_not_exactly_one_line_is_refused(tmp_path: Path) -> None:
    writer = CaptureWriter(tmp_path)
    for bad in (b'{"a": 1}', b'{"a": 1}\n{"b": 2}\n'):
        try:
            writer.write(bad)
        except ValueError:
            continue
        raise AssertionError(f"accepted {bad!r}")
    writer.close()
    assert writer.paths == []


def test_a_capture_directory_removed_while_recording_gets_the_next_record_in_a_new_file(
    tmp_path: Path,
) -> None:
    import shutil

    out = tmp_path / "capture"
    warnings: list[str] = []
    writer = CaptureWriter(out, fsync="never", warn=warnings.append)
    assert writer.write_record(_record(1))
    shutil.rmtree(out)  # a cleanup job, or a user, while the proxy runs
    assert writer.write_record(_record(2))
    writer.close()
    files = sorted(out.glob("*.jsonl"))
    assert len(files) == 1  # the first file went with the directory; the record did not
    assert [orjson.loads(line)["id"] for line in files[0].read_bytes().splitlines()] == ["rec-2"]
    assert len(warnings) == 1 and "was removed; recording to a new file" in warnings[0]


def test_the_proxy_writes_each_record_off_its_event_loop_and_once(tmp_path: Path) -> None:
    # building and masking a record costs ~26 ms per MB: on the event loop it paused every
    # other stream; and a cancelled exchange's clean-up must not write it a second time
    import asyncio

    import httpx
    from fixtures.capture.fake_upstream import FakeUpstream
    from fixtures.capture.harness import recording_proxy, serving

    from pipeline.capture.exchange import COMPLETE, ExchangeRecorder

    on_loop: list[bool] = []
    upstream = FakeUpstream()
    with serving(upstream) as up, recording_proxy(up.url, tmp_path / "cap") as (proxy, app):
        write = app.writer.write_record

        def watched(record: dict[str, object]) -> bool:
            try:
                asyncio.get_running_loop()
                on_loop.append(True)
            except RuntimeError:
                on_loop.append(False)
            return write(record)

        app.writer.write_record = watched  # type: ignore[method-assign]
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
        for stream in (False, True):
            answer = httpx.post(f"{proxy.url}/v1/chat/completions", json={**body, "stream": stream})
            assert answer.status_code == 200
        rec = ExchangeRecorder("POST", "https://api.openai.com/v1/chat/completions", [], b"{}")
        rec.finish(COMPLETE)
        app._emit(rec)
        app._emit(rec)  # the clean-up asking again
    assert on_loop[:2] == [False, False]  # both exchanges written from a worker thread
    assert len(on_loop) == 3  # and the record emitted twice was written once
    assert app.stats.recorded == 3
