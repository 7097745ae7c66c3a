"""The project's license is declared as an SPDX expression (PEP 639), the form setuptools 77+
reads without its "`project.license` as a TOML table is deprecated" warning."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.licenses import canonicalize_license_expression
from packaging.requirements import Requirement
from packaging.version import Version

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def test_the_license_is_a_valid_spdx_expression_string_not_a_table() -> None:
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    assert isinstance(project["license"], str)
    assert canonicalize_license_expression(project["license"]) == project["license"]


def test_the_build_requires_a_setuptools_that_reads_spdx_license_strings() -> None:
    requires = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["build-system"]["requires"]
    setuptools = next(Requirement(r) for r in requires if Requirement(r).name == "setuptools")
    assert setuptools.specifier.contains(Version("77.0.0"))
    assert not setuptools.specifier.contains(Version("76.9"))
