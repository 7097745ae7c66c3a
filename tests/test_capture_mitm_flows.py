"""mitmproxy flow files (`mitmdump -w`): read with mitmproxy's own reader, run from the
environment that has mitmproxy (`.venv-mitm`, as `make mitm` builds it); where none is found,
one clear error line saying how to install it or export a HAR."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import openai
import pytest
from conftest import run_cli
from fixtures.capture.fake_upstream import OPENAI_JSON, OPENAI_STREAM, FakeUpstream, sample_bytes
from fixtures.capture.harness import free_port, serving, wait_until

from pipeline.sources.mitm import PYTHON_ENV

ROOT = Path(__file__).resolve().parent.parent
KEY = "sk-mitm-flows-0123456789abcdef"


def _tnet(value: object) -> bytes:
    """tnetstring encoding (mitmproxy's flow format) of str, int and dict values."""
    if isinstance(value, dict):
        body = b"".join(_tnet(k) + _tnet(v) for k, v in value.items())
        return str(len(body)).encode() + b":" + body + b"}"
    if isinstance(value, int):
        text = str(value).encode()
        return str(len(text)).encode() + b":" + text + b"#"
    data = str(value).encode()
    return str(len(data)).encode() + b":" + data + b";"


def _no_mitmproxy_env() -> dict[str, str]:
    """The environment without any way to mitmproxy: no variable, no mitmdump on PATH."""
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    path = [p for p in path if not (Path(p) / "mitmdump").exists()]
    return {"PATH": os.pathsep.join(path), PYTHON_ENV: ""}


def test_without_mitmproxy_a_flow_file_is_one_line_saying_how_to_install_it_or_export_a_har(
    tmp_path: Path,
) -> None:
    flows = tmp_path / "traffic.flows"
    flows.write_bytes(_tnet({"version": 21, "type": "http", "id": "f1"}) * 2)
    done = run_cli(
        "ingest", str(flows), "--warehouse", str(tmp_path / "wh"), env=_no_mitmproxy_env()
    )
    assert done.returncode == 3  # an input error
    assert f"error: {flows} is a mitmproxy flow file (mitmdump -w)" in done.stderr
    assert "pip install mitmproxy" in done.stderr and PYTHON_ENV in done.stderr
    assert f"mitmdump -nr {flows} --set hardump={flows}.har" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_mitmproxy_python_that_does_not_exist_is_a_one_line_error(tmp_path: Path) -> None:
    flows = tmp_path / "traffic.flows"
    flows.write_bytes(_tnet({"version": 21, "type": "http", "id": "f1"}))
    env = {**_no_mitmproxy_env(), PYTHON_ENV: str(tmp_path / "no-such-python")}
    done = run_cli("ingest", str(flows), "--warehouse", str(tmp_path / "wh"), env=env)
    assert done.returncode == 3
    assert f"{PYTHON_ENV}={tmp_path / 'no-such-python'} does not exist" in done.stderr


# --- flows recorded by a real mitmdump --------------------------------------------------------


def _mitmdump() -> str:
    """mitmdump from CACHEAUDIT_MITMDUMP, the Makefile's own environment (.venv-mitm, where
    `make test` installs it), or PATH."""
    for candidate in (os.environ.get("CACHEAUDIT_MITMDUMP"), ROOT / ".venv-mitm/bin/mitmdump"):
        if candidate and Path(candidate).exists():
            return str(candidate)
    found = shutil.which("mitmdump")
    if found is None:
        pytest.skip("mitmdump not found (make test installs it in .venv-mitm)")
    return found


@contextmanager
def _mitmdump_writing(binary: str, upstream: str, flows: Path, confdir: Path) -> Iterator[str]:
    """mitmdump in reverse mode in front of `upstream`, saving every flow to `flows`."""
    port = free_port()
    proc = subprocess.Popen(
        [
            binary, "--mode", f"reverse:{upstream}", "--listen-host", "127.0.0.1",
            "--listen-port", str(port), "--set", f"confdir={confdir}", "-w", str(flows), "-q",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )  # fmt: skip

    def listening() -> bool:
        if proc.poll() is not None:
            output = proc.stdout.read().decode() if proc.stdout else ""
            raise AssertionError(f"mitmdump exited with {proc.returncode}: {output}")
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    try:
        wait_until(listening, timeout=30.0, what="mitmdump to listen")
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGINT)  # graceful: the flow file is flushed and closed
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A flow file mitmdump wrote while the OpenAI SDK called the fake upstream through it
    (streamed, then not), and the Python of mitmdump's environment."""
    binary = _mitmdump()
    tmp = tmp_path_factory.mktemp("flows")
    flows = tmp / "traffic.flows"
    messages = [{"role": "user", "content": "Say hello"}]
    with (
        serving(FakeUpstream(first_pause_ms=20.0, gap_ms=2.0)) as up,
        _mitmdump_writing(binary, up.url, flows, tmp / "mitm-conf") as proxy_url,
    ):
        client = openai.OpenAI(base_url=proxy_url + "/v1", api_key=KEY, max_retries=0)
        with client.chat.completions.with_streaming_response.create(
            model="gpt-4o", messages=messages, stream=True,  # type: ignore[arg-type]
            stream_options={"include_usage": True},
        ) as response:  # fmt: skip
            assert b"".join(response.iter_bytes()) == sample_bytes(OPENAI_STREAM)
        plain = client.chat.completions.with_raw_response.create(
            model="gpt-4.1-nano",
            messages=messages,  # type: ignore[arg-type]
        ).http_response.content
        assert plain == sample_bytes(OPENAI_JSON)
    assert flows.stat().st_size > 0
    return flows, str(Path(binary).parent / "python")


def _requests(warehouse: Path) -> list[dict[str, object]]:
    import duckdb

    files = sorted(str(p) for p in (warehouse / "requests").rglob("*.parquet"))
    rel = duckdb.connect().read_parquet(files, hive_partitioning=True)
    rows = [dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()]
    return sorted(rows, key=lambda r: int(r["source_index"]))  # type: ignore[call-overload]


def test_flows_recorded_by_mitmdump_ingest_with_mitmproxys_reader_to_the_samples_usage(
    recorded: tuple[Path, str], tmp_path: Path
) -> None:
    flows, python = recorded
    wh = tmp_path / "wh"
    env = {**_no_mitmproxy_env(), PYTHON_ENV: python}
    done = run_cli("ingest", str(flows), "--warehouse", str(wh), env=env)
    assert done.returncode == 0, done.stderr
    assert "[mitm_flows]: 2 records = 2 accepted + 0 rejected" in done.stderr
    streamed, plain = _requests(wh)
    # Sample usage: the stream's last chunk has prompt 14 / completion 30 and no cached field
    # (unknown, not 0); the plain body has prompt 16, cached_tokens 0, completion 363.
    assert (streamed["stream"], plain["stream"]) == (True, False)
    assert (streamed["input_tokens"], streamed["cache_read_tokens"]) == (14, None)
    assert streamed["output_tokens"] == 30
    assert (plain["input_tokens"], plain["cache_read_tokens"], plain["output_tokens"]) == (
        16,
        0,
        363,
    )
    assert streamed["outcome"] == plain["outcome"] == "ok"
    assert streamed["account"] is not None and streamed["source_index"] == 0
    # A flow keeps the response head's arrival and the end, not when any body byte came: the
    # first body byte and the first text are unknown; the end came after the upstream's 20 ms
    # pause before its first event
    assert streamed["ttfb_ms"] is None and streamed["ttft_ms"] is None
    assert streamed["duration_ms"] >= 20.0  # type: ignore[operator]
    written = b"".join(p.read_bytes() for p in wh.rglob("*") if p.is_file())
    assert KEY.encode() not in written and b"0123456789abcdef" not in written


def test_a_flow_file_damaged_after_its_first_flow_lands_that_flow_and_one_reject(
    recorded: tuple[Path, str], tmp_path: Path
) -> None:
    flows, python = recorded
    data = flows.read_bytes()
    length = data.partition(b":")[0]
    first = data[: len(length) + 1 + int(length) + 1]  # one tnetstring: `<len>:<items>}`
    assert first.endswith(b"}") and len(first) < len(data)
    damaged = tmp_path / "damaged.flows"
    damaged.write_bytes(first + b"999:not a flow")
    env = {**_no_mitmproxy_env(), PYTHON_ENV: python}
    done = run_cli("ingest", str(damaged), "--warehouse", str(tmp_path / "wh"), env=env)
    assert done.returncode == 0, done.stderr
    assert "2 records = 1 accepted + 1 rejected" in done.stderr
    [row] = _requests(tmp_path / "wh")
    assert row["stream"] is True and row["output_tokens"] == 30
    rejects = run_cli(
        "sql", "-w", str(tmp_path / "wh"), "--format", "csv",
        "select source_index, reason from rejects",
    )  # fmt: skip
    assert "1,mitmproxy could not read the flow file from here on" in rejects.stdout
