"""How the Spark ingest deals byte ranges to its tasks: one Worker per group, so a table gets a
part per group and day at most between flushes, not one per range."""

from __future__ import annotations

from pipeline.engines.spark_ingest import _groups
from pipeline.ingest_plan import Task


def _tasks(weights: list[int]) -> list[Task]:
    return [Task(f"f{i}", "capture_jsonl", "h", weight=w) for i, w in enumerate(weights)]


def test_every_range_goes_to_exactly_one_of_at_most_the_given_number_of_groups() -> None:
    tasks = _tasks([64, 64, 64, 64, 64, 64, 64, 16, 16, 16, 16, 5])
    groups = _groups(tasks, 4)
    assert len(groups) == 4
    assert sorted(i for g in groups for i in g) == list(range(len(tasks)))


def test_groups_carry_about_equal_bytes_whatever_order_the_ranges_came_in() -> None:
    tasks = _tasks([16, 64, 5, 64, 16, 64, 64, 16, 64, 16, 64, 64])
    loads = [sum(tasks[i].weight for i in g) for g in _groups(tasks, 4)]
    assert max(loads) - min(loads) <= max(t.weight for t in tasks)


def test_fewer_ranges_than_slots_give_one_group_each() -> None:
    assert sorted(_groups(_tasks([3, 9]), 8)) == [[0], [1]]
    assert _groups([], 4) == [[]]
