"""What makes two requests one conversation without session ids (schemas/conversations.json):

- two agents that open with the same user message ("Start the task.") but have their own
  system prompt and tools are two conversations, whether hours apart or interleaved, each
  starting cold, with no false tools_changed / model_changed;
- a model switch at turn 2 of one agent still continues its conversation (model_changed);
- a retry is the same request (model, system, tools, history) sent again soon after;
- a refused request gives way, as the parent, to the processed turn before it; a stream cut
  after it began wrote the cache and stays the parent."""

from __future__ import annotations

from pathlib import Path

from test_prefix_support import (
    BIG,
    REPLY,
    at,
    chat,
    cut_stream,
    openai_read,
    refused,
    system,
    tokens,
    tool,
    turns,
    user,
    warehouse,
)

TRIAGE = (system("You are the triage agent. " + BIG), [tool("triage")])
WRITER = (system("You are the writer agent. " + "Write clearly and well. " * 350), [tool("draft")])
START = user("Start the task.")


def _two_turns(tag: str, agent: tuple, t0: float, model: str = "gpt-4.1-2025-04-14") -> list:
    sysm, tools = agent
    m1 = [sysm, START]
    m2 = [*m1, REPLY, user(f"{tag} next")]
    read = openai_read(tokens(*tools, *m1))
    return [
        chat(at(t0), f"{tag}-1", m1, tools=tools, model=model),
        chat(at(t0 + 20), f"{tag}-2", m2, tools=tools, model=model, read=read),
    ]


def test_agents_opening_with_the_same_message_hours_apart_are_separate_conversations(
    tmp_path: Path,
) -> None:
    lines = _two_turns("tri", TRIAGE, 0) + _two_turns("wri", WRITER, 3600)
    lines += _two_turns("min", WRITER, 7200, model="gpt-4.1-mini-2025-04-14")
    got = turns(warehouse(tmp_path, lines))
    for tag in ("tri", "wri", "min"):
        assert got[f"{tag}-1"]["conversation_id"] == f"{tag}-1"
        assert got[f"{tag}-1"]["cause"] == "cold_start"
        assert (got[f"{tag}-2"]["conversation_id"], got[f"{tag}-2"]["parent_request_id"]) == (
            f"{tag}-1",
            f"{tag}-1",
        )
        assert got[f"{tag}-2"]["cause"] is None


def test_interleaved_agents_opening_with_the_same_message_keep_their_own_conversations(
    tmp_path: Path,
) -> None:
    lines = []
    for i, (tag, (sysm, tools)) in enumerate((("a", TRIAGE), ("b", WRITER))):
        history: list = [START]
        for turn in range(3):
            read = openai_read(tokens(*tools, sysm, *history[:-2])) if turn else 0
            lines.append(chat(at(turn * 20 + i * 10), f"{tag}{turn + 1}", [sysm, *history],
                              tools=tools, read=read))  # fmt: skip
            history += [REPLY, user(f"{tag} turn {turn + 2}")]
    got = turns(warehouse(tmp_path, lines))
    for tag in ("a", "b"):
        assert [got[f"{tag}{t}"]["conversation_id"] for t in (1, 2, 3)] == [f"{tag}1"] * 3
        assert [got[f"{tag}{t}"]["parent_request_id"] for t in (1, 2, 3)] == [
            None,
            f"{tag}1",
            f"{tag}2",
        ]
        assert [got[f"{tag}{t}"]["cause"] for t in (1, 2, 3)] == ["cold_start", None, None]


def test_a_model_switch_at_turn_two_still_continues_the_conversation(tmp_path: Path) -> None:
    sysm, tools = WRITER
    m1 = [sysm, START]
    lines = [
        chat(at(0), "one", m1, tools=tools),
        chat(at(20), "two", [*m1, REPLY, user("next")], tools=tools,
             model="gpt-4.1-mini-2025-04-14"),
    ]  # fmt: skip
    got = turns(warehouse(tmp_path, lines))
    assert (got["two"]["conversation_id"], got["two"]["cause"]) == ("one", "model_changed")


def test_the_same_opening_on_another_model_an_hour_later_is_no_retry(tmp_path: Path) -> None:
    sysm, tools = WRITER
    lines = [
        chat(at(0), "gpt", [sysm, START], tools=tools),
        chat(at(3600), "mini", [sysm, START], tools=tools, model="gpt-4.1-mini-2025-04-14"),
    ]
    got = turns(warehouse(tmp_path, lines))
    assert (got["mini"]["conversation_id"], got["mini"]["cause"]) == ("mini", "cold_start")


def _turn(n: int) -> list:
    history = [user("q")]
    for i in range(1, n):
        history += [REPLY, user(f"q{i}")]
    return [system(f"Current time: 09:0{n}. " + BIG), *history]


def test_the_turn_after_a_rate_limited_one_is_compared_with_the_last_processed_turn(
    tmp_path: Path,
) -> None:
    lines = [
        chat(at(0), "s1", _turn(1), session="sess"),
        chat(at(30), "s2", _turn(2), session="sess"),
        refused(at(60), "s3", {"model": "gpt-4.1-2025-04-14", "messages": _turn(3)},
                session="sess"),
        chat(at(65), "s4", _turn(3), session="sess"),
    ]  # fmt: skip
    got = turns(warehouse(tmp_path, lines))
    assert got["s4"]["parent_request_id"] == "s2"
    # compared with s2 (known counts), the timestamp's loss is known, not NULL
    assert got["s4"]["cause"] == "system_changed"
    assert got["s4"]["tokens_lost"] is not None


def test_without_sessions_a_refused_parent_gives_way_to_the_processed_turn_before_it(
    tmp_path: Path,
) -> None:
    lines = [
        chat(at(0), "c1", _turn(1)),
        refused(at(30), "c2", {"model": "gpt-4.1-2025-04-14", "messages": _turn(2)}),
        chat(at(60), "c3", _turn(3)),
    ]
    got = turns(warehouse(tmp_path, lines))
    assert (got["c3"]["conversation_id"], got["c3"]["parent_request_id"]) == ("c1", "c1")
    assert got["c3"]["cause"] == "system_changed"
    assert got["c3"]["tokens_lost"] is not None


def test_a_stream_cut_after_it_began_stays_the_parent_as_it_wrote_the_cache(
    tmp_path: Path,
) -> None:
    # the tool order changes on a turn whose stream is then cut: that turn wrote the new order,
    # so the next turn, with the same new order, lost nothing
    before, after = [tool("a"), tool("b")], [tool("b"), tool("a")]
    lines = [
        chat(at(0), "t1", _turn(1), tools=before, session="s"),
        cut_stream(at(30), "t2", _turn(2), tools=after, session="s"),
        chat(at(60), "t3", _turn(2), tools=after, session="s",
             read=openai_read(tokens(*after, *_turn(2)))),
    ]  # fmt: skip
    got = turns(warehouse(tmp_path, lines))
    assert got["t2"]["cause"] == "tools_changed"
    assert (got["t3"]["parent_request_id"], got["t3"]["cause"]) == ("t2", None)
