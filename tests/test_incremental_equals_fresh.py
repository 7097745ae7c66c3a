"""A warehouse kept up to date by ingests, a rewritten file (forget, ingest again), a file
forgotten and builds after each holds the same stored views and the same report rows as a fresh
warehouse that ingested only the final files once and built once. The traffic crosses midnight
UTC and an ISO week boundary (Sunday 2026-11-22 to Monday 2026-11-23), with a request at exactly
00:00:00.000000, conversations continued by a later file on days already built, an Anthropic 1h
entry written on the Sunday read on the Monday, and an OpenAI conversation whose turns each reuse
the day before's (docs/ingest.md, "Taking files out"; pipeline/prefix_days.py)."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest
from test_prefix_support import BIG, REPLY, anthropic, chat, refused, system, user

from pipeline import derived, materialise, prefix_days, sql
from pipeline.forget import forget
from pipeline.ingest import ingest
from pipeline.period import Period
from pipeline.reports.data import fetch_weeks
from pipeline.reports.data import materialise as materialise_report
from pipeline.reports.sections import weekly_views
from pipeline.reports.weeks import IsoWeek
from pipeline.warehouse import Warehouse

SUNDAY = datetime(2026, 11, 22, 23, 40, tzinfo=UTC)
MIDNIGHT = datetime(2026, 11, 23, tzinfo=UTC)  # Monday, ISO week 48
WEEKS = (IsoWeek.of(date(2026, 11, 20)), IsoWeek.of(date(2026, 11, 24)))


def _openai(n: int, first: datetime, tag: str, step: timedelta = timedelta(hours=9)) -> list:
    """Turns of one OpenAI conversation `step` apart, the history growing."""
    s = system(f"{tag}. " + BIG)
    out, history = [], [user(f"{tag} question 0")]
    for i in range(n):
        when = first + step * i
        out.append((when, chat(when, f"{tag}-{i}", [s, *history], read=0 if i == 0 else 2048)))
        history = [*history, REPLY, user(f"{tag} question {i + 1}")]
    return out


def _claude(first: datetime, tag: str, times: list[timedelta]) -> list:
    """Turns of one Anthropic conversation with a 1h breakpoint on its system prompt."""
    blocks = [{"type": "text", "text": f"{tag}. " + BIG,
               "cache_control": {"type": "ephemeral", "ttl": "1h"}}]  # fmt: skip
    out, history = [], [user(f"{tag} opening")]
    for i, gap in enumerate(times):
        when = first + gap
        write, read = (2070, 0) if i == 0 else (0, 2070)
        out.append((when, anthropic(when, f"{tag}-{i}", blocks, list(history),
                                    uncached=12 + 4 * i, write=write, read=read)))  # fmt: skip
        history = [*history, REPLY, user(f"{tag} turn {i + 1}")]
    return out


def _files() -> dict[str, list[tuple[datetime, bytes]]]:
    # the turns of each conversation split between the files
    o = _openai(4, SUNDAY, "ops")  # 23:40 Sun, 08:40 Mon, 17:40 Mon, 02:40 Tue
    c = _claude(
        SUNDAY,
        "claude",
        [timedelta(0), timedelta(minutes=19), timedelta(minutes=20), timedelta(minutes=75)],
    )
    assert c[2][0] == MIDNIGHT  # 23:40 + 20 minutes: exactly 00:00:00.000000 on the Monday
    # 23:55 Thu, 19:55 Fri, 15:55 Sat, 11:55 Sun: each day's turn reuses the day before's
    late = _openai(4, MIDNIGHT - timedelta(days=3, minutes=5), "late", timedelta(hours=20))
    retry = refused(MIDNIGHT + timedelta(minutes=1), "ops-refused",
                    {"model": "gpt-4.1", "messages": [user("ops question 0")]})  # fmt: skip
    return {
        "a": [o[0], c[0], late[0], late[2]],
        "a2": [o[0], c[0], c[1], late[0], late[2]],  # a rewritten: one record more
        # forgetting b changes Friday: Saturday's turn, stored from a, reused Friday's
        "b": [late[1], (MIDNIGHT + timedelta(minutes=1), retry)],
        "c": [o[1], o[2], o[3], c[2], c[3], late[3]],
    }


def _write(tmp: Path, lines: list[tuple[datetime, bytes]], name: str) -> Path:
    path = tmp / f"{name}.jsonl"
    path.write_bytes(b"".join(line for _, line in sorted(lines, key=lambda x: x[0])))
    return path


def _stored(wh: Warehouse, view: str) -> list[Any]:
    rel = duckdb.sql(
        "SELECT * FROM read_parquet($p) ORDER BY request_id",
        params={"p": str(derived.derived_path(wh, view) / "**" / "*.parquet")},
    )
    return rel.fetchall()


def _report_rows(wh: Warehouse) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for week in WEEKS:
        con = sql.connect(wh, period=Period(week.monday, week.sunday))
        try:
            wanted = weekly_views()
            materialise_report(con, set(wanted.values()))
            for view in wanted:
                rows = fetch_weeks(con, view, [week]).get(week, [])
                out[f"{week.label} {view}"] = json.dumps(rows, sort_keys=True, default=str)
        finally:
            con.close()
    con = sql.connect(wh)
    try:
        for view in ("conversations", "expected_cache", "findings", "headline"):
            out[view] = con.sql(f"SELECT * FROM {view} ORDER BY ALL").fetchall()
    finally:
        con.close()
    return out


def test_ingests_a_rewrite_and_a_forget_built_day_by_day_equal_one_fresh_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # day by day whatever share of the requests an ingest touches: the path under test
    monkeypatch.setattr(prefix_days, "FULL_SHARE", 1.0)
    files = _files()
    caps = tmp_path / "capture"
    caps.mkdir()
    a = _write(caps, files["a"], "a")
    b = _write(caps, files["b"], "b")
    c = _write(caps, files["c"], "c")
    wh = Warehouse(tmp_path / "incremental")
    ingest([a, b], wh, workers=1)
    materialise.build(wh)
    forget(wh, [a])  # a rewritten: forget it, ingest it again
    _write(caps, files["a2"], "a")
    ingest([a], wh, workers=1)
    materialise.build(wh)
    forget(wh, [b])
    materialise.build(wh)
    said: list[str] = []
    ingest([c], wh, workers=1)  # lands on the days built, continuing a's conversations
    materialise.build(wh, progress=said.append)
    assert any(line.startswith("request_prefix: computing") for line in said)

    fresh = Warehouse(tmp_path / "fresh")
    ingest([a, c], fresh, workers=1)
    materialise.build(fresh)

    for view in derived.MATERIALISED:
        assert _stored(wh, view) == _stored(fresh, view), view
    assert _report_rows(wh) == _report_rows(fresh)
