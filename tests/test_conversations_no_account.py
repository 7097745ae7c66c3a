"""Without an account (the key absent, or redacted before capture) the capture cannot show which
requests shared a key, so a cache scope joins only what it shows belongs together: one source
file, one session, and no gap longer than the longest lifetime any cache rule allows (a day,
OpenAI's extended retention). Each case has its control: the same traffic with a key is joined.

DeepSeek V4 rules (lifetime 6 h, lookback 3 days, persisted units): an identical request within
6 h is a retry of the first, and a request sharing a prefix into the history within 3 days
continues its conversation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from test_prefix_support import BIG, DEEPSEEK, KEY, REPLY, _record, at, system, tokens, turns, user

from pipeline import sql
from pipeline.ingest import ingest
from pipeline.redact import REDACTED
from pipeline.warehouse import Warehouse

SYSTEM = system("You are the release agent. " + BIG)
START = user("Start the release.")
HOUR = 3600.0


def _deepseek(
    seconds: float, rid: str, messages: list[dict[str, Any]], keyed: bool, session: str | None
) -> bytes:
    body = {"model": "deepseek-chat", "messages": messages}
    total = tokens(*messages)
    answer = {
        "id": rid,
        "object": "chat.completion",
        "model": "deepseek-chat",
        "choices": [{"index": 0, "message": REPLY, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": total,
            "completion_tokens": 5,
            "total_tokens": total + 5,
            "prompt_cache_hit_tokens": 0,
            "prompt_cache_miss_tokens": total,
        },
    }
    key = KEY if keyed else REDACTED
    return _record(at(seconds), rid, DEEPSEEK, body, answer,
                   header=("authorization", f"Bearer {key}"), session=session)  # fmt: skip


def _run(tag: str, t0: float, keyed: bool, session: str | None = None) -> list[bytes]:
    """One run of the agent: its opening, then a second turn a minute later."""
    return [
        _deepseek(t0, f"{tag}1", [SYSTEM, START], keyed, session),
        _deepseek(t0 + 60, f"{tag}2", [SYSTEM, START, REPLY, user(f"{tag} next")], keyed, session),
    ]


def _warehouse(tmp_path: Path, files: dict[str, list[bytes]]) -> Warehouse:
    tmp_path.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, lines in files.items():
        path = tmp_path / name
        path.write_bytes(b"".join(lines))
        paths.append(path)
    wh = Warehouse(tmp_path / "wh")
    ingest(paths, wh, workers=1)
    return wh


def _scopes(wh: Warehouse) -> dict[str, str]:
    con = sql.connect(wh, only=["request_prefix"])
    return dict(con.execute("SELECT request_id, cache_scope FROM request_prefix").fetchall())


def test_without_an_account_two_capture_files_are_two_scopes(tmp_path: Path) -> None:
    # The same agent run twice, three hours apart, captured in two files.
    files = {"a.jsonl": _run("a", 0, keyed=False), "b.jsonl": _run("b", 3 * HOUR, keyed=False)}
    wh = _warehouse(tmp_path / "nokey", files)
    got = turns(wh)
    assert [(got[r]["conversation_id"], got[r]["parent_request_id"]) for r in ("b1", "b2")] == [
        ("b1", None),
        ("b1", "b1"),
    ]
    assert (got["b1"]["link_method"], got["b1"]["cause"]) == ("new", "cold_start")
    assert got["b1"]["expected_read_tokens"] == 0
    scopes = _scopes(wh)
    assert scopes["a1"] == scopes["a2"] != scopes["b1"] == scopes["b2"]
    assert scopes["a1"].startswith("no account: ")
    # control: with the key, the second run's opening is a retry of the first run's (within
    # DeepSeek's 6 h), in one conversation, and may read its cache
    keyed = {"a.jsonl": _run("a", 0, keyed=True), "b.jsonl": _run("b", 3 * HOUR, keyed=True)}
    control = turns(_warehouse(tmp_path / "key", keyed))
    assert (control["b1"]["conversation_id"], control["b1"]["parent_request_id"]) == ("a1", "a1")
    assert control["b1"]["expected_read_tokens"] > 0


def test_without_an_account_a_gap_longer_than_every_lifetime_starts_a_new_scope(
    tmp_path: Path,
) -> None:
    # One file, the second run 30 hours later: over a day, the longest any rule keeps an entry.
    lines = _run("a", 0, keyed=False) + _run("b", 30 * HOUR, keyed=False)
    got = turns(_warehouse(tmp_path / "nokey", {"capture.jsonl": lines}))
    assert (got["b1"]["conversation_id"], got["b1"]["link_method"]) == ("b1", "new")
    assert got["b1"]["cause"] == "cold_start"
    assert got["b2"]["conversation_id"] == "b1"
    # control: with the key, the second run shares its prefix into the history with the first
    # within DeepSeek's 3-day lookback, and continues its conversation
    keyed = _run("a", 0, keyed=True) + _run("b", 30 * HOUR, keyed=True)
    control = turns(_warehouse(tmp_path / "key", {"capture.jsonl": keyed}))
    assert control["b1"]["conversation_id"] == "a1"


def test_without_an_account_a_gap_within_the_longest_lifetime_stays_one_scope(
    tmp_path: Path,
) -> None:
    # What is assumed: one file, no session, less than a day apart is one caller.
    lines = _run("a", 0, keyed=False) + _run("b", 3 * HOUR, keyed=False)
    wh = _warehouse(tmp_path, {"capture.jsonl": lines})
    scopes = _scopes(wh)
    assert len(set(scopes.values())) == 1
    assert turns(wh)["b1"]["parent_request_id"] == "a1"  # a retry within 6 h


def test_without_an_account_two_sessions_cannot_read_each_others_cache(tmp_path: Path) -> None:
    lines = _run("a", 0, keyed=False, session="s-a") + _run("b", 120, keyed=False, session="s-b")
    got = turns(_warehouse(tmp_path / "nokey", {"capture.jsonl": lines}))
    assert (got["b1"]["conversation_id"], got["b1"]["expected_read_tokens"]) == ("s-b", 0)
    # control: with the key, the second session's opening can read the first's whole input
    keyed = _run("a", 0, keyed=True, session="s-a") + _run("b", 120, keyed=True, session="s-b")
    control = turns(_warehouse(tmp_path / "key", {"capture.jsonl": keyed}))
    assert control["b1"]["expected_read_tokens"] == tokens(SYSTEM, START)


def test_a_redacted_key_is_no_account(tmp_path: Path) -> None:
    wh = _warehouse(tmp_path, {"capture.jsonl": _run("a", 0, keyed=False)})
    con = sql.connect(wh, only=["requests"])
    assert con.execute("SELECT DISTINCT account FROM requests").fetchall() == [(None,)]
    capture = orjson.loads((tmp_path / "capture.jsonl").read_bytes().splitlines()[0])
    assert KEY not in orjson.dumps(capture).decode()
