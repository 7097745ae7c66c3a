"""`cacheaudit build` stores conversation_links by day and, after an ingest that request_prefix
could take day by day, links the requests from the first day it changed on to the stored links
of the earlier days (the seed; pipeline/conversation_days.py). Each test compares every column
with a forced full build of the same warehouse."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import duckdb
import pytest
from test_days_support import (
    built_then_more,
    computing,
    same_as_full_build,
    stored_by_request,
)
from test_prefix_support import REPLY, at, chat, refused, system, tool, user

from pipeline import break_days, conversation_days, derived, materialise, prefix_days
from pipeline.ingest import ingest
from pipeline.warehouse import Warehouse

DAY = 86_400


def test_sessions_lineages_and_resends_go_on_across_the_days_of_the_seed(tmp_path: Path) -> None:
    s = system("Seeded. " + "Follow the runbook. " * 300)
    other = system("Other agent. " + "Check the logs. " * 300)
    early = [
        chat(at(0), "s1", [s, user("start")], session="sess"),
        chat(at(DAY), "s2", [s, user("start"), REPLY, user("go on")], session="sess"),
        # no session id, but it goes on from the session's opening: numbered in the session
        chat(at(DAY / 4), "b1", [s, user("start"), user("meanwhile")]),
        chat(at(DAY / 2), "l1", [s, user("question")]),
        chat(at(2 * DAY - 120), "r1", [other, user("once")]),  # two minutes before midnight
        *(chat(at(i * 3600 + 60), f"f{i}", [other, user(f"filler {i}")]) for i in range(8)),
    ]
    late = [
        chat(at(2 * DAY + 120), "r2", [other, user("once")]),  # the same prompt, sent again
        chat(at(6 * DAY), "s3", [s, user("start"), REPLY, user("go on"), REPLY, user("end")],
             session="sess"),
        chat(at(6 * DAY + 60), "l2", [s, user("question"), REPLY, user("and then?")]),
    ]  # fmt: skip
    wh, said = built_then_more(tmp_path, early, late, conversation_days.VIEW)
    assert said == [
        f"{conversation_days.VIEW}: computing 2026-11-18 to 2026-11-22 "
        "(the stored days before them as seed)"
    ]
    same_as_full_build(wh, conversation_days.VIEW)
    rows = stored_by_request(wh, conversation_days.VIEW)
    assert (rows["b1"]["conversation_id"], rows["b1"]["turn"]) == ("sess", 2)
    assert (rows["s3"]["conversation_id"], rows["s3"]["turn"]) == ("sess", 4)
    assert rows["s3"]["parent_request_id"] == "s2"
    assert (rows["l2"]["conversation_id"], rows["l2"]["turn"]) == ("l1", 2)
    assert rows["l2"]["link_method"] == "history"
    assert (rows["r2"]["link_method"], rows["r2"]["parent_request_id"]) == ("resend", "r1")


def test_a_prompt_sent_again_just_after_midnight_repeats_the_stored_request_before_it(
    tmp_path: Path,
) -> None:
    # the seed's rows are read for re-sends only within the longest link window before the
    # first request computed: the request repeated here is two minutes before that one
    other = system("Resent. " + "Check the logs. " * 300)
    midnight = 15 * 3_600  # T0 is 09:00 on 2026-11-16
    early = [
        *(chat(at(h * 3_600), f"f{h}", [other, user(f"filler {h}")]) for h in range(4)),
        chat(at(midnight - 120), "r1", [other, user("once")]),
    ]
    late = [chat(at(midnight + 120), "r2", [other, user("once")])]
    wh, said = built_then_more(tmp_path, early, late, conversation_days.VIEW)
    assert said == [
        f"{conversation_days.VIEW}: computing 2026-11-17 to 2026-11-17 "
        "(the stored days before them as seed)"
    ]
    rows = stored_by_request(wh, conversation_days.VIEW)
    assert (rows["r2"]["link_method"], rows["r2"]["parent_request_id"]) == ("resend", "r1")
    same_as_full_build(wh, conversation_days.VIEW)


def test_a_day_gone_from_the_warehouse_is_no_seed_and_the_turns_after_it_are_linked_again(
    tmp_path: Path,
) -> None:
    s = system("Seeded. " + "Follow the runbook. " * 300)
    other = system("Other agent. " + "Check the logs. " * 300)
    kept = [
        chat(at(0), "s1", [s, user("start")], session="sess"),
        *(chat(at(i * 600 + 60), f"f{i}", [other, user(f"filler {i}")]) for i in range(8)),
        chat(at(10 * DAY), "s3", [s, user("start"), REPLY, user("a"), REPLY, user("b")],
             session="sess"),
    ]  # fmt: skip
    gone = [chat(at(3 * DAY), "s2", [s, user("start"), REPLY, user("a")], session="sess")]
    first, second = tmp_path / "kept.jsonl", tmp_path / "gone.jsonl"
    first.write_bytes(b"".join(kept))
    second.write_bytes(b"".join(gone))
    wh = Warehouse(tmp_path / "wh")
    ingest([first, second], wh, workers=1)
    materialise.build(wh)
    assert stored_by_request(wh, conversation_days.VIEW)["s3"]["turn"] == 3
    # the second file's generation removed: its day, three days after the first, is gone
    (stem,) = {p.name.split("-")[0] for p in (wh.root / "requests" / "day=2026-11-19").iterdir()}
    wh.remove_stem(stem)
    computing(wh, conversation_days.VIEW)
    same_as_full_build(wh, conversation_days.VIEW)
    rows = stored_by_request(wh, conversation_days.VIEW)
    assert "s2" not in rows
    assert (rows["s3"]["turn"], rows["s3"]["parent_request_id"]) == (2, "s1")


def _random_traffic(seed: int, days: int = 6, conversations: int = 14) -> list[tuple[float, bytes]]:
    """Agent traffic with every kind of link: sessions that come and go, refused requests and
    their retries, resends, forks, summarised histories, tool and system prompt switches, and
    gaps from half a minute to two days. (start in seconds from T0, record)."""
    rnd = random.Random(seed)
    prompts = [system(f"Agent {k}. " + "Follow the runbook. " * 300) for k in range(3)]
    tool_sets = [None, [tool("a"), tool("b")], [tool("b"), tool("a")], [tool("c")]]
    out: list[tuple[float, bytes]] = []
    n = 0
    for c in range(conversations):
        session = f"sess{c % 4}" if rnd.random() < 0.35 else None
        tools = rnd.choice(tool_sets)
        messages = [rnd.choice(prompts), user(rnd.choice(["Start the task.", "Hello", "Go"]))]
        t = rnd.uniform(0, days * DAY * 0.8)
        for turn in range(rnd.randint(1, 6)):
            n += 1
            if rnd.random() < 0.12:
                body = {
                    "model": "gpt-4.1",
                    "messages": messages,
                    **({"tools": tools} if tools else {}),
                }
                out.append((t, refused(at(t), f"c{c}t{turn}x{n}", body, session=session)))
                t += rnd.uniform(1, 120)
            out.append((t, chat(at(t), f"c{c}t{turn}n{n}", messages, tools=tools, session=session)))
            if rnd.random() < 0.15:  # the same prompt again
                again = t + rnd.uniform(1, 3000)
                out.append(
                    (
                        again,
                        chat(at(again), f"c{c}t{turn}r{n}", messages, tools=tools, session=session),
                    )
                )
            if rnd.random() < 0.12:  # a fork: another last message
                fork = t + rnd.uniform(1, 600)
                forked = [*messages[:-1], user(f"fork {n}")]
                out.append(
                    (
                        fork,
                        chat(
                            at(fork),
                            f"c{c}t{turn}f{n}",
                            forked,
                            tools=tools,
                            session=None if rnd.random() < 0.5 else session,
                        ),
                    )
                )
            if rnd.random() < 0.08 and len(messages) > 3:  # a summarised history
                messages = [*messages[:2], user(f"summary {n}")]
            else:
                messages = [*messages, REPLY, user(f"next {c} {turn}")]
            if rnd.random() < 0.1:
                tools = rnd.choice(tool_sets)
            if rnd.random() < 0.1:
                session = None if session else f"sess{rnd.randint(0, 3)}"
            t += rnd.choice([30, 300, 3000, 20000, 90000, 200000])
    fillers = [system("Agent 0. " + "Follow the runbook. " * 300)]
    out += [
        (i * 97.0, chat(at(i * 97.0), f"fill{i}", [*fillers, user(f"filler {i}")]))
        for i in range(60)
    ]
    return sorted(out, key=lambda x: x[0])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_agent_traffic_split_in_two_ingests_gives_the_rows_of_a_full_build(
    seed: int, tmp_path: Path
) -> None:
    records = _random_traffic(seed)
    split = 4 * DAY - 9 * 3600  # midnight before the fifth day (T0 is 09:00)
    first, second = tmp_path / "early.jsonl", tmp_path / "late.jsonl"
    first.write_bytes(b"".join(r for t, r in records if t < split))
    second.write_bytes(b"".join(r for t, r in records if t >= split))
    wh = Warehouse(tmp_path / "wh")
    ingest([first], wh, workers=1)
    materialise.build(wh)
    ingest([second], wh, workers=1)
    assert computing(wh, conversation_days.VIEW)  # the seeded path ran
    links = stored_by_request(wh, conversation_days.VIEW)
    breaks = stored_by_request(wh, break_days.VIEW)
    early = {r for r, row in links.items() if row["started_at"] < at(split)}
    # some turns after the split continue conversations from before it
    assert any(row["parent_request_id"] in early for r, row in links.items() if r not in early)
    materialise.build(wh, force=True)
    assert stored_by_request(wh, conversation_days.VIEW) == links
    assert stored_by_request(wh, break_days.VIEW) == breaks


@pytest.mark.parametrize("seed", [0, 1])
def test_a_full_build_in_runs_of_days_gives_the_rows_of_one_pass(
    seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = system("Long-lived. " + "Follow the runbook. " * 300)
    # a turn five days after its parent: beyond any margin a session reads before its run
    late_turn = [
        chat(at(0.1 * DAY), "old", [s, user("q0")]),
        chat(at(5.5 * DAY), "later", [s, user("q0"), REPLY, user("and then?")]),
    ]
    capture = tmp_path / "capture.jsonl"
    capture.write_bytes(b"".join([*(r for _, r in _random_traffic(seed)), *late_turn]))
    wh = Warehouse(tmp_path / "wh")
    ingest([capture], wh, workers=1)
    materialise.build(wh)  # one pass: far fewer requests than RUN_REQUESTS
    links = stored_by_request(wh, conversation_days.VIEW)
    breaks = stored_by_request(wh, break_days.VIEW)
    assert links["later"]["parent_request_id"] == "old"
    assert breaks["later"]["cause"] != "cold_start"
    monkeypatch.setattr(prefix_days, "RUN_REQUESTS", 40)
    said: list[str] = []
    materialise.build(wh, force=True, progress=said.append)
    runs = [line for line in said if "a run of days" in line]
    assert len(runs) >= 3, said
    assert len([line for line in said if line.startswith(f"{break_days.VIEW}: computing")]) == len(
        runs
    )
    # some turns continue a conversation of an earlier run: the seed was read
    first_run_last_day = runs[0].split(" to ")[1][:10]
    early = {r for r, row in links.items() if str(row["started_at"])[:10] <= first_run_last_day}
    assert any(row["parent_request_id"] in early for r, row in links.items() if r not in early)
    assert stored_by_request(wh, conversation_days.VIEW) == links
    assert stored_by_request(wh, break_days.VIEW) == breaks


def test_stored_links_keep_lineage_starts_and_second_turns_together_for_the_seed_lookups(
    tmp_path: Path,
) -> None:
    """Row groups (16,384 rows, DuckDB's minimum is 2,048) without such rows are skipped by
    their statistics; here each day is one row group, so the test checks the order."""
    capture = tmp_path / "capture.jsonl"
    capture.write_bytes(b"".join(r for _, r in _random_traffic(3, days=3, conversations=60)))
    wh = Warehouse(tmp_path / "wh")
    ingest([capture], wh, workers=1)
    materialise.build(wh)
    # a partitioned write keeps the order within each thread's share of the rows
    ((threads,),) = duckdb.sql("SELECT current_setting('threads')").fetchall()
    checked = 0
    for part in sorted(derived.derived_path(wh, conversation_days.VIEW).rglob("*.parquet")):
        keys = duckdb.sql(
            "SELECT history_parent IS NOT NULL, second_turn FROM read_parquet($p, "
            "file_row_number = true) ORDER BY file_row_number",
            params={"p": str(part)},
        ).fetchall()
        if len(keys) < 48 or len(set(keys)) < 3:
            continue
        runs = 1 + sum(a != b for a, b in itertools.pairwise(keys))
        assert runs <= len(set(keys)) * int(threads), part
        checked += 1
    assert checked >= 2
