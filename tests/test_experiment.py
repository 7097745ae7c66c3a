"""The P/Q/R/S experiment against the simulator, end to end: run -> capture -> ingest -> report.

Expected token counts are worked out by hand from the simulator's documented tokenizer and
DeepSeek's published rules (its context-caching guide), not read from the code's output. The fixture
document is 30 lines "Line N of the harbour report." = 7 tokens each ("\\nLine" is one token), plus
the final newline as 1 token: 211 tokens. Question S "Which sentence of the document is the
longest?" is 9 tokens, R "List three key terms the document uses." is 8; each message adds a
`<|user|>` marker and the prompt ends with `<|assistant|>`.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
import pytest

from pipeline.errors import InputError, UsageError
from pipeline.experiment import (
    KEY_ENVS,
    ExperimentConfig,
    changed_document,
    key_from_env,
    load_results,
    run_experiment,
)
from pipeline.experiment_report import generate, load_run
from pipeline.ingest import ingest
from pipeline.simulate import SimulatorSettings, running
from pipeline.simulate.cache import DeepSeekSettings
from pipeline.warehouse import Warehouse

DOCUMENT = Path(__file__).parent / "fixtures" / "experiment" / "document.txt"
DOC_TOKENS = 211
S_TOKENS, R_TOKENS = 9, 8
SECRET = "sk-test-0123456789abcdefSECRET"


@pytest.fixture(scope="module")
def deepseek_url() -> Iterator[str]:
    settings = SimulatorSettings(
        rules="deepseek",
        deepseek=DeepSeekSettings(build_delay_s=0.05),
        base_latency_ms=1,
        chunk_ms=0,
    )
    with running(settings) as url:
        yield url


def run(url: str, out: Path, **kw: Any) -> Any:
    cfg = ExperimentConfig(
        base_url=url, model="deepseek-chat", document=DOCUMENT, out_dir=out, wait_s=0.2, **kw
    )
    return run_experiment(cfg, {"CACHEAUDIT_API_KEY": SECRET})


def ingested(out: Path, warehouse: Path) -> Warehouse:
    """The warehouse of an experiment's capture (OUT/capture/*.jsonl), as the README runs it."""
    wh = Warehouse(warehouse)
    ingest(sorted((out / "capture").glob("*.jsonl")), wh, workers=1)
    return wh


def test_step_four_changes_the_first_letter_or_digit_of_the_document() -> None:
    assert changed_document("The harbour")[0] == "Uhe harbour"
    assert changed_document("  z9")[0] == "  a9"
    assert changed_document("- 9 lives")[1] == {"offset": 2, "from": "9", "to": "0"}
    with pytest.raises(InputError):
        changed_document("... !!!")


def test_the_key_comes_from_the_environment_and_only_loopback_may_go_without() -> None:
    assert key_from_env({"DEEPSEEK_API_KEY": "k1"}, None, "https://api.deepseek.com") == (
        "k1",
        "DEEPSEEK_API_KEY",
    )
    assert key_from_env({"MY_KEY": "k2"}, "MY_KEY", "https://x") == ("k2", "MY_KEY")
    assert key_from_env({}, None, "http://127.0.0.1:8787") == (None, None)
    with pytest.raises(UsageError):
        key_from_env({"OPENAI_API_KEY": "k"}, "MY_KEY", "https://api.openai.com/v1")


@pytest.mark.parametrize("key", [None, SECRET], ids=["no key", "key"])
def test_running_without_an_api_key_warns_naming_the_variables_it_looked_for(
    deepseek_url: str, tmp_path: Path, key: str | None
) -> None:
    from typer.testing import CliRunner

    from pipeline.cli import app

    env: dict[str, str | None] = dict.fromkeys(KEY_ENVS)
    env["CACHEAUDIT_API_KEY"] = key
    args = ["experiment", "run", "--base-url", deepseek_url, "--model", "deepseek-chat"]
    args += ["--document", str(DOCUMENT), "--repeats", "1", "--wait", "0"]
    done = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "exp")], env=env)
    assert done.exit_code == 0, done.output
    warning = (
        "warning: CACHEAUDIT_API_KEY / DEEPSEEK_API_KEY / OPENAI_API_KEY / ANTHROPIC_API_KEY"
        " not set: sending requests without an API key"
    )
    assert (warning in done.stderr) == (key is None), done.stderr
    assert "warning" not in done.stdout


