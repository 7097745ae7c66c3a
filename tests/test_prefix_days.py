"""`cacheaudit build` stores request_prefix by day and, after an ingest, computes only the days
it changed and the days within the horizon after them (pipeline/prefix_days.py). Each test
compares the rows with those of a forced full build of the same warehouse, and checks which
days were computed from the build's own progress lines and the stored files' inodes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from test_days_support import (
    SPLIT,
    built_then_more,
    computing,
    demo_halves,
    inodes,
    same_as_full_build,
    stored_by_request,
)
from test_prefix_support import (
    OPENAI,
    REPLY,
    _record,
    at,
    chat,
    deepseek,
    refused,
    system,
    user,
)

from pipeline import cache_rules, derived, materialise, prefix_days, sql
from pipeline.ingest import ingest
from pipeline.warehouse import Warehouse


@pytest.fixture(scope="module")
def halves(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return demo_halves(tmp_path_factory.mktemp("days"))


def _build(wh: Warehouse, **kw: Any) -> list[str]:
    return computing(wh, prefix_days.VIEW, **kw)


def _inodes(wh: Warehouse) -> dict[str, set[int]]:
    return inodes(wh, prefix_days.VIEW)


def _same_as_full_build(wh: Warehouse, options: sql.SqlOptions | None = None) -> None:
    same_as_full_build(wh, prefix_days.VIEW, options)


def test_a_new_day_computes_that_day_alone_and_keeps_the_stored_ones(
    tmp_path: Path, halves: tuple[Path, Path]
) -> None:
    early, late = halves
    wh = Warehouse(tmp_path / "wh")
    ingest([early], wh, workers=1)
    assert _build(wh) == []  # the first build computes every day at once
    before = _inodes(wh)
    assert sorted(before)[-1] < SPLIT
    ingest([late], wh, workers=1)
    said = _build(wh)
    assert said == [f"{prefix_days.VIEW}: computing {SPLIT} to 2026-11-30 (3 days before them)"]
    after = _inodes(wh)
    assert {d: after[d] for d in before} == before  # the stored days' files, untouched
    _same_as_full_build(wh)


def test_days_that_hold_most_of_the_requests_are_computed_in_one_full_build(
    tmp_path: Path, halves: tuple[Path, Path]
) -> None:
    early, late = halves
    wh = Warehouse(tmp_path / "wh")
    ingest([late], wh, workers=1)
    materialise.build(wh)
    before = _inodes(wh)
    ingest([early], wh, workers=1)
    # eleven earlier days and three stored ones after them: most of the requests
    assert _build(wh) == []
    after = _inodes(wh)
    assert all(after[day].isdisjoint(before[day]) for day in before)
    _same_as_full_build(wh)


def test_a_request_ingested_into_a_stored_day_computes_that_day_and_the_horizon_after_it(
    tmp_path: Path,
) -> None:
    s = system("Backfill. " + "Follow the runbook. " * 300)
    day = 86_400
    first, late = tmp_path / "first.jsonl", tmp_path / "late.jsonl"
    first.write_bytes(b"".join(chat(at(i * day), f"a{i}", [s, user(f"q{i}")]) for i in range(12)))
    wh = Warehouse(tmp_path / "wh")
    ingest([first], wh, workers=1)
    materialise.build(wh)
    before = _inodes(wh)
    # a file exported late: one request of the second day, an hour after the one stored
    late.write_bytes(chat(at(day + 3600), "late", [s, user("q1"), REPLY, user("more")]))
    ingest([late], wh, workers=1)
    said = _build(wh)
    assert said == [f"{prefix_days.VIEW}: computing 2026-11-17 to 2026-11-20 (3 days before them)"]
    after = _inodes(wh)
    kept = {"2026-11-16", *(f"2026-11-{d}" for d in range(21, 28))}
    assert {d: after[d] for d in kept} == {d: before[d] for d in kept}
    assert all(after[d] != before[d] for d in ("2026-11-17", "2026-11-20"))
    _same_as_full_build(wh)


def test_a_refused_request_that_takes_a_later_answers_model_computes_its_day(
    tmp_path: Path,
) -> None:
    s = system("Alias. " + "Follow the runbook. " * 300)
    body = {"model": "gpt-4.1", "messages": [s, user("q")]}
    day = 86_400
    early = tmp_path / "early.jsonl"
    late = tmp_path / "late.jsonl"
    early.write_bytes(
        refused(at(0), "r0", body)
        + b"".join(chat(at(i * day), f"x{i}", [s, user(f"x{i}")], model="gpt-4o") for i in (5, 6))
    )
    # the first answer to gpt-4.1, 12 days later: the refused request was served by its model
    answer = {
        "id": "a12",
        "object": "chat.completion",
        "model": "gpt-4.1-2025-04-14",
        "choices": [{"index": 0, "message": REPLY, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 2000, "completion_tokens": 5, "total_tokens": 2005},
    }
    late.write_bytes(_record(at(12 * day), "a12", OPENAI, body, answer))
    wh = Warehouse(tmp_path / "wh")
    ingest([early], wh, workers=1)
    materialise.build(wh)
    ingest([late], wh, workers=1)
    said = _build(wh)
    assert f"{prefix_days.VIEW}: computing 2026-11-16 to 2026-11-16 (3 days before them)" in said
    _same_as_full_build(wh)


def test_rules_of_ones_own_compute_every_day_once_and_widen_the_horizon(
    tmp_path: Path, halves: tuple[Path, Path]
) -> None:
    early, late = halves
    builtin = cache_rules.builtin_paths()[0].read_text(encoding="utf-8").splitlines()
    rules = tmp_path / "rules.csv"
    five_days = 5 * 86_400
    rules.write_text(f"{builtin[0]}\nlong,acme,*,,,prefix,1024,128,{five_days},,,,\n")
    options = sql.SqlOptions(rules_paths=(rules,))
    wh = Warehouse(tmp_path / "wh")
    ingest([early], wh, workers=1)
    materialise.build(wh)
    before = _inodes(wh)
    assert _build(wh, options=options) == []
    after = _inodes(wh)
    assert all(after[day].isdisjoint(before[day]) for day in before)  # every day computed
    ingest([late], wh, workers=1)
    said = _build(wh, options=options)
    assert said == [f"{prefix_days.VIEW}: computing {SPLIT} to 2026-11-30 (5 days before them)"]
    _same_as_full_build(wh, options)


def test_a_build_that_dies_while_removing_the_old_days_leaves_no_stamp_to_trust(
    tmp_path: Path, halves: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    early, late = halves
    wh = Warehouse(tmp_path / "wh")
    ingest([early], wh, workers=1)
    materialise.build(wh)
    ingest([late], wh, workers=1)
    stored = derived.derived_path(wh, prefix_days.VIEW)
    real_remove = materialise._remove

    def dies_halfway(path: Path) -> None:
        if path == stored:  # one day's files gone, then the process dies
            for part in sorted(stored.iterdir())[0].iterdir():
                part.unlink()
            raise KeyboardInterrupt
        real_remove(path)

    monkeypatch.setattr(materialise, "_remove", dies_halfway)
    with pytest.raises(KeyboardInterrupt):
        materialise.build(wh)
    monkeypatch.setattr(materialise, "_remove", real_remove)
    assert not derived.stamp_path(wh, prefix_days.VIEW).exists()
    assert _build(wh) == []  # no stamp: every day computed, none linked from the remains
    _same_as_full_build(wh)


def _cassette_without_dates(path: Path, asks: list[str]) -> None:
    """A VCR cassette whose responses carry no Date header: its requests' start is unknown."""
    system_prompt = {"role": "system", "content": "Cassette. " + "Keep to the plan. " * 200}
    interactions = []
    for n, ask in enumerate(asks):
        body = {"model": "deepseek-chat", "messages": [system_prompt, user(ask)]}
        usage = {"prompt_tokens": 900 + n, "completion_tokens": 1, "prompt_cache_hit_tokens": 0}
        answer = {"id": f"{path.stem}-{n}", "model": "deepseek-chat", "choices": [], "usage": usage}
        interactions.append(
            {
                "request": {
                    "uri": "https://api.deepseek.com/chat/completions",
                    "method": "POST",
                    "headers": {},
                    "body": orjson.dumps(body).decode(),
                },
                "response": {
                    "status": {"code": 200, "message": "OK"},
                    "headers": {},
                    "body": {"string": orjson.dumps(answer).decode()},
                },
            }
        )
    path.write_text(yaml.safe_dump({"interactions": interactions, "version": 1}))


