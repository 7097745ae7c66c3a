"""The counts ingest and capture print read as sentences: `1 record`, `1 export`, `1 exchange`,
never `1 records`, and their numbers stay plain digits (bench/ingest.py and scripts read the
total line's numbers)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from conftest import run_cli
from test_ingest_support import capture_record, line

from pipeline.capture.proxy import Stats

OTLP_FIXTURE = Path(__file__).resolve().parent / "fixtures" / "otlp" / "genai_spans.jsonl"


def test_ingest_of_one_record_says_1_record_in_the_file_and_total_lines(tmp_path: Path) -> None:
    capture = tmp_path / "one.jsonl"
    capture.write_bytes(line(capture_record(1, record_id="r1")))
    done = run_cli("ingest", str(capture), "-w", str(tmp_path / "wh"), "--workers", "1")
    assert done.returncode == 0, done.stderr
    assert f"{capture} [capture_jsonl]: 1 record = 1 accepted + 0 rejected + 0 skipped" in (
        done.stderr
    )
    (total,) = [x for x in done.stderr.splitlines() if x.startswith("total:")]
    match = re.fullmatch(r"total: (\d+) records? = (\d+) accepted \+ (\d+) rejected"
                         r" \+ (\d+) skipped -> .*", total)  # fmt: skip
    assert match is not None and total.startswith("total: 1 record = ")
    assert match.groups() == ("1", "1", "0", "0")


def test_the_proxy_summary_says_1_exchange() -> None:
    stats = Stats()
    stats.add("complete")
    assert (
        stats.summary(60, "cap")
        == "capture: 1 exchange in the last 60s (1 complete); 1 total -> cap"
    )
    stats.add("complete")
    stats.add("complete")
    assert (stats.summary(60, "cap") or "").startswith("capture: 2 exchanges in the last 60s")


def test_capture_otlp_says_1_export_and_1_span_when_it_stops(tmp_path: Path) -> None:
    export = json.loads(OTLP_FIXTURE.read_text().splitlines()[0])
    scope = export["resourceSpans"][0]["scopeSpans"][0]
    scope["spans"] = scope["spans"][:1]
    export["resourceSpans"] = export["resourceSpans"][:1]
    export["resourceSpans"][0]["scopeSpans"] = [scope]
    command = [sys.executable, "-m", "pipeline", "capture", "otlp", "--listen", "127.0.0.1:0"]
    proc = subprocess.Popen(
        [*command, "--out", str(tmp_path / "otlp")], stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stderr is not None
        started = proc.stderr.readline()
        url = re.search(r"http://\S+/v1/traces", started)
        assert url is not None, started
        request = urllib.request.Request(
            url.group(0),
            data=json.dumps(export).encode(),
            headers={"content-type": "application/json"},
        )
        assert urllib.request.urlopen(request, timeout=30).status == 200
        proc.send_signal(signal.SIGINT)
        rest = proc.stderr.read()
        assert proc.wait(timeout=30) in (0, 130)
    finally:
        proc.kill()
        proc.wait()
    assert "capture otlp: stopped; 1 export, 1 span written" in rest, rest


def test_a_build_of_one_request_says_1_row_and_the_bench_still_reads_its_seconds(
    tmp_path: Path,
) -> None:
    import importlib.util

    capture = tmp_path / "one.jsonl"
    capture.write_bytes(line(capture_record(1, record_id="r1")))
    wh = str(tmp_path / "wh")
    assert run_cli("ingest", str(capture), "-w", wh, "--workers", "1").returncode == 0
    built = run_cli("build", "-w", wh)
    assert built.returncode == 0, built.stderr
    assert re.search(r"^request_prefix: 1 row in [\d.]+ s -> ", built.stderr, re.M), built.stderr
    spec = importlib.util.spec_from_file_location(
        "bench_history", Path(__file__).resolve().parents[1] / "bench" / "history.py"
    )
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert "request_prefix" in bench._view_seconds(built.stderr)
