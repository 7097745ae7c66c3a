"""`cacheaudit capture run -- COMMAND`, end to end: the official OpenAI and Anthropic SDKs run
as the child command against the local simulator (pointed there by the base-URL variables the
user had set, which stay the routes' upstreams), the capture ingested, and every request's usage
in `requests` equal to what the SDK itself parsed from the response."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from pipeline.capture.config import UpstreamRoute
from pipeline.capture.run import PROVIDERS, exit_code_of, plan
from pipeline.simulate import SimulatorSettings
from pipeline.simulate.server import running

OPENAI_KEY = "sk-test-capturerun-0123456789abcdef"
ANTHROPIC_KEY = "sk-ant-test-capturerun-0123456789"
# ~1500 simulator tokens: past OpenAI's 1024-token minimum, so the repeat reads the cache.
LONG = "The quick brown fox jumps over the lazy dog. " * 150

CHILD = textwrap.dedent(
    """
    import json, os, signal, sys, time
    import anthropic, openai

    out = open(sys.argv[1], "w")
    mode = sys.argv[2]
    long = sys.argv[3]

    def note(kind, usage):
        out.write(json.dumps({"kind": kind, "usage": usage}) + "\\n")
        out.flush()

    oa = openai.OpenAI(max_retries=0)  # OPENAI_BASE_URL and OPENAI_API_KEY from the env
    msgs = [{"role": "system", "content": long}, {"role": "user", "content": "Say hello"}]
    r = oa.chat.completions.create(model="gpt-4o", messages=msgs)
    note("openai", r.usage.model_dump())
    if mode in ("sigterm", "sigint-trap"):
        if mode == "sigint-trap":  # an agent that cleans up on Ctrl-C and exits its own way
            signal.signal(signal.SIGINT, lambda *_: sys.exit(42))
        print("ready", flush=True)
        time.sleep(60)
    if mode == "sigkill-self":
        os.kill(os.getpid(), signal.SIGKILL)
    usage = None
    stream = oa.chat.completions.create(
        model="gpt-4o", messages=msgs, stream=True, stream_options={"include_usage": True}
    )
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage.model_dump()
    note("openai-stream", usage)

    an = anthropic.Anthropic(max_retries=0)  # ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY
    system = [{"type": "text", "text": long, "cache_control": {"type": "ephemeral"}}]
    m = an.messages.create(
        model="claude-sonnet-4-5", max_tokens=64, system=system,
        messages=[{"role": "user", "content": "Say hello"}],
    )
    note("anthropic", m.usage.model_dump())
    with an.messages.stream(
        model="claude-sonnet-4-5", max_tokens=64, system=system,
        messages=[{"role": "user", "content": "Say hello"}],
    ) as s:
        final = s.get_final_message()
    note("anthropic-stream", final.usage.model_dump())
    sys.exit(int(sys.argv[4]))
    """
)


@pytest.fixture(scope="module")
def simulators() -> Iterator[dict[str, str]]:
    fast = {"base_latency_ms": 1.0, "prefill_ms_per_1k": 0.0, "chunk_ms": 0.0}
    with (
        running(SimulatorSettings(rules="openai", **fast)) as openai_url,  # type: ignore[arg-type]
        running(SimulatorSettings(rules="anthropic", **fast)) as anthropic_url,  # type: ignore[arg-type]
    ):
        yield {"openai": openai_url, "anthropic": anthropic_url}


def _env(sims: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEAUDIT_")}
    env.update(
        OPENAI_BASE_URL=sims["openai"] + "/v1",
        ANTHROPIC_BASE_URL=sims["anthropic"],
        OPENAI_API_KEY=OPENAI_KEY,
        ANTHROPIC_API_KEY=ANTHROPIC_KEY,
    )
    return env


def _capture_run(
    tmp: Path, sims: dict[str, str], mode: str, exit_with: int = 0, **popen: Any
) -> subprocess.Popen[str]:
    script = tmp / "child.py"
    script.write_text(CHILD)
    command = [sys.executable, "-m", "pipeline", "capture", "run"]
    command += ["--out", str(tmp / "cap"), "--warehouse", str(tmp / "wh"), "--"]
    command += [sys.executable, str(script), str(tmp / "usage.jsonl"), mode, LONG, str(exit_with)]
    # Started as from a terminal, with Ctrl-C's default action: a suite run as a background job
    # of a script has SIGINT ignored, and an ignored signal stays ignored in every process
    # started under it (the child would never see the SIGINT these tests send)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(
            command,
            env=_env(sims),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            **popen,
        )
    finally:
        signal.signal(signal.SIGINT, previous)


def _sdk_usage(tmp: Path) -> list[dict[str, Any]]:
    lines = (tmp / "usage.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def _rows(warehouse: Path) -> list[dict[str, Any]]:
    files = sorted(str(p) for p in (warehouse / "requests").rglob("*.parquet"))
    rel = duckdb.connect().read_parquet(files, hive_partitioning=False)
    rows = [dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()]
    return sorted(rows, key=lambda r: r["started_at"])


def _secrets_absent(*dirs: Path) -> None:
    for d in dirs:
        for f in d.rglob("*"):
            if f.is_file():
                data = f.read_bytes()
                assert OPENAI_KEY.encode() not in data, f
                assert ANTHROPIC_KEY.encode() not in data, f


def test_both_sdks_streamed_and_not_land_in_requests_with_the_usage_the_sdk_parsed(
    simulators: dict[str, str], tmp_path: Path
) -> None:
    proc = _capture_run(tmp_path, simulators, "all", exit_with=3)
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 3, stderr  # the child's own exit code
    assert "requests:            4" in stdout  # the summary, on stdout
    assert "OPENAI_BASE_URL=http://127.0.0.1:" in stderr

    sdk = _sdk_usage(tmp_path)
    assert [u["kind"] for u in sdk] == ["openai", "openai-stream", "anthropic", "anthropic-stream"]
    rows = _rows(tmp_path / "wh")
    assert [(r["provider"], r["stream"]) for r in rows] == [
        ("openai", False),
        ("openai", True),
        ("anthropic", False),
        ("anthropic", True),
    ]
    for row, note in zip(rows[:2], sdk[:2], strict=True):
        u = note["usage"]
        assert row["input_tokens"] == u["prompt_tokens"]
        assert row["output_tokens"] == u["completion_tokens"]
        assert row["cache_read_tokens"] == u["prompt_tokens_details"]["cached_tokens"]
    # The first call wrote nothing to read; the identical repeat read a cached prefix.
    assert rows[0]["cache_read_tokens"] == 0
    assert rows[1]["cache_read_tokens"] > 1000
    for row, note in zip(rows[2:], sdk[2:], strict=True):
        u = note["usage"]
        # Anthropic's input_tokens exclude cached ones; the row's input is every prompt token.
        read, write = u["cache_read_input_tokens"], u["cache_creation_input_tokens"]
        assert row["input_tokens"] == u["input_tokens"] + read + write
        assert row["uncached_input_tokens"] == u["input_tokens"]
        assert json.loads(row["raw_usage"])["input_tokens"] == u["input_tokens"]
        assert row["output_tokens"] == u["output_tokens"]
        assert row["cache_read_tokens"] == u["cache_read_input_tokens"]
        assert row["cache_write_tokens"] == u["cache_creation_input_tokens"]
    assert rows[2]["cache_write_tokens"] > 1000 and rows[2]["cache_read_tokens"] == 0
    assert rows[3]["cache_read_tokens"] == rows[2]["cache_write_tokens"]
    _secrets_absent(tmp_path / "cap", tmp_path / "wh")


def _when_ready(proc: subprocess.Popen[str]) -> None:
    """Wait until the child made its first call and sleeps (it prints "ready")."""
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    line = ""
    while "ready" not in line and time.monotonic() < deadline:
        line = proc.stdout.readline()  # the child's stdout is ours: it prints "ready"
    assert "ready" in line


def test_a_child_killed_by_sigterm_sent_to_capture_run_exits_143_and_its_call_is_kept(
    simulators: dict[str, str], tmp_path: Path
) -> None:
    proc = _capture_run(tmp_path, simulators, "sigterm")
    _when_ready(proc)
    proc.send_signal(signal.SIGTERM)  # to capture run, which forwards it to the child
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "ended by signal 15" in stderr
    [note] = _sdk_usage(tmp_path)
    [row] = _rows(tmp_path / "wh")
    assert row["input_tokens"] == note["usage"]["prompt_tokens"]
    assert row["output_tokens"] == note["usage"]["completion_tokens"]
    assert "requests:            1" in stdout


def test_sigint_sent_to_capture_run_ends_the_child_with_130_and_its_call_is_kept(
    simulators: dict[str, str], tmp_path: Path
) -> None:
    proc = _capture_run(tmp_path, simulators, "sigterm")
    _when_ready(proc)
    # Not from a terminal (stdin is not a tty), so the child did not get it too: forwarded.
    # Python dies of an unhandled SIGINT by the signal itself: 128 + 2
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGINT, stderr
    assert "ended by signal 2" in stderr
    [note] = _sdk_usage(tmp_path)
    [row] = _rows(tmp_path / "wh")
    assert row["input_tokens"] == note["usage"]["prompt_tokens"]
    assert "requests:            1" in stdout


def test_a_child_that_handles_sigint_and_exits_42_makes_capture_run_exit_42(
    simulators: dict[str, str], tmp_path: Path
) -> None:
    proc = _capture_run(tmp_path, simulators, "sigint-trap")
    _when_ready(proc)
    proc.send_signal(signal.SIGINT)  # capture run itself survives it and waits for the child
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 42, stderr
    assert "ended by signal" not in stderr
    [row] = _rows(tmp_path / "wh")
    assert row["input_tokens"] == _sdk_usage(tmp_path)[0]["usage"]["prompt_tokens"]
    assert "requests:            1" in stdout


def test_a_child_that_dies_of_sigkill_gives_137_and_the_calls_before_it(
    simulators: dict[str, str], tmp_path: Path
) -> None:
    proc = _capture_run(tmp_path, simulators, "sigkill-self")
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 137, stderr
    [row] = _rows(tmp_path / "wh")
    assert row["input_tokens"] == _sdk_usage(tmp_path)[0]["usage"]["prompt_tokens"]


def _run_command(tmp_path: Path, command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *(sys.executable, "-m", "pipeline", "capture", "run", "--out", str(tmp_path / "c")),
            *("--warehouse", str(tmp_path / "wh"), "--", command),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def _error_lines(stderr: str) -> list[str]:
    return [x for x in stderr.splitlines() if not x.startswith("capture: ")]


def test_a_command_that_does_not_exist_is_a_one_line_error_and_exit_127_as_in_a_shell(
    tmp_path: Path,
) -> None:
    result = _run_command(tmp_path, "no-such-command-cacheaudit")
    assert result.returncode == 127  # was 2: a script testing for a shell's 127 missed it
    # the one line a shell says: no proxy started, no capture folder made for nothing
    assert result.stderr.splitlines() == ["error: command not found: no-such-command-cacheaudit"]
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("kind", ["not executable", "a folder", "its #! names nothing"])
def test_a_command_that_cannot_be_run_is_a_one_line_error_and_exit_126_as_in_a_shell(
    tmp_path: Path, kind: str
) -> None:
    target = tmp_path / "agent"
    if kind == "a folder":
        target.mkdir()
    else:
        first = "#!/no/such/interpreter" if kind.startswith("its") else "#!/bin/sh"
        target.write_text(f"{first}\necho hi\n")
        target.chmod(0o755 if kind.startswith("its") else 0o644)
    result = _run_command(tmp_path, str(target))
    assert result.returncode == 126, result.stderr
    [line] = _error_lines(result.stderr)
    assert line.startswith(f"error: cannot run {target}: "), line


def test_each_provider_routes_to_the_users_own_base_url_or_its_public_api() -> None:
    proxy = "http://127.0.0.1:5000"
    config, child = plan({"OPENAI_BASE_URL": "http://gw.local:8080/v1/"}, proxy)
    routes = {r.prefix: r.url for r in config.routes}
    assert routes == {
        "/openai": "http://gw.local:8080/v1",
        "/anthropic": "https://api.anthropic.com",
        "/gemini": "https://generativelanguage.googleapis.com",
        "/deepseek": "https://api.deepseek.com",
        "/openrouter": "https://openrouter.ai/api/v1",
    }
    assert child == {
        "OPENAI_BASE_URL": f"{proxy}/openai",
        "ANTHROPIC_BASE_URL": f"{proxy}/anthropic",
        "GOOGLE_GEMINI_BASE_URL": f"{proxy}/gemini",
        "DEEPSEEK_API_BASE": f"{proxy}/deepseek",
        "OPENROUTER_API_BASE": f"{proxy}/openrouter",
    }
    assert len(PROVIDERS) == 5
    # An SDK call through the child's variable lands on the upstream path the SDK would use.
    route = config.route_for("/openai/chat/completions", "127.0.0.1")
    assert route is not None
    assert (
        route.target("/openai/chat/completions", "") == "http://gw.local:8080/v1/chat/completions"
    )
    # A --config route with a longer prefix wins over the provider's.
    extra = UpstreamRoute(url="http://other:1", prefix="/openai/special")
    config, _ = plan({}, proxy, [extra])
    assert config.route_for("/openai/special/x", "h") == extra


def test_exit_codes_follow_the_shell_convention_for_signals() -> None:
    assert exit_code_of(0) == 0
    assert exit_code_of(3) == 3
    assert exit_code_of(-signal.SIGINT) == 130
    assert exit_code_of(-signal.SIGKILL) == 137


def test_no_ingest_says_where_the_recording_is_and_how_to_ingest_it(
    simulators: dict[str, str], tmp_path: Path
) -> None:
    # with --no-ingest the last line was "capture: stopped; 1 exchanges recorded": no word of
    # the file written or of the next step
    child = tmp_path / "call.py"
    child.write_text(
        textwrap.dedent(
            """
            import json, os, urllib.request
            body = json.dumps({"model": "gpt-4.1-mini", "messages": [
                {"role": "user", "content": "hello"}]}).encode()
            request = urllib.request.Request(
                os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=body,
                headers={"content-type": "application/json", "authorization": "Bearer x"})
            urllib.request.urlopen(request, timeout=30).read()
            """
        )
    )
    out = tmp_path / "cap"
    command = [sys.executable, "-m", "pipeline", "capture", "run", "--no-ingest"]
    done = subprocess.run(
        [*command, "--out", str(out), "--", sys.executable, str(child)],
        env=_env(simulators),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (written,) = sorted(out.glob("*.jsonl"))
    *_, stopped, last = done.stderr.splitlines()
    assert stopped == "capture: stopped; 1 exchange recorded (1 complete)"  # not "1 exchanges"
    assert last == f"capture: recorded to {written}; ingest with `cacheaudit ingest {out}`"
    assert not (tmp_path / "warehouse").exists()