def test_requests_whose_start_is_unknown_are_computed_again_when_more_of_them_arrive(
    tmp_path: Path,
) -> None:
    s = system("Known. " + "Follow the runbook. " * 300)
    day = 86_400
    known = tmp_path / "known.jsonl"
    known.write_bytes(b"".join(chat(at(i * day), f"k{i}", [s, user(f"q{i}")]) for i in range(6)))
    first, second = tmp_path / "first.yaml", tmp_path / "second.yaml"
    _cassette_without_dates(first, ["one", "two"])
    _cassette_without_dates(second, ["three"])
    wh = Warehouse(tmp_path / "wh")
    ingest([known, first], wh, workers=1)
    materialise.build(wh)
    before = _inodes(wh)
    assert prefix_days.UNKNOWN_DAY in before
    ingest([second], wh, workers=1)
    said = _build(wh)
    assert said == [f"{prefix_days.VIEW}: computing the requests whose start is unknown"]
    after = _inodes(wh)
    assert after[prefix_days.UNKNOWN_DAY] != before[prefix_days.UNKNOWN_DAY]
    assert {d: after[d] for d in before if d != prefix_days.UNKNOWN_DAY} == {
        d: before[d] for d in before if d != prefix_days.UNKNOWN_DAY
    }
    _same_as_full_build(wh)
    rows = stored_by_request(wh, prefix_days.VIEW)
    unknown = [r for r in rows.values() if r["started_at"] is None]
    assert len(unknown) == 3


