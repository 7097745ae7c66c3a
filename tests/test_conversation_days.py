"""`cacheaudit build` stores conversation_links by day and, after an ingest that request_prefix
could take day by day, links the requests from the first day it changed on to the stored links
of the earlier days (the seed; pipeline/conversation_days.py). Each test compares every column
with a forced full build of the same warehouse."""

from __future__ import annotations

from pathlib import Path

from test_days_support import computing, same_as_full_build, stored_by_request
from test_prefix_support import REPLY, at, chat, system, user

from pipeline import conversation_days, materialise
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
    first, second = tmp_path / "early.jsonl", tmp_path / "late.jsonl"
    first.write_bytes(b"".join(early))
    second.write_bytes(b"".join(late))
    wh = Warehouse(tmp_path / "wh")
    ingest([first], wh, workers=1)
    materialise.build(wh)
    ingest([second], wh, workers=1)
    assert computing(wh, conversation_days.VIEW) == [
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
