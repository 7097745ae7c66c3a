"""The calendar at its edges, as a weekly report user meets it: ISO 2026 has 53 weeks (W53 runs
Mon 2026-12-28 to Sun 2027-01-03), a leap second is a valid RFC 3339 time, a start at an end of
the calendar is a reject and not a crash later, `--until 9999-12-31` means "everything", and
`report weekly --all` redoes a week whose stored conversations a build changed."""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from test_ingest_support import capture_record, chat_line, chat_usage, har_entry, table

from pipeline import materialise
from pipeline.capture_format import RecordError, parse_record
from pipeline.commands.findings import period_bound
from pipeline.errors import UsageError
from pipeline.ingest import ingest
from pipeline.records import Exchange
from pipeline.reports.weekly import WeekSelection, generate_weekly
from pipeline.reports.weeks import IsoWeek
from pipeline.sources.har import read_entry
from pipeline.sources.vcr import started_at_of
from pipeline.summary import grouped
from pipeline.warehouse import Warehouse

NOW = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)  # "today": W53 is three weeks away
SYSTEM = "Follow the runbook exactly. " * 220  # about 1500 tokens
MODEL = "gpt-4.1-2025-04-14"


def _line(started_at: str, rid: str, session: str, turns: int, usage: dict[str, Any]) -> bytes:
    """A chat completion of `turns` user turns, its start written exactly as `started_at`."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": f"Desk {session}. {SYSTEM}"},
        {"role": "user", "content": "Q0"},
    ]
    for i in range(1, turns):
        messages.append({"role": "assistant", "content": "Done."})
        messages.append({"role": "user", "content": f"Q{i}"})
    body = {"model": MODEL, "messages": messages}
    record = orjson.loads(chat_line(NOW, rid, body, usage, session_id=session))
    record["started_at"] = started_at
    return orjson.dumps(record) + b"\n"


def _ingest(wh: Path, name: str, lines: list[bytes]) -> Warehouse:
    path = wh.parent / name
    path.write_bytes(b"".join(lines))
    warehouse = Warehouse(wh)
    ingest([path], warehouse, workers=1)
    return warehouse


# -- leap seconds ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "2016-12-31T23:59:60Z",
        "2016-12-31T23:59:60.25Z",
        "2016-12-31T18:59:60-05:00",  # the same second in New York
        "2017-01-01T05:29:60+05:30",  # and in Kolkata, already the next local day
    ],
)
def test_a_leap_second_lands_on_the_last_microsecond_of_its_utc_day(value: str) -> None:
    record = capture_record(1)
    record["started_at"] = value
    started = parse_record(record, "c.jsonl", 1).started_at
    assert started == datetime(2016, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)
    entry = har_entry(1)
    entry["startedDateTime"] = value
    exchange = read_entry(entry, "x.har", 0)
    assert isinstance(exchange, Exchange) and exchange.started_at == started


@pytest.mark.parametrize("value", ["2016-12-31T10:15:60Z", "2016-12-31T23:59:61Z"])
def test_a_second_60_outside_the_last_minute_of_a_utc_day_is_still_no_timestamp(
    value: str,
) -> None:
    record = capture_record(1)
    record["started_at"] = value
    with pytest.raises(RecordError, match=r"^started_at is not a timestamp"):
        parse_record(record, "c.jsonl", 1)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        # RFC 5322: -0000 is UTC with the sender's own zone unknown (Python reads it zoneless)
        ("Mon, 07 Dec 2026 10:00:00 -0000", datetime(2026, 12, 7, 10, tzinfo=UTC)),
        ("Sat, 31 Dec 2016 23:59:60 GMT", datetime(2016, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)),
        (
            "Sun, 01 Jan 2017 00:59:60 +0100",
            datetime(2016, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
        ),
        ("Mon, 07 Dec 2026 10:00:00", None),  # no zone at all: not trusted
        ("Sat, 31 Dec 2016 12:59:60 GMT", None),  # second 60 mid-day is no leap second
    ],
)
def test_a_cassette_date_header_in_utc_of_unknown_local_zone_or_on_a_leap_second_is_read(
    header: str, expected: datetime | None
) -> None:
    assert started_at_of([("Date", header)]) == expected


# -- starts at the ends of the calendar ---------------------------------------------------------


def test_a_start_before_2000_or_after_2099_is_a_reject_and_every_report_still_runs(
    tmp_path: Path,
) -> None:
    usage = chat_usage(1553, 0)
    starts = {
        "y0001": "0001-01-01T00:00:00Z",
        "y1969": "1969-12-31T23:59:59Z",
        "y1999": "1999-12-31T23:59:59.999999Z",
        "y2100": "2100-01-01T00:00:00Z",
        "y9999": "9999-12-31T23:59:59Z",
        "first": "2000-01-01T00:00:00Z",  # a Saturday: ISO week 1999-W52
        "nye": "2026-12-31T23:59:59.999999Z",
        "last": "2099-12-31T23:59:59.999999Z",  # a Thursday: ISO week 2099-W53
    }
    lines = [_line(at, rid, rid, 1, usage) for rid, at in starts.items()]
    wh = _ingest(tmp_path / "wh", "edges.jsonl", lines)

    rejects = {r["source_index"]: r["reason"] for r in table(wh.root, "rejects")}
    assert sorted(rejects) == [1, 2, 3, 4, 5]
    assert rejects[5] == (
        "start time 9999-12-31T23:59:59+00:00 is not a time a request was sent (before 2000 or"
        " after 2099: a placeholder, a broken clock or a unit mistake)"
    )
    days = sorted(r["day"] for r in table(wh.root, "requests"))
    assert days == [date(2000, 1, 1), date(2026, 12, 31), date(2099, 12, 31)]

    out = tmp_path / "out"
    result = generate_weekly(wh, out, WeekSelection(all_weeks=True), now=NOW)
    assert [p.name for p in result.written] == [
        "1999-W52.html",
        "2026-W53.html",
        "2099-W53.html",
    ]
    page = (out / "2026-W53.html").read_text(encoding="utf-8")
    assert "Mon 28 Dec 2026 to Sun 03 Jan 2027 (UTC) · 1 request<" in page


# -- "everything": --since 0001-01-01, --until 9999-12-31 ---------------------------------------


@pytest.fixture(scope="module")
def year_end(tmp_path_factory: pytest.TempPathFactory) -> Warehouse:
    """One conversation over the ISO year's end: Sunday 2026-12-27 23:59 (W52), Monday
    2026-12-28 00:01 (W53, reading the 1,536-token prefix), and New Year's Eve 23:59:59.999999
    against New Year 00:00:00 written in Kolkata (05:30+05:30) and in California
    (2026-12-31 16:00-08:00). Built, so that a period read takes the stored views of its days."""
    base = tmp_path_factory.mktemp("year_end")
    lines = [
        _line("2026-12-27T23:59:00Z", "sun", "wk", 1, chat_usage(1553, 0)),
        _line("2026-12-28T00:01:00Z", "mon", "wk", 2, chat_usage(1567, 1536)),
        _line("2026-12-31T23:59:59.999999Z", "nye", "ny", 1, chat_usage(1553, 0)),
        _line("2027-01-01T05:30:00+05:30", "ny-ist", "ist", 1, chat_usage(1553, 0)),
        _line("2026-12-31T16:00:00-08:00", "ny-pst", "pst", 1, chat_usage(1553, 0)),
    ]
    wh = _ingest(base / "wh", "year_end.jsonl", lines)
    materialise.build(wh)
    return wh


def _by_day(wh: Warehouse, since: date | None, until: date | None) -> dict[str, int]:
    _con, rel = grouped(wh, "day", since, until)
    return {str(r[0]): r[1] for r in rel.select("group", "requests").fetchall()}


@pytest.mark.parametrize(
    ("since", "until"),
    [
        (date(1, 1, 1), date(9999, 12, 31)),
        (date(1, 1, 1), None),
        (None, date(9999, 12, 31)),
    ],
)
def test_summary_by_day_from_the_first_to_the_last_day_of_the_calendar_reads_everything(
    year_end: Warehouse, since: date | None, until: date | None
) -> None:
    # each request on its own UTC day, whatever offset it was written with
    everything = {"2026-12-27": 1, "2026-12-28": 1, "2026-12-31": 1, "2027-01-01": 2}
    assert _by_day(year_end, since, until) == everything


def test_summary_by_day_of_new_years_eve_and_day_splits_at_utc_midnight(
    year_end: Warehouse,
) -> None:
    assert _by_day(year_end, date(2026, 12, 31), date(2026, 12, 31)) == {"2026-12-31": 1}
    assert _by_day(year_end, date(2027, 1, 1), date(2027, 1, 1)) == {"2027-01-01": 2}
    assert _by_day(year_end, date(9999, 12, 31), None) == {}
    assert _by_day(year_end, None, date(1, 1, 1)) == {}


def test_findings_bounds_read_a_day_whole_in_either_iso_form_and_the_last_day_as_no_end() -> None:
    new_year = datetime(2027, 1, 1, tzinfo=UTC)
    assert period_bound("2026-12-31", "--until") == new_year
    assert period_bound("20261231", "--until") == new_year  # was midnight before the day
    assert period_bound("20270101", "--since") == new_year
    assert period_bound("2027-01-01T05:30:00+05:30", "--since") == new_year
    assert period_bound("9999-12-31", "--until") is None
    with pytest.raises(UsageError, match="is out of range"):
        period_bound("0001-01-01T00:00:00+05:00", "--since")


# -- ISO weeks ----------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["2026-W53", "2026W53", "2026-w53", "2026w53"])
def test_week_53_of_2026_is_read_in_iso_8601s_extended_and_basic_forms(text: str) -> None:
    week = IsoWeek.parse(text)
    assert (week.monday, week.sunday, week.label) == (
        date(2026, 12, 28),
        date(2027, 1, 3),
        "2026-W53",
    )


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        ("2026-W54", "2026 has weeks W01 to W53"),
        ("2025-W53", "2025 has weeks W01 to W52"),
        ("2027-W00", "2027 has weeks W01 to W52"),
    ],
)
def test_a_week_the_year_does_not_have_says_how_many_weeks_it_has(text: str, hint: str) -> None:
    with pytest.raises(UsageError) as caught:
        IsoWeek.parse(text)
    assert caught.value.message == f"{text!r} is not a week of {text[:4]}"
    assert caught.value.hint == hint


def test_a_misspelt_week_is_the_first_thing_report_weekly_says(cli, tmp_path: Path) -> None:
    # it came after a note about unbuilt views, as if the views were the problem
    wh = tmp_path / "wh"
    _ingest(wh, "a.jsonl", [_line("2026-12-28T10:00:00Z", "r1", "s1", 1, chat_usage(1500, 0))])
    done = cli("report", "weekly", "--week", "2026-W54", "-w", str(wh), "-o", str(tmp_path))
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "error: '2026-W54' is not a week of 2026",
        "hint: 2026 has weeks W01 to W53",
    ]


def test_a_week_label_writes_its_year_with_four_digits() -> None:
    assert IsoWeek(date(1, 1, 1)).label == "0001-W01"


# -- report weekly --all after a build ----------------------------------------------------------


def test_report_all_redoes_a_week_whose_stored_conversations_a_build_changed(
    tmp_path: Path,
) -> None:
    # W53's conversation "sys" changes its system prompt on Monday 00:01 after Sunday 23:59.
    def sys_line(at: str, rid: str, stamp: str) -> bytes:
        body = {
            "model": MODEL,
            "messages": [
                {"role": "system", "content": f"Desk. Now {stamp}. {SYSTEM}"},
                {"role": "user", "content": "Q0"},
            ],
        }
        record = orjson.loads(chat_line(NOW, rid, body, chat_usage(1553, 0), session_id="sys"))
        record["started_at"] = at
        return orjson.dumps(record) + b"\n"

    wh = _ingest(
        tmp_path / "wh",
        "w53.jsonl",
        [
            sys_line("2026-12-27T23:59:00Z", "sun", "2026-12-27 23:59"),
            sys_line("2026-12-28T00:01:00Z", "mon", "2026-12-28 00:01"),
        ],
    )
    materialise.build(wh)
    out = tmp_path / "out"
    first = generate_weekly(wh, out, WeekSelection(all_weeks=True), now=NOW)
    assert out / "2026-W53.html" in first.written
    # An older turn of the same conversation, 13 days before W53 (before the week the page's
    # own files cover): after a build the Sunday turn is turn 2, not the conversation's start.
    path = tmp_path / "older.jsonl"
    path.write_bytes(sys_line("2026-12-15T10:00:00Z", "older", "2026-12-15 10:00"))
    ingest([path], wh, workers=1)
    materialise.build(wh)

    again = generate_weekly(wh, out, WeekSelection(all_weeks=True), now=NOW)
    assert out / "2026-W53.html" in again.written
    fresh = tmp_path / "fresh"
    generate_weekly(wh, fresh, WeekSelection(week="2026-W53"), now=NOW)
    written = (out / "2026-W53.html").read_text(encoding="utf-8")
    assert written == (fresh / "2026-W53.html").read_text(encoding="utf-8")


# -- prices at a change -------------------------------------------------------------------------

PRICE_HEADER = (
    "provider,model,effective_from,effective_to,currency,condition,input_cache_miss_per_mtok,"
    "input_cache_hit_per_mtok,cache_write_5m_per_mtok,cache_write_1h_per_mtok,output_per_mtok,"
    "notes,source"
)


def test_prices_show_prints_the_instant_and_a_rows_start_to_the_microsecond(
    cli, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    table = tmp_path / "acme.csv"
    table.write_text(f"{PRICE_HEADER}\nacme,acme-1,2027-01-01T00:00:30Z,,USD,,1,,,,1,,me\n")
    at = cli("prices", "show", "acme-1", "--at", "2027-01-01T00:00:30Z", "--prices", str(table))
    assert at.returncode == 0, at.stderr
    assert at.stdout.splitlines()[0] == "acme/acme-1 at 2027-01-01T00:00:30Z"
    assert " 2027-01-01T00:00:30Z " in at.stdout  # the row's start, not 00:00Z
    before = "2027-01-01T00:00:29.999999Z"
    shown = cli("prices", "show", "acme-1", "--at", before, "--prices", str(table))
    assert shown.returncode != 0
    assert f"no price row in force for 'acme-1' at {before}" in shown.stderr


def test_a_request_a_microsecond_before_a_users_price_change_pays_the_old_price(
    tmp_path: Path,
) -> None:
    table = tmp_path / "prices.csv"
    table.write_text(
        f"{PRICE_HEADER}\n"
        f"openai,{MODEL},,2027-01-01T00:00Z,USD,,1.00,0.10,,,1.00,old,me\n"
        f"openai,{MODEL},2027-01-01,,USD,,2.00,0.20,,,2.00,new,me\n"
    )
    usage = chat_usage(1_000_000, 0)  # a million uncached tokens in, 3 out
    wh = _ingest(
        tmp_path / "wh",
        "change.jsonl",
        [
            _line("2026-12-31T23:59:59.999999Z", "before", "a", 1, usage),
            _line("2027-01-01T05:29:59.9999999+05:30", "before-ist", "b", 1, usage),
            _line("2027-01-01T00:00:00Z", "at", "c", 1, usage),
            _line("2026-12-31T16:00:00-08:00", "at-pst", "d", 1, usage),
        ],
    )
    from pipeline import sql

    con = sql.connect(wh, options=sql.SqlOptions(prices_paths=(table,)))
    rows = con.sql("SELECT request_id, cost_total, price_row FROM request_costs").fetchall()
    costs = {rid: (round(cost, 6), row.rsplit(":", 1)[1]) for rid, cost, row in rows}
    # old: 1 USD per million in and out; new: 2 USD
    assert costs == {
        "before": (1.000003, "2"),
        "before-ist": (1.000003, "2"),
        "at": (2.000006, "3"),
        "at-pst": (2.000006, "3"),
    }
