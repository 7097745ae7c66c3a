"""Shared fixtures: the reference samples, a temp warehouse, and a CLI runner.

Tests run with TZ=UTC so nothing depends on the machine's clock zone.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

import pytest

os.environ["TZ"] = "UTC"
# One cache directory for the run (the price library's rows, the first-file copy of
# cacheaudit.duckdb, the reports' Vega bundle), shared by every test and CLI run in it, never
# the user's ~/.cache.
os.environ["CACHEAUDIT_CACHE_DIR"] = tempfile.mkdtemp(prefix="cacheaudit-test-cache-")
atexit.register(shutil.rmtree, os.environ["CACHEAUDIT_CACHE_DIR"], ignore_errors=True)

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
# Real provider payloads from public repositories; where each came from is in PROVENANCE.md there.
SAMPLES = FIXTURES / "samples"


def _tiny_warehouse() -> ModuleType:
    """tests/fixtures/prices/tiny_warehouse.py: hand-made `requests` rows for cost tests."""
    path = FIXTURES / "prices" / "tiny_warehouse.py"
    spec = importlib.util.spec_from_file_location("tiny_warehouse", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tiny_warehouse = _tiny_warehouse()


@pytest.fixture
def samples() -> Path:
    if not SAMPLES.is_dir():
        pytest.fail(f"reference samples not found at {SAMPLES}")
    return SAMPLES


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    return tmp_path / "warehouse"


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the installed `cacheaudit` entry point as a user would, capturing stdout/stderr."""
    full_env = {**os.environ, "TZ": "UTC", **(env or {})}
    full_env.pop("CACHEAUDIT_WAREHOUSE", None)
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args],
        capture_output=True,
        text=True,
        env=full_env,
        check=False,
    )


@pytest.fixture
def cli():  # type: ignore[no-untyped-def]
    return run_cli
