"""Ingest of files that change: a capture the proxy is still appending to, read up to what was
hashed; OTLP spans numbered by line so a file splits like a capture; segment hashes pinned."""

from __future__ import annotations

import gzip
import shutil
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest
import xxhash
from test_ingest_support import capture_record, line, run, table

from pipeline import ingest as ingest_module
from pipeline import ingest_plan
from pipeline.normalise import normalise
from pipeline.records import Exchange
from pipeline.sources.capture import iter_line_range

OTLP_FIXTURE = Path(__file__).resolve().parent / "fixtures" / "otlp" / "genai_spans.jsonl"


def test_a_capture_that_grew_since_it_was_ingested_replaces_its_earlier_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capture = tmp_path / "live.jsonl"
    wh = tmp_path / "wh"
    capture.write_bytes(line(capture_record(1, record_id="r1")))
    run([capture], wh)
    with capture.open("ab") as fh:  # the proxy appends a record
        fh.write(line(capture_record(2, record_id="r2")))
    second = run([capture], wh)
    assert second.files[0].status == "ingested"
    assert len(second.files[0].superseded) == 1
    assert sorted(r["request_id"] for r in table(wh, "requests")) == ["r1", "r2"]
    assert len(table(wh, "segments")) == 4  # 2 requests x (system + user), none twice
    manifest = table(wh, "sources")
    assert [(m["records"], m["size_bytes"]) for m in manifest] == [(2, capture.stat().st_size)]
    assert "live.jsonl: changed since it was ingested (1 record, " in capsys.readouterr().err


def test_the_same_file_named_by_a_relative_and_an_absolute_path_is_one_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("c.jsonl").write_bytes(line(capture_record(1, record_id="r1")))
    run([Path("c.jsonl")], tmp_path / "wh")
    with Path("c.jsonl").open("ab") as fh:
        fh.write(line(capture_record(2, record_id="r2")))
    run([tmp_path / "c.jsonl"], tmp_path / "wh")
    assert sorted(r["request_id"] for r in table(tmp_path / "wh", "requests")) == ["r1", "r2"]


