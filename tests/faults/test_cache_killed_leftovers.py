"""A process killed while it wrote a file of the user cache (SIGKILL: no clean-up runs) left
its temporary file there for good: the price library's rows, or the DuckDB file kept for new
warehouses (megabytes). The next write of either removes those of processes that are gone, and
nothing else."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from test_build_killed_leftovers import _dead_pid

from pipeline import warehouse_db
from pipeline.prices import library_cache


def _leftovers(cache: Path) -> tuple[list[Path], list[Path]]:
    dead, running = _dead_pid(), os.getpid()
    killed = [
        cache / f".price-library-{'a' * 24}.json.{dead}.tmp",
        cache / f".warehouse-db-{'b' * 32}.duckdb.{dead}.tmp",
    ]
    kept = [
        cache / f".price-library-{'a' * 24}.json.{running}.tmp",  # a write going on now
        cache / f"price-library-{'a' * 24}.json.{dead}.tmp",  # not hidden: not ours
        cache / f".notes.json.{dead}.tmp",  # another name
    ]
    cache.mkdir(parents=True, exist_ok=True)
    for path in [*killed, *kept]:
        path.write_bytes(b"half")
    return killed, kept


def _store_price_rows(cache: Path) -> None:
    library_cache.store("a-release", ())
    assert library_cache.load("a-release") == ()


def _keep_duckdb_template(cache: Path) -> None:
    written = cache.parent / "written.duckdb"
    written.write_bytes(b"a database")
    warehouse_db._keep_template(written, "c" * 64)
    assert (cache / f"warehouse-db-{'c' * 32}.duckdb").read_bytes() == b"a database"


@pytest.mark.parametrize("write", [_store_price_rows, _keep_duckdb_template])
def test_the_next_cache_write_removes_what_killed_writers_left_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write: Callable[[Path], None]
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("CACHEAUDIT_CACHE_DIR", str(cache))
    killed, kept = _leftovers(cache)
    write(cache)
    assert [p for p in killed if p.exists()] == []
    assert all(p.exists() for p in kept)
