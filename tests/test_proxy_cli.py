"""`cacheaudit capture proxy` as a user runs it: a real process, real signals."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from conftest import ROOT
from fixtures.capture.fake_upstream import OPENAI_JSON, FakeUpstream, sample_bytes
from fixtures.capture.harness import capture_lines, free_port, serving, wait_until
from typer.testing import CliRunner

from pipeline.capture.config import exposure_warning
from pipeline.cli import app

CHAT = "/v1/chat/completions"
PLAIN_BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
STREAM_BODY = {**PLAIN_BODY, "stream": True}


@pytest.fixture(scope="module")
def upstream() -> Iterator[Any]:
    with serving(FakeUpstream(first_pause_ms=10, gap_ms=2)) as server:
        yield server


class ProxyProcess:
    def __init__(self, *args: str) -> None:
        env = {**os.environ, "TZ": "UTC", "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline", "capture", "proxy", *args],
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        self.lines: list[str] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert self.proc.stderr is not None
            line = self.proc.stderr.readline()
            if not line:
                raise AssertionError(f"proxy exited: {''.join(self.lines)}")
            self.lines.append(line)
            if "listening on http://" in line:
                self.url = line.split("listening on ")[1].split(",")[0]
                return
        raise AssertionError("proxy did not start")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15) -> tuple[int, str]:
        self.proc.send_signal(sig)
        _, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, "".join(self.lines) + err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_mid_stream_exits_cleanly_with_every_exchange_recorded_and_no_traceback(
    upstream: Any, tmp_path: Path, sig: signal.Signals
) -> None:
    out = tmp_path / "capture"
    proxy = ProxyProcess(
        "--upstream", upstream.url, "--listen", "127.0.0.1:0", "--out", str(out),
        "--verbose", "--shutdown-grace", "1",
    )  # fmt: skip
    try:
        done = httpx.post(proxy.url + CHAT, json=PLAIN_BODY, timeout=10)
        assert done.content == sample_bytes(OPENAI_JSON)
        # A stream that would take ~3.3 s: one event every 100 ms.
        with httpx.stream(
            "POST", proxy.url + CHAT, json=STREAM_BODY, headers={"x-fake-gap": "100"}, timeout=10
        ) as response:
            it = response.iter_raw()
            next(it)
            code, log = proxy.stop(sig)
            with pytest.raises(httpx.RemoteProtocolError):  # cut when the grace time ran out
                b"".join(it)
    finally:
        if proxy.proc.poll() is None:
            proxy.proc.kill()
    assert code == 0, log
    assert "Traceback" not in log and "CancelledError" not in log and "ERROR" not in log, log
    assert "capture: shutdown grace time over; cutting 1 exchange(s) still in flight" in log
    finished, cut = [orjson.loads(line) for line in capture_lines(out)]
    assert finished["outcome"] == "complete"
    assert cut["outcome"] == "interrupted"
    assert "shut down" in cut["error"]
    assert cut["response"]["body"].count("\n\n") >= 1
    assert "200 POST" in log and "capture: stopped; 2 exchanges recorded" in log


def test_an_exchange_without_response_headers_at_the_end_of_the_grace_gets_a_503(
    tmp_path: Path,
) -> None:
    out = tmp_path / "capture"
    fake = FakeUpstream(first_pause_ms=10, gap_ms=2)
    answers: list[httpx.Response] = []
    slow = {"x-fake-header-delay": "8000"}
    with serving(fake) as upstream:
        proxy = ProxyProcess(
            "--upstream", upstream.url, "--listen", "127.0.0.1:0", "--out", str(out),
            "--shutdown-grace", "1",
        )  # fmt: skip
        client = threading.Thread(
            target=lambda: answers.append(
                httpx.post(proxy.url + CHAT, json=PLAIN_BODY, headers=slow, timeout=20)
            )
        )
        try:
            client.start()
            wait_until(lambda: fake.seen, what="the request to reach the upstream")
            code, log = proxy.stop(signal.SIGTERM)
            client.join(timeout=20)
        finally:
            if proxy.proc.poll() is None:
                proxy.proc.kill()
    assert code == 0, log
    assert "Traceback" not in log and "ERROR" not in log, log
    [answer] = answers
    assert answer.status_code == 503
    assert answer.json()["error"]["type"] == "proxy_shutdown"
    [cut] = [orjson.loads(line) for line in capture_lines(out)]
    assert (cut["outcome"], cut["response"]) == ("interrupted", None)


def test_an_upstream_dying_mid_stream_cuts_the_client_and_logs_no_uvicorn_error(
    upstream: Any, tmp_path: Path
) -> None:
    out = tmp_path / "capture"
    proxy = ProxyProcess(
        "--upstream", upstream.url, "--listen", "127.0.0.1:0", "--out", str(out), "--verbose"
    )  # fmt: skip
    try:
        with (
            pytest.raises(httpx.RemoteProtocolError),  # the cut reaches the client
            httpx.stream(
                "POST", proxy.url + CHAT, json=STREAM_BODY, headers={"x-fake-die-after": "3"}
            ) as response,
        ):
            b"".join(response.iter_raw())
        ok = httpx.post(proxy.url + CHAT, json=PLAIN_BODY, timeout=10)
        assert ok.status_code == 200
    finally:
        code, log = proxy.stop(signal.SIGTERM)
    assert code == 0, log
    # The proxy cut the response on purpose and says so in its own line; uvicorn's
    # "ASGI callable returned without completing response." is not printed.
    assert "ERROR" not in log and "ASGI callable" not in log, log
    assert re.search(r"^200 POST \S+ \d+ B ttfb \d+ ms total \d+ ms interrupted$", log, re.M), log
    died, _ = [orjson.loads(line) for line in capture_lines(out)]
    assert died["outcome"] == "interrupted"


def test_a_killed_proxy_has_already_recorded_every_exchange_its_clients_saw_finish(
    upstream: Any, tmp_path: Path
) -> None:
    out = tmp_path / "capture"
    proxy = ProxyProcess("--upstream", upstream.url, "--listen", "127.0.0.1:0", "--out", str(out))
    try:
        for _ in range(5):
            response = httpx.post(proxy.url + CHAT, json=PLAIN_BODY, timeout=10)
            assert response.status_code == 200
        with httpx.stream("POST", proxy.url + CHAT, json=STREAM_BODY, timeout=10) as response:
            assert b"data: [DONE]" in b"".join(response.iter_raw())
    finally:
        proxy.proc.kill()  # SIGKILL: no shutdown code runs
        proxy.proc.wait(timeout=10)
    records = [orjson.loads(line) for line in capture_lines(out)]
    assert [r["outcome"] for r in records] == ["complete"] * 6


def test_without_verbose_a_periodic_summary_replaces_per_request_lines(
    upstream: Any, tmp_path: Path
) -> None:
    proxy = ProxyProcess(
        "--upstream", upstream.url, "--listen", "127.0.0.1:0", "--out", str(tmp_path),
        "--summary-every", "0.2",
    )  # fmt: skip
    try:
        for _ in range(2):
            httpx.post(proxy.url + CHAT, json=PLAIN_BODY, timeout=10)
        time.sleep(1.0)  # several ticks, even on a loaded machine
    finally:
        code, log = proxy.stop(signal.SIGINT)
    assert code == 0
    # The two exchanges may fall on either side of a tick: the summaries add up to them.
    ticks = re.findall(r"capture: (\d+) exchanges? in the last 0\.2s \((\d+) complete\)", log)
    assert ticks and sum(int(n) for n, _ in ticks) == 2, log
    assert "; 2 total -> " in log
    assert "200 POST" not in log
    assert "capture: stopped; 2 exchanges recorded (2 complete)" in log


def test_the_proxy_refuses_to_start_without_an_upstream(cli: Any, tmp_path: Path) -> None:
    result = cli("capture", "proxy", "--out", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.startswith("error: no upstream")


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--read-timeout", "0", "--read-timeout must be more than 0 seconds"),
        ("--connect-timeout", "-1", "--connect-timeout must be more than 0 seconds"),
        ("--header-timeout", "nan", "--header-timeout must be more than 0 seconds"),
        ("--summary-every", "-1", "--summary-every must be 0 (no summary lines) or more seconds"),
    ],
)
def test_the_proxy_refuses_a_timeout_it_could_not_keep_in_one_line(
    cli: Any, tmp_path: Path, option: str, value: str, message: str
) -> None:
    result = cli("capture", "proxy", "--upstream", "http://x.invalid", option, value)
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: {message}"


def test_a_client_has_a_minute_to_send_its_request_head_as_nginx_and_node_allow() -> None:
    # 5 s cut clients whose event loop lagged between connecting and sending, under load: their
    # requests were lost unrecorded. capture run and capture proxy share the default.
    import inspect

    from pipeline.capture.proxy import ProxyOptions
    from pipeline.commands.capture import proxy

    assert ProxyOptions().header_timeout == 60.0
    assert inspect.signature(proxy).parameters["header_timeout"].default == 60.0


def test_a_busy_port_is_a_network_error_with_a_hint(cli: Any, upstream: Any) -> None:
    port = upstream.url.rsplit(":", 1)[1]
    result = cli(
        "capture", "proxy", "--upstream", "http://x.invalid", "--listen", f"127.0.0.1:{port}"
    )
    assert result.returncode == 6
    assert "cannot listen on" in result.stderr


def test_listening_beyond_loopback_warns_and_loopback_does_not() -> None:
    assert exposure_warning("127.0.0.1") is None
    assert exposure_warning("::1") is None
    assert exposure_warning("localhost") is None
    warning = exposure_warning("0.0.0.0")
    assert warning is not None and warning.startswith("warning: listening on 0.0.0.0")


def test_a_bare_listen_port_serves_on_loopback_without_the_exposure_warning(
    upstream: Any, tmp_path: Path
) -> None:
    port = free_port()
    proxy = ProxyProcess("--upstream", upstream.url, "--listen", str(port), "--out", str(tmp_path))
    try:
        assert proxy.url == f"http://127.0.0.1:{port}"
        assert httpx.post(proxy.url + CHAT, json=PLAIN_BODY, timeout=10).status_code == 200
    finally:
        code, log = proxy.stop()
    assert code == 0
    assert "warning" not in log and "not loopback" not in log


def test_a_listen_value_without_a_port_is_a_usage_error_naming_the_form(tmp_path: Path) -> None:
    # A host without a port: once read as "port 8787 on that host", with a warning that it is
    # not loopback and a "port in use" hint when it could not be bound.
    result = subprocess.run(
        [
            sys.executable, "-m", "pipeline", "capture", "proxy", "--upstream",
            "http://x.invalid", "--listen", "nosuchhost.invalid", "--out", str(tmp_path),
        ],
        capture_output=True, text=True, timeout=60, cwd=ROOT, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.startswith("error: --listen wants HOST:PORT, e.g. 127.0.0.1:8787")
    assert "not loopback" not in result.stderr and "another process" not in result.stderr


def test_an_address_that_is_not_this_machines_is_blamed_not_a_busy_port(cli: Any) -> None:
    result = cli("capture", "proxy", "--upstream", "http://x.invalid", "--listen", "192.0.2.1:0")
    assert result.returncode == 6
    assert "192.0.2.1 is not an address of this machine" in result.stderr
    assert "another process" not in result.stderr and "not loopback" not in result.stderr


def test_the_proxy_help_shows_the_listen_and_out_defaults_and_an_example() -> None:
    result = CliRunner().invoke(
        app, ["capture", "proxy", "--help"], env={"COLUMNS": "100", "NO_COLOR": "1"}
    )
    assert result.exit_code == 0
    text = " ".join(result.output.replace("│", " ").split())  # table cells wrap
    assert "[default: 127.0.0.1:8787]" in text
    assert "Capture directory. [default: capture]" in text
    assert "$ cacheaudit capture proxy --upstream https://api.openai.com" in text
    assert "OPENAI_BASE_URL=http://127.0.0.1:8787/v1" in text
