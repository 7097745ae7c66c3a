"""conversation_links and cache_breaks are stored by day and, after an ingest that
request_prefix could take day by day, computed from the first day it changed on
(pipeline/conversation_days.py, pipeline/break_days.py); otherwise in one full build. Each test
compares every column with a forced full build of the same warehouse."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest
from test_days_support import SPLIT, computing, demo_halves, inodes, same_as_full_build

from pipeline import break_days, conversation_days, day_folders, derived, materialise, prefix_days
from pipeline.ingest import ingest
from pipeline.warehouse import Warehouse

# what each view says when it computes the demo's later days
COMPUTING = {
    conversation_days.VIEW: (
        f"computing {SPLIT} to 2026-11-30 (the stored days before them as seed)"
    ),
    break_days.VIEW: f"computing {SPLIT} to 2026-11-30 (parents from {SPLIT})",
}


@pytest.fixture(scope="module")
def halves(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return demo_halves(tmp_path_factory.mktemp("from-first-day"))


@pytest.mark.parametrize("view", sorted(COMPUTING))
def test_new_days_are_computed_from_the_stored_days_which_are_kept(
    view: str, tmp_path: Path, halves: tuple[Path, Path]
) -> None:
    early, late = halves
    wh = Warehouse(tmp_path / "wh")
    ingest([early], wh, workers=1)
    assert computing(wh, view) == []  # the first build computes every day at once
    before = inodes(wh, view)
    ingest([late], wh, workers=1)
    assert computing(wh, view) == [f"{view}: {COMPUTING[view]}"]
    after = inodes(wh, view)
    assert {d: after[d] for d in before} == before  # the stored days' files, untouched
    assert all(after[d] for d in after if d >= SPLIT)  # the new days have their rows
    same_as_full_build(wh, view)


@pytest.mark.parametrize("view", sorted(COMPUTING))
def test_days_that_hold_most_of_the_requests_are_computed_in_one_full_build(
    view: str, tmp_path: Path, halves: tuple[Path, Path]
) -> None:
    early, late = halves
    wh = Warehouse(tmp_path / "wh")
    ingest([late], wh, workers=1)
    materialise.build(wh)
    before = inodes(wh, view)
    ingest([early], wh, workers=1)  # most of the requests: request_prefix builds every day
    assert computing(wh, view) == []
    after = inodes(wh, view)
    assert all(after[day].isdisjoint(before[day]) for day in before if before[day])
    same_as_full_build(wh, view)


def _recorded(wh: Warehouse, view: str) -> dict[str, int]:
    recorded = derived.stamp_doc(wh, view)[day_folders.DAY_ROWS]
    assert isinstance(recorded, dict)
    return {str(k): int(v) for k, v in recorded.items()}


def _footers(wh: Warehouse, view: str) -> dict[str, int]:
    """Each day folder's rows, from the footers of its files."""
    rows = duckdb.sql(
        "SELECT file_name, num_rows FROM parquet_file_metadata($p)",
        params={"p": str(derived.derived_path(wh, view) / "*" / "*.parquet")},
    ).fetchall()
    out: dict[str, int] = {}
    for name, count in rows:
        out[Path(name).parent.name] = out.get(Path(name).parent.name, 0) + int(count)
    return out


def test_the_stamp_records_each_days_rows_and_a_kept_day_is_not_counted_again(
    tmp_path: Path, halves: tuple[Path, Path]
) -> None:
    early, late = halves
    wh = Warehouse(tmp_path / "wh")
    ingest([early], wh, workers=1)
    materialise.build(wh)
    views = (prefix_days.VIEW, *sorted(COMPUTING))
    for view in views:
        assert _recorded(wh, view) == _footers(wh, view), view
        assert sum(_recorded(wh, view).values()) == derived.stamp_doc(wh, view)["rows"]
    # a wrong count for a day the next build keeps shows whether that day is read again
    stamp = derived.stamp_path(wh, prefix_days.VIEW)
    doc = json.loads(stamp.read_text())
    kept = min(doc[day_folders.DAY_ROWS])
    doc[day_folders.DAY_ROWS][kept] += 1000
    stamp.write_text(json.dumps(doc))
    ingest([late], wh, workers=1)
    materialise.build(wh)
    for view in views:
        expected = _footers(wh, view)
        assert any(day >= SPLIT for day in expected)
        if view == prefix_days.VIEW:
            expected[kept] += 1000  # linked from the stored day: its files were not read
        assert _recorded(wh, view) == expected, view
    # the same day's files copied rather than linked are other files: they are counted
    out = tmp_path / "copy"
    shutil.copytree(derived.derived_path(wh, prefix_days.VIEW), out)
    doc = derived.stamp_doc(wh, prefix_days.VIEW)
    counted = day_folders.count_days(out, derived.derived_path(wh, prefix_days.VIEW), doc)
    assert counted == _footers(wh, prefix_days.VIEW)
