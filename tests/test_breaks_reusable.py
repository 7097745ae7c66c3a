"""A break names what lost a reusable prefix, and its loss is what the rules would have served
(docs/providers.md: OpenAI 0 under 1024 tokens, else 1024 + 128-token steps; Anthropic
only up to a cache_control breakpoint):

- under the minimum, or on Anthropic without cache_control, nothing was reusable: a changed
  system prompt or an idle gap is no break;
- above it, the loss is rounded as the provider serves it, the same figure provider_miss uses;
- a fork (the same history with another last message, as parallel requests send) is not a
  rewritten history;
- a rule with no published lifetime (Gemini implicit) keeps an entry until evicted: a miss after
  a long idle gap is a provider_miss, never silently nothing."""

from __future__ import annotations

from pathlib import Path

from test_prefix_support import (
    BIG,
    REPLY,
    anthropic,
    at,
    chat,
    gemini,
    openai_read,
    system,
    tokens,
    turns,
    user,
    warehouse,
)

MID = "Follow the runbook. " * 170  # ~3,400 bytes: ~850 tokens, under OpenAI's 1024


def _dated(stamp: str, text: str, turn: int) -> list[dict[str, str]]:
    history = [user("q")]
    for i in range(turn):
        history += [REPLY, user(f"q{i}")]
    return [system(f"Now: 2026-11-16T{stamp}Z. " + text), *history]


def test_a_system_change_under_the_openai_minimum_is_no_break(tmp_path: Path) -> None:
    lines = [chat(at(30 * i), f"osm-{i}", _dated(f"09:00:{30 * i:02d}", MID, i)) for i in range(3)]
    got = turns(warehouse(tmp_path, lines))
    assert [got[f"osm-{i}"]["cause"] for i in range(3)] == ["cold_start", None, None]


def test_an_idle_gap_under_the_openai_minimum_is_no_expired_break(tmp_path: Path) -> None:
    m1 = [system("Idle. " + MID), user("q idle")]
    lines = [chat(at(0), "oid-1", m1), chat(at(1200), "oid-2", [*m1, REPLY, user("q2")])]
    assert turns(warehouse(tmp_path, lines))["oid-2"]["cause"] is None


def test_a_system_change_on_anthropic_without_cache_control_is_no_break(tmp_path: Path) -> None:
    lines = []
    for i in range(2):
        blocks = f"Now: 2026-11-16T10:00:{30 * i:02d}Z. " + BIG
        messages = [user("q nocc")] + ([REPLY, user("q2")] if i else [])
        lines.append(anthropic(at(30 * i), f"anc-{i}", blocks, messages,
                               uncached=tokens(blocks, *messages)))  # fmt: skip
    assert turns(warehouse(tmp_path, lines))["anc-1"]["cause"] is None


def test_a_loss_is_rounded_as_the_rule_serves_it_like_a_provider_miss(tmp_path: Path) -> None:
    lines = [
        chat(at(0), "ts-1", _dated("09:00:00", BIG, 0)),
        chat(at(30), "ts-2", _dated("09:00:30", BIG, 1)),
        chat(at(3600), "idle-1", [system(BIG), user("idle")]),
        chat(at(3600 + 1200), "idle-2", [system(BIG), user("idle"), REPLY, user("q2")]),
    ]
    got = turns(warehouse(tmp_path, lines))
    parent = tokens(*_dated("09:00:00", BIG, 0))
    assert (got["ts-2"]["cause"], got["ts-2"]["tokens_lost"]) == (
        "system_changed",
        openai_read(parent),
    )
    idle = tokens(system(BIG), user("idle"))
    assert (got["idle-2"]["cause"], got["idle-2"]["tokens_lost"]) == ("expired", openai_read(idle))
    assert openai_read(parent) < parent  # the 128-token step, not the whole prompt


SHARED = [system("Fan. " + BIG), user("The document: " + "text " * 400), REPLY]


def test_parallel_questions_on_one_history_are_one_conversation_and_no_rewrite(
    tmp_path: Path,
) -> None:
    lines = [
        chat(at(i * 0.05), f"fan-{i}", [*SHARED, user(f"question {i}")], first_byte_ms=600.0)
        for i in range(4)
    ]
    read = openai_read(tokens(*SHARED))
    lines.append(chat(at(60), "fan-4", [*SHARED, user("question 4")], read=read))
    got = turns(warehouse(tmp_path, lines))
    assert [got[f"fan-{i}"]["conversation_id"] for i in range(5)] == ["fan-0"] * 5
    assert [got[f"fan-{i}"]["turn"] for i in range(5)] == [1, 2, 3, 4, 5]
    assert [got[f"fan-{i}"]["expected_read_tokens"] for i in range(1, 4)] == [0, 0, 0]
    assert [got[f"fan-{i}"]["cause"] for i in range(5)] == ["cold_start"] + [None] * 4


def _contents(turn: int) -> list[dict]:
    out = [{"role": "user", "parts": [{"text": "q gidle"}]}]
    for i in range(turn):
        out += [{"role": "model", "parts": [{"text": "ok"}]},
                {"role": "user", "parts": [{"text": f"q{i}"}]}]  # fmt: skip
    return out


def test_a_gemini_miss_after_a_long_idle_gap_is_a_provider_miss(tmp_path: Path) -> None:
    text = "Gemini idle. " + BIG
    lines = [
        gemini(at(0), "g1", text, _contents(0)),
        gemini(at(30), "g2", text, _contents(1), read=tokens({"parts": [{"text": text}]})),
        gemini(at(30 + 7200), "g3", text, _contents(2), read=0),
    ]
    got = turns(warehouse(tmp_path, lines))["g3"]
    assert got["expected_read_tokens"] > 2000
    assert (got["cause"], got["tokens_lost"]) == ("provider_miss", got["expected_read_tokens"])
