"""Odd inputs an ingest audit tried: each bad record is one reject with its reason (never the
whole batch, never "a bug"), a cut file says where it was cut, and an impossible timing is
unknown. Every case was reproduced against the code before it was fixed."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import zstandard
from conftest import run_cli
from test_ingest_support import capture_record, line, table

from pipeline.errors import ExitCode


def _ingest(tmp_path: Path, *paths: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    wh = tmp_path / "wh"
    return run_cli("ingest", *map(str, paths), "-w", str(wh), "--workers", "1"), wh


def test_a_record_with_fields_of_the_wrong_shape_is_one_reject_and_the_batch_lands(
    tmp_path: Path,
) -> None:
    def with_status(i: int, status: Any) -> dict[str, Any]:
        record = capture_record(i)
        record["response"]["status"] = status
        return record

    good = line(capture_record(0, record_id="good"))
    bad: dict[str, Any] = {
        "hints as text": {**capture_record(1), "hints": "sess-1"},
        "timing as a list": {**capture_record(2), "timing": [1, 2]},
        "a date out of range": {**capture_record(3), "started_at": "0001-01-01T00:00:00+01:00"},
        "status as text": with_status(4, "200"),
        "status as a float": with_status(5, 200.0),
        "status as true": with_status(6, True),
        "status 0": with_status(7, 0),
        "an outcome no tool writes": {**capture_record(8), "outcome": "banana"},
    }
    # a timing no exchange can have (a broken clock) is unknown, and the record is kept
    late = capture_record(10, record_id="late")
    late["timing"]["end_ms"] = 1e300
    capture = tmp_path / "odd.jsonl"
    capture.write_bytes(good + line(late) + b"".join(line(r) for r in bad.values()))
    other = tmp_path / "other.jsonl"
    other.write_bytes(line(capture_record(9, record_id="other")))
    done, wh = _ingest(tmp_path, capture, other)
    assert done.returncode == 0, done.stderr
    assert "10 records = 2 accepted + 8 rejected" in done.stderr
    rows = {r["request_id"]: r for r in table(wh, "requests")}
    assert sorted(rows) == ["good", "late", "other"]
    assert rows["late"]["duration_ms"] is None and rows["good"]["duration_ms"] == 300.0
    reasons = sorted(r["reason"] for r in table(wh, "rejects"))
    assert len(reasons) == 8 and not any("bug" in r for r in reasons)
    assert any("outcome 'banana' is not one of" in r for r in reasons)
    assert sum("is not an HTTP status" in r for r in reasons) == 4
    assert any("hints must be an object" in r for r in reasons)
    assert any("out of range" in r for r in reasons)


def _drop_read_permission() -> list[str]:
    """What to run the CLI under so a mode-000 file cannot be read: nothing for a user; for root
    (which reads anything), setpriv without the capabilities that let it."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: a file cannot be made unreadable")
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search"]


