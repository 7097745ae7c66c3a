"""Where a changed segment's text was not kept (`ingest --no-content`), cache_breaks knows that
the segment changed but not where in it: the offset is unknown, never byte 0."""

from __future__ import annotations

from pathlib import Path

from test_prefix_support import BIG, at, chat, openai_read, rows, system, tokens, user

from pipeline.ingest import ingest
from pipeline.warehouse import Warehouse

OLD = [system("Today is 2026-11-02. " + BIG), user("q1")]
NEW = [
    system("Today is 2026-11-03. " + BIG),
    user("q1"),
    {"role": "assistant", "content": "ok"},
    user("q2"),
]
BREAKS = "SELECT request_id, cause, change_offset, change_class FROM cache_breaks"


def _warehouse(tmp_path: Path, *, first_without_content: bool) -> Warehouse:
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_bytes(chat(at(0), "one", OLD, session="s"))
    second.write_bytes(chat(at(30), "two", NEW, read=0, session="s"))
    wh = Warehouse(tmp_path / "wh")
    ingest([first], wh, workers=1, keep_content=not first_without_content)
    ingest([second], wh, workers=1)
    return wh


def test_the_offset_of_a_change_is_found_when_both_texts_were_kept(tmp_path: Path) -> None:
    got = rows(_warehouse(tmp_path, first_without_content=False), BREAKS)
    assert got["two"]["cause"] == "system_changed"
    assert got["two"]["change_offset"] == len('{"role":"system","content":"Today is 2026-11-0')


def test_the_offset_is_unknown_when_the_earlier_text_was_not_kept(tmp_path: Path) -> None:
    got = rows(_warehouse(tmp_path, first_without_content=True), BREAKS)
    assert got["two"]["cause"] == "system_changed"
    assert got["two"]["change_offset"] is None
    assert tokens(*OLD) > 1024 and openai_read(tokens(*OLD)) > 0  # the break lost real tokens
