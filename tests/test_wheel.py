"""A built wheel works without the source tree: the SQL, the schemas and the report templates
travel inside it as package data. The test builds the wheel from this checkout, installs it
offline into a fresh venv (the dependencies come from the test environment), and runs demo,
ingest, summary and the weekly report there, from a directory outside the repository."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_pyproject_lists_every_package_and_data_folder_the_code_reads() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(config["tool"]["setuptools"]["packages"])
    code = {
        ".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "pipeline").rglob("__init__.py")
    }
    assert code <= listed, f"add to [tool.setuptools] packages: {sorted(code - listed)}"
    mapped = config["tool"]["setuptools"]["package-dir"]
    assert mapped == {
        "pipeline.queries": "queries",
        "pipeline.schemas": "schemas",
        "pipeline.report_assets": "reports",
    }


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert result.returncode == 0, (args, result.stdout[-2000:], result.stderr[-2000:])
    return result


@pytest.mark.slow
def test_an_installed_wheel_runs_the_pipeline_in_a_fresh_venv_outside_the_checkout(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CACHEAUDIT_WAREHOUSE")}
    env["TZ"] = "UTC"
    dist, fresh, work = tmp_path / "dist", tmp_path / "venv", tmp_path / "elsewhere"
    work.mkdir()
    pip = [sys.executable, "-m", "pip"]
    # offline: no index, built with the test environment's setuptools
    _run([*pip, "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "--no-index", "-q",
          "-w", str(dist)], work, env)  # fmt: skip
    (wheel,) = dist.glob("cacheaudit-*.whl")
    _run([sys.executable, "-m", "venv", "--without-pip", str(fresh)], work, env)
    python = str(fresh / "bin" / "python")
    site = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                work, env).stdout.strip()  # fmt: skip
    _run(
        [*pip, "install", "--no-deps", "--no-index", "-q", "--target", site, str(wheel)], work, env
    )
    # The dependencies (polars, duckdb, ...) come from the test environment, offline: its
    # site-packages as a plain path after the venv's own, so its editable install of this
    # checkout (a finder set up by a .pth file there) is never loaded.
    deps = sysconfig.get_paths()["purelib"]
    (Path(site) / "test-dependencies.pth").write_text(deps + "\n", encoding="utf-8")
    where = _run(
        [python, "-c", "import pipeline, pipeline.sql_catalog as s; print(pipeline.__file__);"
         " print(s.QUERY_DIR)"], work, env,
    ).stdout.split()  # fmt: skip
    assert all(Path(p).is_relative_to(fresh) for p in where), where
    cli = [python, "-m", "pipeline"]
    _run([*cli, "demo", "--sessions", "3", "--out", "capture.jsonl"], work, env)
    _run([*cli, "ingest", "capture.jsonl", "-w", "wh"], work, env)
    summary = _run([*cli, "summary", "-w", "wh"], work, env).stdout
    assert "hit ratio:" in summary and "cost (USD):" in summary
    pages = _run([*cli, "report", "weekly", "-w", "wh", "-o", "out"], work, env).stdout
    html = (work / pages.split()[0]).read_text(encoding="utf-8")
    assert "What to fix" in html and "<style>" in html