def test_an_unreadable_file_of_a_batch_is_one_rejected_file_and_the_rest_lands(
    tmp_path: Path,
) -> None:
    good, locked = tmp_path / "good.jsonl", tmp_path / "locked.jsonl"
    good.write_bytes(line(capture_record(0, record_id="good")))
    locked.write_bytes(line(capture_record(1, record_id="locked")))
    locked.chmod(0)
    wh = tmp_path / "wh"
    done = subprocess.run(
        [*_drop_read_permission(), sys.executable, "-m", "pipeline", "ingest", str(tmp_path),
         "-w", str(wh), "--workers", "1"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "total: 2 records = 1 accepted + 1 rejected" in done.stderr
    assert [r["request_id"] for r in table(wh, "requests")] == ["good"]
    (reject,) = table(wh, "rejects")
    assert "locked.jsonl cannot be read" in reject["reason"]


def test_a_zstd_capture_cut_short_says_where_as_a_gzip_one_does(tmp_path: Path) -> None:
    records = b"".join(line(capture_record(i, record_id=f"r{i}")) for i in range(200))
    whole = zstandard.ZstdCompressor().compress(records)
    cut = tmp_path / "cut.jsonl.zst"
    cut.write_bytes(whole[:-50])
    done, wh = _ingest(tmp_path, cut)
    assert done.returncode == 0, done.stderr
    reasons = [r["reason"] for r in table(wh, "rejects")]
    assert any("zstd stream cut short" in r and "ends inside a zstd frame" in r for r in reasons)
    # a whole file of two frames, each after a skippable frame holding its size (as pzstd
    # writes them: its first bytes are no zstd magic), reads whole, with no reject
    two = tmp_path / "two.jsonl.zst"
    cut_at = records.index(b"\n", len(records) // 2) + 1
    frames = [
        zstandard.ZstdCompressor().compress(part) for part in (records[:cut_at], records[cut_at:])
    ]
    two.write_bytes(b"".join(struct.pack("<III", 0x184D2A50, 4, len(f)) + f for f in frames))
    done = run_cli("ingest", str(two), "-w", str(tmp_path / "wh2"))
    assert "200 records = 200 accepted + 0 rejected" in done.stderr


def test_an_otlp_time_to_first_chunk_that_cannot_be_is_unknown(tmp_path: Path) -> None:
    def span(i: int, ttft: Any) -> dict[str, Any]:
        return {
            "traceId": f"{1:032x}", "spanId": f"{i:016x}", "name": "chat",
            "startTimeUnixNano": "1782907200000000000", "endTimeUnixNano": "1782907201250000000",
            "attributes": [
                {"key": "gen_ai.provider.name", "value": {"stringValue": "openai"}},
                {"key": "gen_ai.request.model", "value": {"stringValue": "gpt-4o"}},
                {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "10"}},
                {"key": "gen_ai.response.time_to_first_chunk", "value": {"doubleValue": ttft}},
            ],
        }  # fmt: skip

    values = {1: 0.25, 2: -0.5, 3: "NaN", 4: "Infinity", 5: 99.0}  # the span lasts 1.25 s
    export = {
        "resourceSpans": [{"scopeSpans": [{"spans": [span(i, v) for i, v in values.items()]}]}]
    }
    spans = tmp_path / "spans.jsonl"
    spans.write_text(json.dumps(export) + "\n" + json.dumps({"foo": 1}) + "\n{}\n")
    done, wh = _ingest(tmp_path, spans)
    assert done.returncode == 0, done.stderr
    # the `{"foo": 1}` line is no export: one reject, counted; `{}` is an export of no spans
    assert "6 records = 5 accepted + 1 rejected" in done.stderr
    ttft = {r["request_id"][-1]: r["ttft_ms"] for r in table(wh, "requests")}
    assert ttft == {"1": 250.0, "2": None, "3": None, "4": None, "5": None}
    (reject,) = table(wh, "rejects")
    assert "not an OTLP trace export" in reject["reason"]


def test_a_cassette_cut_short_rejects_its_last_interaction_instead_of_inventing_it(
    tmp_path: Path,
) -> None:
    def interaction(i: int) -> str:
        body = json.dumps(json.loads(capture_record(i)["response"]["body"]))
        return (
            "- request:\n    body: '{}'\n    headers: {}\n    method: POST\n"
            "    uri: https://api.openai.com/v1/chat/completions\n"
            f"  response:\n    body:\n      string: '{body}'\n    headers: {{}}\n"
            "    status:\n      code: 200\n      message: OK\n"
        )

    whole = "interactions:\n" + "".join(interaction(i) for i in range(3)) + "version: 1\n"
    cut = whole[: whole.rindex("code: 200") + len("code: 2")]  # cut inside the last status
    for name, text in (("whole.yaml", whole), ("cut.yaml", cut)):
        (tmp_path / name).write_text(text)
    done, wh = _ingest(tmp_path, tmp_path / "whole.yaml")
    assert "3 records = 3 accepted + 0 rejected" in done.stderr
    done, wh = (
        run_cli("ingest", str(tmp_path / "cut.yaml"), "-w", str(tmp_path / "w2")),
        tmp_path / "w2",
    )
    assert "3 records = 2 accepted + 1 rejected" in done.stderr
    (reject,) = table(wh, "rejects")
    assert reject["source_index"] == 2 and "cut short" in reject["reason"]
    assert all(r["status_code"] == 200 for r in table(wh, "requests"))  # no status 2 invented


def test_a_single_file_that_cannot_be_read_fails_the_command_in_one_line(tmp_path: Path) -> None:
    cut = tmp_path / "small.jsonl.zst"
    cut.write_bytes(zstandard.ZstdCompressor().compress(line(capture_record(0)))[:-20])
    done = run_cli("ingest", str(cut), "-w", str(tmp_path / "wh"))
    assert done.returncode == ExitCode.INPUT
    assert done.stderr.startswith(f"error: {cut} cannot be read: zstd stream cut short")


def test_a_har_status_written_as_text_is_a_reject_not_an_interrupted_exchange(
    tmp_path: Path,
) -> None:
    from test_ingest_support import har_document, har_entry

    entries = [har_entry(0), har_entry(1)]
    entries[1]["response"]["status"] = "200"
    har = tmp_path / "odd.har"
    har.write_bytes(har_document(entries))
    done, wh = _ingest(tmp_path, har)
    assert "2 records = 1 accepted + 1 rejected" in done.stderr
    (reject,) = table(wh, "rejects")
    assert "response.status '200' is not a number" in reject["reason"]


def test_a_cassette_whose_anchor_is_tagged_or_on_its_own_line_is_read_whole(
    tmp_path: Path,
) -> None:
    # YAML allows `key: !!str &a value` and an anchor on a line of its own; an alias to it in a
    # later interaction must find it (parsed one interaction at a time, it did not)
    body = json.dumps(json.loads(capture_record(0)["response"]["body"]))

    def interaction(request_body: str, headers: str) -> str:
        return (
            f"- request:\n    body: {request_body}\n    headers: {headers}\n    method: POST\n"
            "    uri: https://api.openai.com/v1/chat/completions\n"
            f"  response:\n    body:\n      string: '{body}'\n    headers: {{}}\n"
            "    status:\n      code: 200\n      message: OK\n"
        )

    tagged = interaction("!!str &rb '{}'", "{}") + interaction("*rb", "{}")
    own_line = interaction("'{}'", "\n      &hd\n      content-type: [application/json]")
    own_line += interaction("'{}'", "*hd")
    for name, items in (("tagged.yaml", tagged), ("own_line.yaml", own_line)):
        path = tmp_path / name
        path.write_text("interactions:\n" + items + "version: 1\n")
        done = run_cli("ingest", str(path), "-w", str(tmp_path / f"wh-{name}"))
        assert "2 records = 2 accepted + 0 rejected" in done.stderr, (name, done.stderr)


def test_a_link_to_nothing_in_a_directory_is_said_not_passed_over(tmp_path: Path) -> None:
    captures = tmp_path / "captures"
    captures.mkdir()
    (captures / "a.jsonl").write_bytes(line(capture_record(0)))
    (captures / "b.jsonl").symlink_to(tmp_path / "rotated-away.jsonl")
    done, _ = _ingest(tmp_path, captures)
    assert done.returncode == 0
    assert f"{captures}: ignoring 1 link(s) to nothing, e.g. b.jsonl ->" in done.stderr


def _cassette(
    tmp_path: Path, name: str, answer: str, head: str = "", tail: str = "version: 1\n"
) -> Path:
    body = json.loads(capture_record(0)["response"]["body"])
    body["choices"][0]["message"]["content"] = answer
    items = "".join(
        "- request:\n    body: '{}'\n    headers: {}\n    method: POST\n"
        "    uri: https://api.openai.com/v1/chat/completions\n"
        f"  response:\n    body:\n      string: '{json.dumps(body)}'\n    headers: {{}}\n"
        "    status:\n      code: 200\n      message: OK\n"
        for _ in range(3)
    )
    path = tmp_path / name
    path.write_text(head + "interactions:\n" + items + tail)
    return path


def test_an_ampersand_in_an_answer_is_no_anchor_and_a_version_first_cassette_is_whole(
    tmp_path: Path,
) -> None:
    amp = _cassette(tmp_path, "amp.yaml", "R&D &co. then cd src && make")
    cut = tmp_path / "amp-cut.yaml"
    text = amp.read_text()
    cut.write_text(text[: text.rindex("code: 200") + len("code: 2")])
    first = _cassette(tmp_path, "first.yaml", "ok", head="version: 1\n", tail="")
    got = {}
    for path in (amp, cut, first):
        done = run_cli("ingest", str(path), "-w", str(tmp_path / f"wh-{path.stem}"))
        got[path.name] = done.stderr.split("]: ", 1)[1].split("\n")[0]
    assert got == {
        "amp.yaml": "3 records = 3 accepted + 0 rejected + 0 skipped",
        "amp-cut.yaml": "3 records = 2 accepted + 1 rejected + 0 skipped",  # the cut one only
        "first.yaml": "3 records = 3 accepted + 0 rejected + 0 skipped",
    }


def test_otlp_metrics_and_logs_in_the_same_file_are_no_rejects(tmp_path: Path) -> None:
    spans = tmp_path / "all-signals.jsonl"
    export = {"resourceSpans": [{"scopeSpans": [{"spans": []}]}]}
    other = [{"resourceMetrics": [{"scopeMetrics": []}]}, {"resourceLogs": [{"scopeLogs": []}]}]
    spans.write_text("\n".join(json.dumps(d) for d in [export, *other]) + "\n")
    done, wh = _ingest(tmp_path, spans)
    assert "0 records = 0 accepted + 0 rejected" in done.stderr
    assert table(wh, "rejects") == []


def test_a_page_load_with_a_status_as_text_is_skipped_not_rejected(tmp_path: Path) -> None:
    from test_ingest_support import har_document, har_entry

    page = har_entry(1, url="https://example.com/x")
    page["response"]["status"] = "200"
    har = tmp_path / "pages.har"
    har.write_bytes(har_document([har_entry(0), page]))
    done, _ = _ingest(tmp_path, har)
    assert "2 records = 1 accepted + 0 rejected + 1 skipped" in done.stderr


def test_json_bodies_that_start_with_a_byte_order_mark_are_read_as_without_one(
    tmp_path: Path,
) -> None:
    # JSON lets a reader ignore a UTF-8 BOM, and servers parsing as Python's json accept one; a
    # streamed body with one was read, a plain JSON body (request or response) was rejected.
    bom = "\ufeff"
    plain = capture_record(0, record_id="plain")
    marked = capture_record(1, record_id="marked")
    marked["request"]["body"] = bom + plain["request"]["body"]
    marked["response"]["body"] = bom + marked["response"]["body"]
    capture = tmp_path / "bom.jsonl"
    capture.write_bytes(line(plain) + line(marked))
    done, wh = _ingest(tmp_path, capture)
    assert done.returncode == 0, done.stderr
    assert table(wh, "rejects") == []
    rows = {r["request_id"]: r for r in table(wh, "requests")}
    # capture_record(1) answers 1001 prompt tokens, 512 of them read from the cache
    assert (rows["marked"]["input_tokens"], rows["marked"]["cache_read_tokens"]) == (1001, 512)
    # the same request with and without the mark has the same segments (the mark is not prompt)
    assert rows["marked"]["last_prefix_hash"] == rows["plain"]["last_prefix_hash"]
    assert rows["marked"]["segment_count"] == rows["plain"]["segment_count"] == 2
