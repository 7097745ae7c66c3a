"""Every file cacheaudit keeps only to save time goes to one directory, named one way."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline import user_cache
from pipeline.prices import library_cache
from pipeline.reports import bundle


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({"CACHEAUDIT_CACHE_DIR": "chosen", "CACHEAUDIT_CACHE": "old"}, "chosen"),
        # the name the report bundle once read, still honoured on its own
        ({"CACHEAUDIT_CACHE": "old"}, "old"),
    ],
)
def test_cache_dir_is_the_directory_the_user_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, variables: dict[str, str], expected: str
) -> None:
    monkeypatch.delenv("CACHEAUDIT_CACHE_DIR", raising=False)
    for name, folder in variables.items():
        monkeypatch.setenv(name, str(tmp_path / folder))
    assert user_cache.cache_dir() == tmp_path / expected


def test_without_a_variable_the_cache_follows_xdg_cache_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("CACHEAUDIT_CACHE_DIR", raising=False)
    monkeypatch.delenv("CACHEAUDIT_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert user_cache.cache_dir() == tmp_path / "xdg" / "cacheaudit"


def test_the_price_rows_and_the_report_bundle_land_in_the_same_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    chosen = tmp_path / "chosen"
    monkeypatch.setenv("CACHEAUDIT_CACHE_DIR", str(chosen))
    monkeypatch.delenv("CACHEAUDIT_CACHE", raising=False)
    bundle.javascript.cache_clear()
    try:
        js = bundle.javascript()
    finally:
        bundle.javascript.cache_clear()
    assert "vegaEmbed" in js
    assert [p.name for p in chosen.glob("vega-bundle-*.js")]
    assert library_cache.path_for("some release").parent == chosen
