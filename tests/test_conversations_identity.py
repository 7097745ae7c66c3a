"""Where a segment sits in the rendered prompt is part of what it is: a system instruction and a
user message with the same bytes are different prompts (the provider renders them under
different headings), so a request opening with one shares no prefix with a request opening with
the other, and neither is linked to the other as its parent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_prefix_support import BIG, KEY, _record, at, tokens, turns, warehouse

from pipeline import ingest as ingest_module
from pipeline import sql
from pipeline.ingest import ingest
from pipeline.normalise import hash_chain
from pipeline.warehouse import Warehouse

GEMINI = "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent"
RESPONSES = "https://api.openai.com/v1/responses"


def _gemini(seconds: float, rid: str, body: dict[str, Any]) -> bytes:
    total = tokens(*body.get("systemInstruction", {}).get("parts", []), *body["contents"])
    answer = {
        "candidates": [
            {"content": {"role": "model", "parts": [{"text": "ok"}]}, "finishReason": "STOP"}
        ],
        "usageMetadata": {
            "promptTokenCount": total,
            "candidatesTokenCount": 5,
            "totalTokenCount": total + 5,
        },
        "modelVersion": "gemini-2.5-flash",
    }
    return _record(at(seconds), rid, GEMINI, body, answer, header=("x-goog-api-key", KEY))


def _responses(seconds: float, rid: str, body: dict[str, Any]) -> bytes:
    total = tokens(body.get("instructions"), body["input"])
    answer = {
        "id": rid,
        "object": "response",
        "status": "completed",
        "model": "gpt-4.1-2025-04-14",
        "output": [
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "ok"}],
            }
        ],
        "usage": {
            "input_tokens": total,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 5,
            "total_tokens": total + 5,
        },
    }
    body = {"model": "gpt-4.1-2025-04-14", **body}
    return _record(at(seconds), rid, RESPONSES, body, answer)


def test_a_gemini_system_instruction_and_a_user_message_with_its_text_are_not_one_prompt(
    tmp_path: Path,
) -> None:
    # The google-genai SDK sends the system instruction as {"role": "user", "parts": [...]}:
    # byte for byte what a user message with the same text is.
    text = {"role": "user", "parts": [{"text": BIG}]}
    with_system = {
        "systemInstruction": text,
        "contents": [{"role": "user", "parts": [{"text": "Summarise the logs."}]}],
    }
    with_message = {"contents": [text]}
    got = turns(
        warehouse(tmp_path, [_gemini(0, "sys", with_system), _gemini(120, "msg", with_message)])
    )
    assert {k: (v["conversation_id"], v["turn"], v["parent_request_id"], v["link_method"])
            for k, v in got.items()} == {
        "sys": ("sys", 1, None, "new"),
        "msg": ("msg", 1, None, "new"),
    }  # fmt: skip
    # a cold start each: no history rewritten, no tokens lost to a prefix that was never there
    assert (got["msg"]["cause"], got["msg"]["tokens_lost"]) == ("cold_start", 0)
    assert got["msg"]["expected_read_tokens"] == 0


def test_openai_instructions_and_an_input_with_the_same_text_are_not_one_prompt(
    tmp_path: Path,
) -> None:
    # Responses: `instructions` and a plain-string `input` are both the JSON string alone.
    lines = [
        _responses(0, "ins", {"instructions": BIG, "input": "Summarise the logs."}),
        _responses(60, "inp", {"input": BIG}),
    ]
    got = turns(warehouse(tmp_path, lines))
    assert (got["inp"]["conversation_id"], got["inp"]["parent_request_id"]) == ("inp", None)
    assert (got["inp"]["link_method"], got["inp"]["cause"]) == ("new", "cold_start")
    assert got["inp"]["expected_read_tokens"] == 0


def test_the_same_bytes_as_another_kind_or_role_hash_apart_and_as_the_same_hash_alike() -> None:
    data = [b'{"role":"user","parts":[{"text":"x"}]}']
    system, _ = hash_chain(["system"], ["system"], data)
    message, _ = hash_chain(["message"], ["user"], data)
    other_role, _ = hash_chain(["message"], ["model"], data)
    again, _ = hash_chain(["message"], ["user"], data)
    assert len({system[0], message[0], other_role[0]}) == 3
    assert message == again


def test_a_source_hashed_by_an_older_rule_is_read_again_by_its_next_ingest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    capture = tmp_path / "capture.jsonl"
    capture.write_bytes(_responses(0, "one", {"input": BIG}))
    wh = Warehouse(tmp_path / "wh")
    monkeypatch.setattr(ingest_module, "SEGMENT_HASHING", 1)
    ingest([capture], wh, workers=1)
    monkeypatch.undo()
    again = ingest([capture], wh, workers=1)
    assert [f.status for f in again.files] == ["ingested"]
    assert "ingested by an older version; reading it again" in capsys.readouterr().err
    con = sql.connect(wh, only=["sources", "segments"])
    assert con.execute("SELECT segment_hashing FROM sources").fetchall() == [(2,)]
    assert con.execute("SELECT count(*) FROM segments").fetchone() == (1,)
    # and once hashed by the current rule, the same file is left alone
    assert [f.status for f in ingest([capture], wh, workers=1).files] == ["unchanged"]