def test_another_file_with_other_content_keeps_its_rows(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_bytes(line(capture_record(1, record_id="a1")))
    b.write_bytes(line(capture_record(2, record_id="b1")))
    run([a], tmp_path / "wh")
    result = run([b], tmp_path / "wh")
    assert result.files[0].superseded == []
    assert sorted(r["request_id"] for r in table(tmp_path / "wh", "requests")) == ["a1", "b1"]


def test_a_rotated_capture_listed_before_the_new_live_one_keeps_its_rows(tmp_path: Path) -> None:
    live, wh = tmp_path / "capture.jsonl", tmp_path / "wh"
    live.write_bytes(line(capture_record(1, record_id="old1")))
    run([live], wh)
    rotated = tmp_path / "capture-1.jsonl"
    live.rename(rotated)  # logrotate: renamed away, a fresh file under the old name
    live.write_bytes(line(capture_record(2, record_id="new1")))
    run([rotated, live], wh)
    assert sorted(r["request_id"] for r in table(wh, "requests")) == ["new1", "old1"]


def test_a_line_range_never_reads_past_its_end_even_if_the_file_grew(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_bytes(b"first\nsecond line\n")
    # Hashed when it was 9 bytes long: "first\n" and the start of the next line being written.
    assert list(iter_line_range(path, 0, 9)) == [b"first\n", b"sec"]


# --- OTLP spans numbered per line ---------------------------------------------------------------


def _otlp_rows(wh: Path) -> tuple[list[int], list[int]]:
    requests = sorted(r["source_index"] for r in table(wh, "requests"))
    rejects = sorted(r["source_index"] for r in table(wh, "rejects"))
    return requests, rejects


def test_otlp_spans_are_numbered_by_line_and_position_within_the_line(tmp_path: Path) -> None:
    # Line 1: anthropic span (0), HTTP span (1, skipped), bedrock span (2); line 2 is not JSON;
    # line 3: one error span.
    result = run([OTLP_FIXTURE], tmp_path / "wh")
    assert _otlp_rows(tmp_path / "wh") == ([1_000_000, 1_000_002, 3_000_000], [2_000_000])
    fr = result.files[0]
    assert (fr.records, fr.accepted, fr.rejected, fr.skipped) == (5, 3, 1, 1)


def test_an_otlp_file_split_across_workers_gives_the_same_rows_as_one_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = tmp_path / "spans.jsonl"
    # 15 lines: the fixture's 3, five times, each copy with its own trace ids (the same span
    # twice would be one span, kept once).
    text = OTLP_FIXTURE.read_bytes()
    plain.write_bytes(
        b"".join(text.replace(b"af7651916cd4", b"af765191%04d" % k) for k in range(5))
    )
    gz = tmp_path / "spans.jsonl.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    monkeypatch.setattr(ingest_plan, "CHUNK_BYTES", 500)  # about a line per task
    monkeypatch.setattr(ingest_plan, "BATCH_BYTES", 500)
    monkeypatch.setattr(ingest_module, "PARALLEL_MIN_BYTES", 0)
    assert len(ingest_plan.split_ranges(plain, plain.stat().st_size)) >= 10
    expected_requests = sorted(
        (3 * k + line_no) * 1_000_000 + ordinal
        for k in range(5)
        for line_no, ordinal in ((1, 0), (1, 2), (3, 0))
    )
    expected_rejects = [(3 * k + 2) * 1_000_000 for k in range(5)]
    for path in (plain, gz):
        wh = tmp_path / f"wh{path.suffix}"
        result = run([path], wh, workers=2)
        fr = result.files[0]
        assert (fr.records, fr.accepted, fr.rejected, fr.skipped) == (25, 15, 5, 5)
        assert _otlp_rows(wh) == (expected_requests, expected_rejects)


# --- segment hashes are a contract: they must not change ------------------------------------


def _rule(segments: list[tuple[str, str | None, bytes]]) -> list[tuple[str, str]]:
    """(segment_hash, prefix_hash) by the documented rule (schemas/segments.json), from each
    segment's kind, role and exact bytes."""
    out, prefix = [], b"\x00" * 16
    for kind, role, data in segments:
        seed = xxhash.xxh3_64_intdigest(f"{kind}\x00{role or ''}".encode())
        digest = xxhash.xxh3_128_digest(data, seed=seed)
        prefix = xxhash.xxh3_128_digest(prefix + digest)
        out.append((digest.hex(), prefix.hex()))
    return out


def test_segment_hashes_follow_the_rule_and_are_pinned() -> None:
    # Sent with spaces and an escaped é: segments are the compact re-serialisation, in order.
    body = (
        b'{"model": "m", "tools": [{"type": "function", "function": {"name": "f"}}], '
        b'"messages": [{"role": "system", "content": "You are terse."}, '
        b'{"role": "user", "content": "caf\\u00e9"}]}'
    )
    exchange = Exchange(
        source="t",
        index=1,
        started_at=datetime(2026, 7, 1, tzinfo=UTC),
        method="POST",
        url="https://api.openai.com/v1/chat/completions",
        request_headers=[],
        request_body=body,
        status=200,
        response_headers=[("content-type", "application/json")],
        response_body=b'{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1}}',
    )
    norm = normalise(exchange, "rid")
    expected_bytes = [
        b'{"type":"function","function":{"name":"f"}}',
        b'{"role":"system","content":"You are terse."}',
        '{"role":"user","content":"café"}'.encode(),
    ]
    assert norm.data == expected_bytes
    places = [("tool", None), ("system", "system"), ("message", "user")]
    assert list(zip(norm.kinds, norm.roles, strict=True)) == places
    assert [(s.segment_hash, s.prefix_hash) for s in norm.segments] == _rule(
        [(k, r, d) for (k, r), d in zip(places, expected_bytes, strict=True)]
    )
    # Pinned: the same segment must hash the same forever (queries compare across ingests);
    # a change of rule bumps normalise.SEGMENT_HASHING, so that older sources are read again.
    assert norm.hashes == [
        "567634083bbf75b3338fe6c265653b82",
        "2df107703eaa290e86c32e9c764f0470",
        "b67703967bc9ca8758b042e9a37f62bd",
    ]
    assert norm.row["last_prefix_hash"] == "444254ebffd37d7a51f5cb4bab095d87"
    assert [s.bytes for s in norm.segments] == [43, 44, 33]
    assert norm.row["prompt_bytes"] == 120


def test_segment_content_is_stored_once_per_distinct_segment(tmp_path: Path) -> None:
    capture = tmp_path / "c.jsonl"
    # Every record sends the same system message and a different user message.
    capture.write_bytes(b"".join(line(capture_record(i, record_id=f"r{i}")) for i in range(3)))
    run([capture], tmp_path / "wh")
    contents = table(tmp_path / "wh", "segment_content")
    assert len(contents) == 4  # one system message + three user messages
    system = orjson.dumps({"role": "system", "content": "You are terse."})
    assert any(c["content"] == system.decode() and c["bytes"] == 44 for c in contents)
    shutil.rmtree(tmp_path / "wh")
