"""`python -m pipeline` and `python -m pipeline.cli` both run the CLI: run as `__main__`,
cli.py must not be imported a second time by the command modules (a circular import)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb"}


@pytest.mark.parametrize("module", ["pipeline", "pipeline.cli"])
def test_both_module_forms_print_the_usage_and_exit_zero(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", module, "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert f"Usage: python -m {module} [OPTIONS] COMMAND [ARGS]..." in done.stdout
    for command in ("ingest", "diagnose", "report", "spark"):
        assert command in done.stdout
    assert "Traceback" not in done.stderr


def test_a_command_module_subcommand_runs_from_pipeline_cli() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "diagnose", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "Usage: python -m pipeline.cli diagnose [OPTIONS]" in done.stdout
