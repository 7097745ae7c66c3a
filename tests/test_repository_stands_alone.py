"""The repository stands alone: no tracked file reads or names a path outside it.

A clone with nothing beside it must run its tests and read as a whole, so no code, test, doc or
build file may point at a sibling folder or at a path of the machine it was written on.
"""

from __future__ import annotations

import re
import subprocess

import pytest
from conftest import ROOT

# A sibling folder, the reading material's layout, or a build machine's home/work path.
# This file is the one place that spells them out.
SELF = "tests/test_repository_stands_alone.py"
# Spelled in pieces so this file does not name the paths it forbids.
_SH = "shared"
OUTSIDE = re.compile(
    r"\.\./"
    + _SH
    + "|"
    + _SH
    + "/reference|"
    + _SH
    + "/seed|/"
    + "work/|/home/\\w+|/root/|/Users/\\w+"
)


def _tracked_and_new_files() -> list[str]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [f for f in out.splitlines() if f]


def _offending_lines(files: list[str]) -> list[str]:
    found = []
    for name in files:
        path = ROOT / name
        if name == SELF:
            continue
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary sample payloads
        for number, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                found.append(f"{name}:{number}: {line.strip()[:100]}")
    return found


def test_no_tracked_file_names_a_path_outside_the_repository() -> None:
    files = _tracked_and_new_files()
    assert any(f.startswith("pipeline/") for f in files)
    assert _offending_lines(files) == []


def test_the_check_catches_a_sibling_folder_path(tmp_path) -> None:
    # the same matcher, on lines it must catch and lines it must let through
    assert OUTSIDE.search("SAMPLES = '../" + _SH + "/reference/samples'")
    assert OUTSIDE.search("Source: /" + "work/" + _SH + "/reference/caching-rules.md")
    assert not OUTSIDE.search("the shared prefix of two requests (tests/fixtures/samples)")
