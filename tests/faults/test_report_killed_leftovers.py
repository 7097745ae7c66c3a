"""A report killed while it wrote a page (SIGKILL: no clean-up runs) left `.<page>.<pid>.tmp`
beside the pages for good, and one killed while it cached the Vega bundle left the bundle's
temporary file (2 MB) in the cache. The next report writing there removes those of processes
that are gone, and nothing else: a running report's file, or any other file, stays."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from test_build_killed_leftovers import _dead_pid
from test_report_support import ROWS, write_requests

from pipeline.reports import bundle
from pipeline.reports.weekly import WeekSelection, generate_weekly


def test_the_next_report_removes_the_page_a_killed_report_was_writing(tmp_path: Path) -> None:
    wh = write_requests(tmp_path / "wh", ROWS)
    out = tmp_path / "out"
    out.mkdir()
    dead, running = _dead_pid(), os.getpid()
    killed = [out / f".2026-W47.html.{dead}.tmp", out / f".weeks.json.{dead}.tmp"]
    kept = [
        out / f".2026-W47.html.{running}.tmp",  # a report writing now
        out / f".notes.txt.{dead}.tmp",  # not a page
        out / f"2026-W47.html.{dead}.tmp",  # not hidden: not a report's
    ]
    for path in [*killed, *kept]:
        path.write_text("<html>half")
    folder = out / f".old.html.{dead}.tmp"  # a folder: never a report's
    folder.mkdir()

    generate_weekly(
        wh, out, WeekSelection(week="2026-W48"), now=datetime(2026, 12, 1, 9, tzinfo=UTC)
    )

    assert not any(path.exists() for path in killed)
    assert all(path.exists() for path in kept) and folder.is_dir()


def test_the_next_bundle_written_removes_the_one_a_killed_report_was_writing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("CACHEAUDIT_CACHE_DIR", str(cache))
    dead, running = _dead_pid(), os.getpid()
    killed = cache / f".vega-bundle-vlc1.0.0-vl6.4.js.{dead}.tmp"
    alive = cache / f".vega-bundle-vlc1.0.0-vl6.4.js.{running}.tmp"
    other = cache / f".price-library-abc.json.{dead}.tmp"
    for path in (killed, alive, other):
        path.write_text("window.vega")
    bundle.javascript.cache_clear()
    try:
        bundle.javascript()
    finally:
        bundle.javascript.cache_clear()

    assert not killed.exists()
    assert alive.exists() and other.exists()
