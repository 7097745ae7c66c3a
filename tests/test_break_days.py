"""`cacheaudit build` stores cache_breaks by day and, after an ingest that request_prefix could
take day by day, computes the breaks from the first day it changed on, reading the parents of
those requests wherever they lie (pipeline/break_days.py). Each test compares the rows with
those of a forced full build of the same warehouse."""

from __future__ import annotations

from pathlib import Path

from test_days_support import computing, same_as_full_build
from test_prefix_support import REPLY, at, chat, system, user

from pipeline import break_days, materialise, prefix_days
from pipeline.ingest import ingest
from pipeline.warehouse import Warehouse

DAY = 86_400


def test_a_turn_whose_parent_lies_days_before_reads_that_parent(tmp_path: Path) -> None:
    s = system("Long-lived. " + "Follow the runbook. " * 300)
    first, late = tmp_path / "first.jsonl", tmp_path / "late.jsonl"
    first.write_bytes(b"".join(chat(at(i * DAY), f"a{i}", [s, user(f"q{i}")]) for i in range(6)))
    wh = Warehouse(tmp_path / "wh")
    ingest([first], wh, workers=1)
    materialise.build(wh)
    # a week later, the first conversation goes on: its parent is six days before the new day
    late.write_bytes(chat(at(7 * DAY), "later", [s, user("q0"), REPLY, user("and then?")]))
    ingest([late], wh, workers=1)
    said = computing(wh, break_days.VIEW)
    assert said == [
        f"{break_days.VIEW}: computing 2026-11-23 to 2026-11-23 (parents from 2026-11-16)"
    ]
    rows = {r[0]: r for r in same_as_full_build(wh, break_days.VIEW)}
    assert rows["later"][3] == "a0"  # parent_request_id: found, not a cold start
    assert rows["later"][9] != "cold_start"


def test_a_request_whose_start_is_unknown_makes_the_breaks_a_full_build() -> None:
    days = {"2026-11-16": "a", "2026-11-17": "b", prefix_days.UNKNOWN_DAY: "c"}
    assert prefix_days.first_changed_day({"2026-11-17"}, days) is None
    del days[prefix_days.UNKNOWN_DAY]
    assert str(prefix_days.first_changed_day({"2026-11-17"}, days)) == "2026-11-17"
    # nothing computed again: every stored day is kept
    assert str(prefix_days.first_changed_day(set(), days)) == "2026-11-18"