def test_the_plan_reproduces_deepseeks_pattern_through_capture_ingest_and_report(
    deepseek_url: str, tmp_path: Path
) -> None:
    out = tmp_path / "exp"
    summary = run(deepseek_url, out, repeats=2)
    assert (summary.requests, summary.failed) == (10, 0)
    wh = ingested(out, tmp_path / "wh")
    rows = load_run(out, wh).rows
    assert [(r["repeat"], r["request"]) for r in rows] == [
        (rep, req) for rep in (1, 2) for req in ("1", "2", "3a", "3b", "4")
    ]
    for repeat in (1, 2):
        by = {r["request"]: r for r in rows if r["repeat"] == repeat}
        miss = {k: r["input_tokens"] - r["cache_read_tokens"] for k, r in by.items()}
        assert all(r["outcome"] == "ok" and r["usage_status"] == "reported" for r in by.values())
        assert miss["2"] == 0  # step 2 hits the whole P+Q unit
        # 3a misses P and everything after it; 3b hits P (+ the next <|user|>), misses only S.
        assert miss["3a"] >= DOC_TOKENS + 1 + R_TOKENS + 1
        assert miss["3b"] == S_TOKENS + 1
        # 4: the change is in the document's first token, so all of P' + S is missed.
        assert miss["4"] >= DOC_TOKENS + 1 + S_TOKENS + 1
        assert by["3b"]["ttft_ms"] is not None
    # The first repeat starts cold; nothing before the plan was sent with this key.
    assert rows[0]["cache_read_tokens"] == 0

    page = generate(out, wh, out / "report.html").read_text()
    assert 'id="chart-experiment-tokens"' in page and 'id="chart-experiment-latency"' in page
    assert "A single fast answer can be network luck" in page
    assert "A single miss does not prove a prefix is not reusable" in page
    assert "Different output text does not mean the cache failed" in page
    assert "cacheaudit simulator, which applies published caching rules" in page
    assert "<script src" not in page and "<link" not in page  # self-contained


def test_the_api_key_is_never_written_and_its_variable_name_is(
    deepseek_url: str, tmp_path: Path
) -> None:
    out = tmp_path / "exp"
    run(deepseek_url, out, repeats=1)
    manifest, results = load_results(out)
    assert manifest["api_key_env"] == "CACHEAUDIT_API_KEY"
    assert len(results) == 5
    for path in out.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


def test_the_tool_round_sends_the_call_back_and_hits_the_calls_input_plus_output(
    deepseek_url: str, tmp_path: Path
) -> None:
    summary = run(deepseek_url, tmp_path / "exp", repeats=1, with_tool_round=True)
    phases = [(r.request, r.phase) for r in summary.results]
    assert phases[:2] == [("1", "tool_call"), ("1", "tool_result")]
    assert len(phases) == 10
    for call, result in zip(summary.results[::2], summary.results[1::2], strict=True):
        assert call.finish_reason == "tool_calls" and call.ttft_ms is None
        # DeepSeek persists a unit at the end of the output: the follow-up reads at least that
        # (step 2 repeats step 1's follow-up exactly, so it reads its whole input).
        assert result.cache_read_tokens >= call.input_tokens + call.output_tokens
        assert result.ttft_ms is not None
    first_call, first_result = summary.results[:2]
    assert first_result.cache_read_tokens == first_call.input_tokens + first_call.output_tokens
    assert summary.results[3].cache_read_tokens == summary.results[3].input_tokens


def test_the_report_says_how_many_requests_had_unknown_usage(
    deepseek_url: str, tmp_path: Path
) -> None:
    from pipeline.experiment_report import build_page
    from pipeline.reports.page import render

    out = tmp_path / "exp"
    run(deepseek_url, out, repeats=1)
    wh = ingested(out, tmp_path / "wh")
    loaded = load_run(out, wh)
    loaded.rows[0]["cache_read_tokens"] = None
    html = render(build_page(loaded, ""))
    assert "1 request(s) with unknown usage are not drawn" in html