def test_the_horizon_keeps_the_older_requests_the_window_reads_past_the_latest(
    tmp_path: Path,
) -> None:
    """Of the day before, a build of one day keeps only the rows the window reads: of each
    prefix, the latest four requests with it and the latest whose prompt ended there. Two
    requests just after midnight read past the latest request of the day before."""
    midnight = 15 * 3600  # T0 is 09:00
    ask = [system("Horizon. " + "Follow the runbook. " * 300), user("q")]
    opening = [system("Units. " + "Follow the runbook. " * 300), user("start")]
    day_before = [
        # the entry of `a`, then a refused retry of it
        chat(at(midnight - 120), "a", ask),
        refused(at(midnight - 60), "b", {"model": "gpt-4.1-2025-04-14", "messages": ask}),
        # a DeepSeek input unit (the opening's whole prompt), then four prompts that extend it
        deepseek(at(midnight - 600), "d0", opening),
        *(
            deepseek(at(midnight - 500 + 60 * i), f"d{i + 1}", [*opening, user(f"{i}")])
            for i in range(4)
        ),
    ]
    after = [
        chat(at(midnight + 60), "e", [ask[0], user("another question")]),
        deepseek(at(midnight + 120), "f", [*opening, REPLY, user("again")]),
    ]
    wh, said = built_then_more(tmp_path, day_before, after, prefix_days.VIEW)
    assert said == [f"{prefix_days.VIEW}: computing 2026-11-17 to 2026-11-17 (3 days before them)"]
    rows = stored_by_request(wh, prefix_days.VIEW)
    _same_as_full_build(wh)
    # `e` reads the entry `a` left of the system prompt: the request just before it with that
    # prompt (`b`) was refused
    assert rows["e"]["live_segments"] == 1
    # `f` reads the opening with its reply as a unit: `d0` ended there, four requests ago;
    # the four after it share the opening alone
    assert rows["f"]["unit_bytes"] > rows["d1"]["shared_bytes"]
