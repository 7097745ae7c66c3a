"""The capture proxy and the simulator listen on different ports by default, so the journey
"`simulate serve`, then `capture proxy --upstream http://127.0.0.1:<simulator port>` in front of
it" works without choosing a port ("address already in use" before)."""

from __future__ import annotations

import inspect

from typer.testing import CliRunner

from pipeline.capture.config import DEFAULT_LISTEN, parse_listen
from pipeline.cli import app
from pipeline.commands.simulate import serve


def _simulator_default_port() -> int:
    port = inspect.signature(serve).parameters["port"].default
    assert isinstance(port, int)
    return port


def test_the_simulator_and_the_capture_proxy_do_not_share_a_default_port() -> None:
    _host, proxy_port = parse_listen(DEFAULT_LISTEN)
    assert _simulator_default_port() != proxy_port


def test_the_help_of_both_shows_the_port_the_other_should_point_at() -> None:
    env = {"COLUMNS": "200", "NO_COLOR": "1"}
    port = _simulator_default_port()
    sim = CliRunner().invoke(app, ["simulate", "serve", "--help"], env=env).output
    assert f"[default: {port}]" in sim
    proxy = " ".join(
        CliRunner().invoke(app, ["capture", "proxy", "--help"], env=env).output.split()
    )
    assert f"--upstream http://127.0.0.1:{port}" in proxy
    experiment = CliRunner().invoke(app, ["experiment", "run", "--help"], env=env).output
    assert f"--base-url http://127.0.0.1:{port}" in experiment