def test_reporting_a_run_that_was_not_ingested_says_what_to_do(
    deepseek_url: str, tmp_path: Path
) -> None:
    from pipeline.errors import NotFoundError

    out = tmp_path / "exp"
    run(deepseek_url, out, repeats=1)
    with pytest.raises(NotFoundError) as info:
        generate(out, Warehouse(tmp_path / "empty"), out / "r.html")
    assert "cacheaudit ingest" in (info.value.hint or "")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_the_cli_runs_simulator_experiment_ingest_and_report(tmp_path: Path) -> None:
    env = {**os.environ, "TZ": "UTC", "CACHEAUDIT_API_KEY": SECRET}
    env.pop("CACHEAUDIT_WAREHOUSE", None)
    port = _free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pipeline",
            "simulate",
            "serve",
            "--rules",
            "deepseek",
            "--port",
            str(port),
            "--build-delay",
            "0.05",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, "server did not start"
                time.sleep(0.05)

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            done = subprocess.run(
                [sys.executable, "-m", "pipeline", *args],
                capture_output=True,
                text=True,
                env=env,
                check=False,
            )
            assert done.returncode == 0, done.stderr
            return done

        out = tmp_path / "exp"
        ran = cli(
            "experiment",
            "run",
            "--base-url",
            base,
            "--model",
            "deepseek-chat",
            "--document",
            str(DOCUMENT),
            "--repeats",
            "1",
            "--wait",
            "0.2",
            "--out",
            str(out),
        )
        assert "5 requests, 0 not ok" in ran.stderr
        assert ran.stdout.strip() == load_results(out)[0]["run_id"]
        cli("ingest", str(out / "capture"), "-w", str(out / "warehouse"))
        reported = cli("experiment", "report", str(out))
        assert Path(reported.stdout.strip()) == out / "report.html"
        assert (out / "report.html").stat().st_size > 100_000  # the Vega bundle is inlined
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_the_plan_on_anthropic_rules_reads_p_at_once_through_the_document_breakpoint(
    tmp_path: Path,
) -> None:
    settings = SimulatorSettings(rules="anthropic", anthropic_min_tokens=64, chunk_ms=0)
    with running(settings) as url:
        cfg = ExperimentConfig(
            base_url=url,
            model="claude-sonnet-4-5",
            document=DOCUMENT,
            out_dir=tmp_path / "exp",
            repeats=1,
            wait_s=0.05,
            api="messages",
        )
        results = {r.request: r for r in run_experiment(cfg, {}).results}
    first, second = results["1"], results["2"]
    assert first.cache_read_tokens == 0 and first.cache_write_tokens == first.input_tokens
    assert second.cache_read_tokens == second.input_tokens  # the last breakpoint is read
    # Unlike DeepSeek, 3a already reads through P: only the question block is written.
    assert results["3a"].cache_write_tokens == R_TOKENS
    assert results["3b"].cache_write_tokens == S_TOKENS
    four = results["4"]
    assert four.cache_read_tokens is not None and four.cache_write_tokens is not None
    assert four.cache_read_tokens + DOC_TOKENS < results["3b"].cache_read_tokens
    assert four.cache_write_tokens == four.input_tokens - four.cache_read_tokens


def test_an_experiment_against_the_simulator_gets_the_rules_provider_and_expectations(
    deepseek_url: str, tmp_path: Path
) -> None:
    from pipeline.sql import connect

    out = tmp_path / "exp"
    run(deepseek_url, out, repeats=1)
    wh = ingested(out, tmp_path / "wh")
    con = connect(wh, only=["expected_cache", "request_costs"])
    host = deepseek_url.removeprefix("http://")
    assert con.execute("SELECT DISTINCT provider, host FROM requests").fetchall() == [
        ("deepseek", host)
    ]
    expected = con.execute(
        "SELECT rule_id, expected_read_tokens FROM expected_cache ORDER BY started_at"
    ).fetchall()
    assert len(expected) == 5
    assert all(rule == "deepseek-units" and tokens is not None for rule, tokens in expected)
    assert expected[1][1] > 0  # step 2 repeats step 1: its whole prefix is expected to be read
    # Looked up in DeepSeek's price table, as DeepSeek would price these token counts
    # (documented: not money spent). deepseek-chat is a retired alias, so it finds no price.
    priced_as = con.execute("SELECT DISTINCT price_provider FROM request_costs").fetchall()
    assert priced_as == [("deepseek",)]


def test_traffic_to_the_simulator_through_the_capture_proxy_gets_the_rules_provider(
    tmp_path: Path,
) -> None:
    import httpx
    from fixtures.capture.harness import ingest_rows, recording_proxy

    settings = SimulatorSettings(rules="anthropic", anthropic_min_tokens=64, chunk_ms=0)
    out = tmp_path / "capture"
    with running(settings) as url, recording_proxy(url, out) as (proxy, _app):
        body = {
            "model": "claude-sonnet-4-5",
            "max_tokens": 32,
            "messages": [{"role": "user", "content": "Say hello"}],
        }
        for stream in (False, True):
            reply = httpx.post(f"{proxy.url}/v1/messages", json={**body, "stream": stream})
            assert reply.status_code == 200, reply.text
    _, rows = ingest_rows(out, tmp_path / "wh")
    assert [(r["provider"], r["host"], r["api"]) for r in rows] == [
        ("anthropic", url.removeprefix("http://"), "messages")
    ] * 2


def _cut_run(deepseek_url: str, tmp_path: Path) -> Path:
    out = tmp_path / "exp"
    run(deepseek_url, out, repeats=1)
    return out


