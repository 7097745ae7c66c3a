"""Shared by the Spark test modules: skip the whole module, with the reason, where Spark cannot
run (no pyspark, no Java)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import warnings
from pathlib import Path

import pytest


def why_no_spark() -> str | None:
    if importlib.util.find_spec("pyspark") is None:
        return 'pyspark is not installed (pip install -e ".[spark]")'
    java_home = os.environ.get("JAVA_HOME")
    if not (java_home and Path(java_home, "bin", "java").exists()) and not shutil.which("java"):
        return "no Java runtime (apt-get install -y openjdk-17-jre-headless)"
    return None


def skip_module_without_spark(what: str) -> None:
    """Call at import: skips the calling module when Spark cannot run, warning with the reason
    so a CI log shows the tests did not run."""
    reason = why_no_spark()
    if reason:
        warnings.warn(f"{what} skipped: {reason}", stacklevel=2)
        pytest.skip(reason, allow_module_level=True)
