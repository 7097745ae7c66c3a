"""The price library's rows are converted once and read back from a cache file by later
processes: the same rows, never a stale file, and a cache that cannot be used costs time only."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.prices import library, library_cache


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CACHEAUDIT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def release() -> str:
    found = library.version()
    assert found is not None, "genai-prices is a dependency"
    return found


def test_the_rows_read_from_the_cache_are_the_rows_converted(cache: Path) -> None:
    built = library._convert(release())
    assert len(built) > 4000
    assert library_cache.load(release()) is None  # nothing cached yet
    library_cache.store(release(), built)
    assert [p.name for p in cache.iterdir()] == [library_cache.path_for(release()).name]
    assert library_cache.load(release()) == built


def test_another_release_or_converter_names_another_file(cache: Path) -> None:
    library_cache.store(release(), library._convert(release())[:3])
    assert library_cache.load("0.0.1") is None
    assert library_cache.path_for("0.0.1") != library_cache.path_for(release())


def test_a_damaged_cache_file_is_rebuilt_not_read(cache: Path) -> None:
    path = library_cache.path_for(release())
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"rows": [{"file": 1}]')
    assert library_cache.load(release()) is None


def test_a_cache_that_cannot_be_written_costs_time_only(tmp_path: Path, monkeypatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory", encoding="utf-8")
    monkeypatch.setenv("CACHEAUDIT_CACHE_DIR", str(blocker / "cache"))
    library_cache.store(release(), library._convert(release())[:3])  # no error
    assert library_cache.load(release()) is None