def test_reporting_a_run_whose_results_were_cut_mid_line_names_the_file_and_line(
    deepseek_url: str, tmp_path: Path
) -> None:
    out = _cut_run(deepseek_url, tmp_path)
    results = out / "results.jsonl"
    results.write_bytes(results.read_bytes()[:-40])  # a run killed while writing line 5
    with pytest.raises(InputError) as info:
        load_results(out)
    assert info.value.message.startswith(
        f"{results}:5: not valid JSON (cut short: was the run stopped while writing?)"
    )
    assert "\n" not in info.value.message


@pytest.mark.parametrize("text", [b"{", b"[]", b'{"model": "x"}'], ids=["cut", "list", "no id"])
def test_reporting_a_run_whose_manifest_is_not_one_says_so_and_exits_3(
    cli: Any, deepseek_url: str, tmp_path: Path, text: bytes
) -> None:
    out = _cut_run(deepseek_url, tmp_path)
    manifest = out / "experiment.json"
    manifest.write_bytes(text)
    done = cli("experiment", "report", str(out), "-w", str(tmp_path / "w"))
    assert done.returncode == 3, done.stderr
    assert done.stderr.splitlines()[0].startswith(f"error: {manifest}: not ")
    assert "internal error" not in done.stderr


def _run_args(url: str, out: Path, *extra: str) -> list[str]:
    args = ["experiment", "run", "--base-url", url, "--model", "claude-sonnet-4-5"]
    return [
        *args,
        "--document",
        str(DOCUMENT),
        "--repeats",
        "1",
        "--wait",
        "0",
        *extra,
        "--out",
        str(out),
    ]


def test_a_run_where_every_request_failed_exits_non_zero_with_the_first_failure(
    cli: Any, tmp_path: Path
) -> None:
    # Chat Completions against the Anthropic-rules simulator: every request gets a 404.
    settings = SimulatorSettings(rules="anthropic", chunk_ms=0)
    with running(settings) as url:
        done = cli(*_run_args(url, tmp_path / "exp", "--api", "chat_completions"))
    assert done.returncode == 6, done.stderr
    # a 404 on the first request: the other four would get it too, so the run stops there
    assert "1 requests, 1 not ok" in done.stderr
    error = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert error == [
        "error: every request failed (1 of 1 not ok); the first: http_error 404: this simulator"
        " runs anthropic rules: use /v1/messages (cacheaudit-simulator); stopped early: HTTP 404"
        " on the first request: every later one would get it too"
    ]
    assert done.stdout == ""  # no run id: there is nothing to ingest or report
    manifest = orjson.loads((tmp_path / "exp" / "experiment.json").read_bytes())
    assert manifest["requests"] == 1 and manifest["stopped_early"].startswith("HTTP 404")


def test_a_run_stops_after_three_failures_in_a_row_before_anything_worked(
    cli: Any, tmp_path: Path
) -> None:
    class Failing(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["content-length"]))
            body = b'{"error": {"message": "overloaded", "type": "server_error"}}'
            self.send_response(500)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Failing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        done = cli(*_run_args(url, tmp_path / "exp", "--api", "chat_completions", "--repeats", "3"))
    finally:
        server.shutdown()
    assert done.returncode == 6, done.stderr
    assert "3 requests, 3 not ok" in done.stderr  # of the 15 planned
    assert "stopped early: the first 3 requests all failed" in done.stderr


def test_a_run_where_some_requests_failed_exits_0_and_counts_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    import pipeline.experiment as experiment
    from pipeline.cli import app

    def partly_failed(cfg: ExperimentConfig, env: dict[str, str], **_: Any) -> Any:
        return experiment.RunSummary("run-1", cfg.out_dir, requests=5, failed=2)

    monkeypatch.setattr(experiment, "run_experiment", partly_failed)
    done = CliRunner().invoke(app, _run_args("http://127.0.0.1:9", tmp_path / "exp"))
    assert done.exit_code == 0, done.output
    assert "warning: 2 of 5 requests were not ok" in done.stderr
    assert done.stdout.strip() == "run-1"


def test_a_report_from_a_manifest_missing_its_document_fields_shows_them_as_unknown(
    deepseek_url: str, tmp_path: Path
) -> None:
    import orjson

    out = _cut_run(deepseek_url, tmp_path)
    manifest_path = out / "experiment.json"
    manifest = orjson.loads(manifest_path.read_bytes())
    del manifest["document_chars"]
    manifest["step4_change"] = "hand-edited"
    manifest_path.write_bytes(orjson.dumps(manifest))
    page = generate(out, ingested(out, tmp_path / "wh"), out / "r.html").read_text()
    assert "(? characters;" in page
