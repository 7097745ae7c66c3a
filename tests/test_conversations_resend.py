"""The same prompt sent again (a client retrying after a timeout, or sending twice) is a re-send:
link_method `resend`, its parent the request it repeats, and no cache break, whether the
conversation is linked by its history or by a session id. The turn after it continues it."""

from __future__ import annotations

from pathlib import Path

from test_prefix_support import BIG, REPLY, at, chat, openai_read, system, tokens, turns, user
from test_prefix_support import warehouse as make_warehouse

from pipeline import sql

SYSTEM = system("You are the support agent. " + BIG)
M1 = [SYSTEM, user("My order is late.")]
M2 = [*M1, REPLY, user("It is order 1234.")]
M3 = [*M2, REPLY, user("Thanks.")]


def _conversation(session: str | None, resend_read: int) -> list[bytes]:
    read2 = openai_read(tokens(*M1))
    return [
        chat(at(0), "t1", M1, session=session),
        chat(at(30), "t2", M2, read=read2, session=session),
        # the client timed out waiting and sent turn 2 again
        chat(at(40), "t2-again", M2, read=resend_read, session=session),
        chat(at(70), "t3", M3, read=openai_read(tokens(*M2)), session=session),
    ]


def test_a_turn_sent_twice_is_a_resend_of_it_and_no_break(tmp_path: Path) -> None:
    # Served nothing from the cache: were it compared with turn 1, a provider miss
    wh = make_warehouse(tmp_path, _conversation(None, resend_read=0))
    got = turns(wh)
    assert [
        (r, got[r]["conversation_id"], got[r]["turn"], got[r]["parent_request_id"],
         got[r]["link_method"], got[r]["cause"])
        for r in ("t1", "t2", "t2-again", "t3")
    ] == [
        ("t1", "t1", 1, None, "new", "cold_start"),
        ("t2", "t1", 2, "t1", "history", None),
        ("t2-again", "t1", 3, "t2", "resend", None),
        ("t3", "t1", 4, "t2-again", "history", None),
    ]  # fmt: skip
    con = sql.connect(wh, only=["cache_breaks"])
    breaks = con.execute("SELECT request_id FROM cache_breaks ORDER BY request_id").fetchall()
    assert breaks == [("t1",)]


def test_a_turn_sent_twice_in_a_session_is_a_resend(tmp_path: Path) -> None:
    got = turns(make_warehouse(tmp_path, _conversation("sess-1", resend_read=0)))
    assert (got["t2-again"]["parent_request_id"], got["t2-again"]["link_method"]) == (
        "t2",
        "resend",
    )
    assert got["t2-again"]["cause"] is None
    assert (got["t3"]["link_method"], got["t3"]["cause"]) == ("session_id", None)


def test_the_same_prompt_after_the_lifetime_is_no_resend_but_an_expiry(tmp_path: Path) -> None:
    # OpenAI keeps an entry 10 minutes: an hour later the same prompt could not read it
    lines = [chat(at(0), "first", M1), chat(at(3600), "later", M1)]
    got = turns(make_warehouse(tmp_path, lines))
    assert (got["later"]["parent_request_id"], got["later"]["link_method"]) == ("first", "prefix")
    assert got["later"]["cause"] == "expired"
