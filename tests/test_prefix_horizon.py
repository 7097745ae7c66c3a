"""The horizon (docs/providers.md, "The horizon"): a request is compared only with the requests
of its scope that arrived within the longest lifetime or lookback of any cache rule before it
(three days with the shipped rules). So a day's rows of request_prefix are the same computed
from that day and the horizon before it as from the whole history."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from test_prefix_support import (
    BIG,
    DEEPSEEK,
    REPLY,
    at,
    deepseek,
    gemini,
    refused,
    system,
    user,
    warehouse,
)

from pipeline import sql
from pipeline.period import Period
from pipeline.warehouse import Warehouse

DAY = 86_400
HORIZON = 3 * DAY  # DeepSeek's lookback, the longest of the shipped rules

PREFIX_COLUMNS = "request_id, live_bytes, unit_bytes, shared_bytes, reuse_request_id"


def _prefix(wh: Warehouse, con: Any = None) -> dict[str, dict[str, Any]]:
    con = con or sql.connect(wh, only=["request_prefix"], use_derived=False)
    rel = con.sql(f"SELECT {PREFIX_COLUMNS} FROM request_prefix")
    return {r[0]: dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()}


def _bytes_through(wh: Warehouse, request_id: str, last_position: int) -> int:
    """The bytes of a request's segments up to `last_position`, from the segments table."""
    con = sql.connect(wh, only=[])
    ((total,),) = con.execute(
        "SELECT sum(bytes) FROM raw_segments WHERE request_id = $r AND position <= $p",
        {"r": request_id, "p": last_position},
    ).fetchall()
    return int(total)


def test_an_entry_with_no_published_lifetime_is_gone_after_the_horizon(tmp_path: Path) -> None:
    text = "Gemini horizon. " + BIG
    contents = [{"role": "user", "parts": [{"text": "q"}]}]
    wh = warehouse(
        tmp_path,
        [
            gemini(at(0), "g1", text, contents),
            # two days idle: Gemini publishes no lifetime, so the entry is still there
            gemini(at(2 * DAY), "g2", text, contents),
            # four days idle: past the horizon
            gemini(at(6 * DAY), "g3", text, contents),
        ],
    )
    got = _prefix(wh)
    assert got["g2"]["live_bytes"] > 0
    assert got["g3"]["live_bytes"] == 0


def _unit_traffic(gap_s: int) -> list[bytes]:
    """d1 ends at the user question; `gap_s` later (past its 6-hour lifetime) d2 arrives cold
    through it and its reply, and an hour after that d3 arrives the same way."""
    m1 = [system("Unit horizon. " + BIG), user("q")]
    return [
        deepseek(at(0), "d1", m1),
        deepseek(at(gap_s), "d2", [*m1, REPLY, user("a")]),
        deepseek(at(gap_s + 3600), "d3", [*m1, REPLY, user("b")]),
    ]


def test_a_deepseek_unit_counts_while_the_request_that_ended_there_is_within_the_horizon(
    tmp_path: Path,
) -> None:
    wh = warehouse(tmp_path, _unit_traffic(2 * DAY))
    # d1's whole input and the reply after it: a persisted unit d3 can read
    assert _prefix(wh)["d3"]["unit_bytes"] == _bytes_through(wh, "d3", 2)


def test_a_deepseek_unit_whose_request_ended_past_the_horizon_is_not_found(
    tmp_path: Path,
) -> None:
    wh = warehouse(tmp_path, _unit_traffic(HORIZON + 3600))
    got = _prefix(wh)["d3"]
    # only d2 is within the horizon: no request ended at the question, no two shared it
    assert got["unit_bytes"] is None
    assert got["live_bytes"] == _bytes_through(wh, "d3", 2)


def test_a_refused_request_that_ended_there_does_not_bring_back_an_older_unit(
    tmp_path: Path,
) -> None:
    m1 = [system("Refused unit. " + BIG), user("q")]
    wh = warehouse(
        tmp_path,
        [
            deepseek(at(0), "d1", m1),  # its unit: past the horizon for d4
            refused(
                at(HORIZON + 3600), "r2", {"model": "deepseek-chat", "messages": m1}, url=DEEPSEEK
            ),
            deepseek(at(HORIZON + 5400), "d3", [*m1, REPLY, user("a")]),
            deepseek(at(HORIZON + 7200), "d4", [*m1, REPLY, user("b")]),
        ],
    )
    # the refused r2 ended at the question within the horizon but left no entry: d1's unit
    # is not found through it
    assert _prefix(wh)["d4"]["unit_bytes"] is None


def test_each_day_computed_from_itself_and_the_horizon_before_it_is_the_whole_historys(
    tmp_path: Path,
) -> None:
    lines = _unit_traffic(HORIZON + 3600)
    text = "Gemini days. " + BIG
    contents = [{"role": "user", "parts": [{"text": "q"}]}]
    lines += [gemini(at(hours * 3600), f"g{hours}", text, contents) for hours in range(0, 200, 7)]
    # five days after the last: before the horizon, Gemini's entry never expired
    lines.append(gemini(at(14 * DAY), "g-late", text, contents))
    wh = warehouse(tmp_path, lines)
    whole = _prefix(wh)
    days = sorted({(at(0) + timedelta(seconds=s)).date() for s in range(0, 15 * DAY, DAY)})
    seen: set[str] = set()
    for day in days:
        con = sql.connect(wh, only=["request_prefix"], period=Period(day, day))
        of_day = con.sql(
            f"SELECT {PREFIX_COLUMNS} FROM request_prefix WHERE started_at::DATE = $d",
            params={"d": day},
        )
        for row in of_day.fetchall():
            assert dict(zip(of_day.columns, row, strict=True)) == whole[row[0]], (day, row[0])
            seen.add(row[0])
    assert seen == set(whole)
