"""Period reads: a weekly report, `summary --since` and `findings --since` read their own days and
the margin before them (pipeline/period.py), so their cost follows the period, not the history."""

from __future__ import annotations

import os
import shutil
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from pipeline import cache_rules, derived, materialise, sql, sql_catalog
from pipeline.demo import write_demo
from pipeline.errors import WarehouseError
from pipeline.ingest import ingest
from pipeline.period import (
    Period,
    bounded,
    day_of,
    days_with_requests,
    last_day_before,
    margin_days,
    stored_files,
)
from pipeline.reports.sections import weekly_views
from pipeline.reports.weekly import WeekSelection, generate_weekly
from pipeline.reports.weeks import IsoWeek
from pipeline.warehouse import Warehouse

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
W47, W48 = IsoWeek.parse("2026-W47"), IsoWeek.parse("2026-W48")
# report_hygiene is computed over the traffic a page reads (its week and the margin): the one
# weekly view whose rows are the period's by design, not the whole history's
HISTORY_WIDE = {"report_hygiene"}


@pytest.fixture(scope="module")
def demo_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("period")
    write_demo(root / "capture.jsonl", seed=7, sessions=8)
    ingest([root / "capture.jsonl"], Warehouse(root / "wh"), workers=1)
    return root


@pytest.fixture
def wh(demo_root: Path, tmp_path: Path) -> Warehouse:
    """A copy of the demo warehouse (two ISO weeks, 2026-W47 and W48) each test may change."""
    shutil.copytree(demo_root / "wh", tmp_path / "wh")
    return Warehouse(tmp_path / "wh")


def week_rows(con: duckdb.DuckDBPyConnection, view: str, week: IsoWeek) -> list[tuple]:
    rel = con.sql(f'SELECT * FROM "{view}" WHERE week = $w ORDER BY ALL', params={"w": week.monday})
    return rel.fetchall()


def wreck_parts_before(wh: Warehouse, first_kept: date) -> int:
    """Overwrite every request and segment part of the days before `first_kept` with zeros of
    the same size and time (stored-view and page stamps stay the same): reading one fails."""
    wrecked = 0
    for table in ("requests", "segments"):
        for path in (wh.root / table).rglob("*.parquet"):
            day = day_of(path)
            if day is None or day < first_kept:
                stat = path.stat()
                path.write_bytes(b"\0" * stat.st_size)
                os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
                wrecked += 1
    return wrecked


def test_computed_from_the_days_read_a_period_read_gives_the_rows_of_a_whole_read(wh) -> None:
    # request_prefix looks back no further than the horizon, which the margin covers: the
    # expected reads (DeepSeek's units included) are those of the whole history
    whole = sql.connect(wh)
    views = [v for v in weekly_views() if v in sql_catalog.load_queries() and v not in HISTORY_WIDE]
    assert "report_provider_gap" in views and "report_weekly_cost" in views
    for week in (W47, W48):
        period = sql.connect(wh, period=Period(week.monday, week.sunday))
        for view in views:
            assert week_rows(period, view, week) == week_rows(whole, view, week), view


def _tables_and_views(con: duckdb.DuckDBPyConnection) -> tuple[set[str], set[str]]:
    tables = "SELECT table_name FROM duckdb_tables() WHERE temporary"
    views = "SELECT view_name FROM duckdb_views() WHERE NOT internal"
    return (
        {name for (name,) in con.execute(tables).fetchall()} & set(derived.MATERIALISED),
        {name for (name,) in con.execute(views).fetchall()} & set(derived.MATERIALISED),
    )


def test_a_read_without_stored_views_computes_each_heavy_view_once_for_its_session(wh) -> None:
    # as views, every query (and every view under it) would compute them again
    period = sql.connect(wh, only=["cache_breaks"], period=Period(W48.monday, W48.sunday))
    assert _tables_and_views(period) == (set(derived.MATERIALISED), set())
    named = sql.connect(wh, only=["cache_breaks"], use_derived=False)
    assert _tables_and_views(named) == (set(derived.MATERIALISED), set())
    # the build computes request_prefix a group of scopes at a time: views, never tables
    for_build = sql.connect(wh, only=["cache_breaks"], use_derived=False, heavy_once=False)
    assert _tables_and_views(for_build) == (set(), set(derived.MATERIALISED))


def test_a_whole_history_read_prices_every_request_once_for_its_session(wh) -> None:
    # check reads findings five times, each through break_costs and request_costs: as a view
    # every request was priced again each time (37 s on 1M requests, 6.5 s priced once)
    # findings itself is read in five queries by check, three by summary: computed once too
    def kind(con: duckdb.DuckDBPyConnection) -> tuple[str, str]:
        tables = "SELECT table_name FROM duckdb_tables() WHERE temporary"
        names = {name for (name,) in con.execute(tables).fetchall()}
        return tuple("table" if v in names else "view" for v in ("request_costs", "findings"))

    assert kind(sql.connect(wh, only=["findings", "cost_summary"])) == ("table", "table")
    # a period read keeps them views: its days are few, and its memory is capped lower
    week = Period(W48.monday, W48.sunday)
    assert kind(sql.connect(wh, only=["findings"], period=week)) == ("view", "view")
    # a session of every view (the warehouse's DuckDB file) keeps every view a view
    assert kind(sql.connect(wh)) == ("view", "view")


def test_a_build_never_computes_the_heavy_views_as_tables_of_its_session(
    wh, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*_args: object) -> None:
        raise AssertionError("the build's session computed a heavy view as a table")

    monkeypatch.setattr(sql, "compute_once", refuse)
    results = materialise.build(wh, force=True)
    assert {r.name for r in results if r.rebuilt} == set(derived.MATERIALISED)


def test_a_week_page_is_the_same_written_alone_or_with_every_week(wh, tmp_path) -> None:
    generate_weekly(wh, tmp_path / "all", WeekSelection(all_weeks=True), now=NOW)
    for week in (W47, W48):
        generate_weekly(wh, tmp_path / week.label, WeekSelection(week=week.label), now=NOW)
        alone = (tmp_path / week.label / f"{week.label}.html").read_text(encoding="utf-8")
        assert alone == (tmp_path / "all" / f"{week.label}.html").read_text(encoding="utf-8")


@pytest.mark.parametrize(("built", "margin"), [(False, 3), (True, 1)], ids=["computed", "stored"])
def test_a_weekly_report_opens_no_part_of_the_days_before_its_margin(
    wh: Warehouse, tmp_path, built, margin
) -> None:
    # computed views look back as far as DeepSeek's 3-day lookback; stored ones only as far as
    # the longest cache lifetime (OpenAI's 24 hours)
    if built:
        materialise.build(wh)
    generate_weekly(wh, tmp_path / "before", WeekSelection(week="2026-W48"), now=NOW)
    assert wreck_parts_before(wh, W48.monday - timedelta(days=margin)) > 0

    generate_weekly(wh, tmp_path / "after", WeekSelection(week="2026-W48"), now=NOW)
    page = "2026-W48.html"
    after = (tmp_path / "after" / page).read_text(encoding="utf-8")
    assert after == (tmp_path / "before" / page).read_text(encoding="utf-8")
    # the week before does read them: the wreck is real
    with pytest.raises((duckdb.Error, WarehouseError)):
        generate_weekly(wh, tmp_path / "w47", WeekSelection(week="2026-W47"), now=NOW)


def test_summary_and_findings_since_a_day_read_from_that_day_on(wh: Warehouse, cli) -> None:
    since = W48.monday.isoformat()
    whole_by_day = cli("summary", "-w", str(wh.root), "--by", "day", "--since", since,
                       "--format", "csv")  # fmt: skip
    whole_findings = cli("findings", "-w", str(wh.root), "--since", since, "--format", "csv")
    assert whole_by_day.returncode == 0 and whole_findings.returncode == 0
    wreck_parts_before(wh, W48.monday - timedelta(days=3))

    by_day = cli("summary", "-w", str(wh.root), "--by", "day", "--since", since, "--format", "csv")
    assert by_day.returncode == 0, by_day.stderr
    assert by_day.stdout == whole_by_day.stdout
    # the demo's sessions 1-4 start 13, 11, 9 and 7 days after Monday 16 November: the 29th,
    # 27th, 25th and 23rd, so W48 has four days with requests
    w48_days = [d for d in days_with_requests(wh) if d >= W48.monday]
    assert w48_days == [date(2026, 11, d) for d in (23, 25, 27, 29)]
    assert len(by_day.stdout.splitlines()) == 1 + 4  # the header and a row a day
    findings = cli("findings", "-w", str(wh.root), "--since", since, "--format", "csv")
    assert findings.returncode == 0, findings.stderr
    assert findings.stdout == whole_findings.stdout
    everything = cli("summary", "-w", str(wh.root), "--by", "day")
    assert everything.returncode != 0  # without --since every day is read


def test_stored_views_keep_their_days_apart_so_a_period_skips_the_others(wh) -> None:
    # a period read takes whole days: a file (or row group) whose start times lie outside them
    # is skipped by its statistics
    materialise.build(wh)
    for name in derived.MATERIALISED:
        path = derived.derived_path(wh, name)
        if path.is_dir():  # request_prefix: a folder per day
            for folder in path.iterdir():
                starts = pq.read_table(folder, columns=["started_at"])[0].to_pylist()
                days = {s.date().isoformat() if s is not None else "unknown-day" for s in starts}
                assert days == {folder.name}, (name, folder.name)
            continue
        values = pq.read_table(path, columns=["started_at"]).column(0).to_pylist()
        known = [v for v in values if v is not None]
        assert known == sorted(known), name
        assert values[: len(known)] == known, f"{name}: an unknown start before a known one"


def test_a_period_read_opens_only_the_day_folders_of_its_days(tmp_path: Path) -> None:
    stored = tmp_path / "request_prefix.parquet"
    for folder in ("2026-11-15", "2026-11-16", "2026-11-17", "2026-11-18", "unknown-day"):
        (stored / folder).mkdir(parents=True)
        (stored / folder / "part-0.parquet").write_bytes(b"")
    (stored / "whole.parquet").write_bytes(b"")  # a file not in a day's folder is always read
    period = Period(date(2026, 11, 16), date(2026, 11, 17))
    assert sorted(str(f.relative_to(stored)) for f in stored_files(stored, period)) == [
        "2026-11-16/part-0.parquet",
        "2026-11-17/part-0.parquet",
        "whole.parquet",
    ]
    assert len(stored_files(stored, None)) == 6
    # a period with no day stored still gets the files, for the view's columns
    (stored / "whole.parquet").unlink()
    assert len(stored_files(stored, Period(date(2027, 1, 1), date(2027, 1, 1)))) == 5


def rules_con(tmp_path: Path, lifetime_s: int | None = None) -> duckdb.DuckDBPyConnection:
    options = sql.SqlOptions()
    if lifetime_s is not None:
        builtin = cache_rules.builtin_paths()[0].read_text(encoding="utf-8").splitlines()
        path = tmp_path / "rules.csv"
        row = f"long,acme,*,,,prefix,1024,128,{lifetime_s},,,,a long-lived cache"
        path.write_text(f"{builtin[0]}\n{row}\n", encoding="utf-8")
        options = sql.SqlOptions(rules_paths=(path,))
    con = duckdb.connect()
    cache_rules.register(con, options)
    return con


def test_the_margin_is_the_longest_lifetime_a_rule_allows_in_whole_days(tmp_path) -> None:
    builtin = rules_con(tmp_path)
    assert margin_days(builtin, lookback=False) == 1  # OpenAI's 24-hour retention
    assert margin_days(builtin, lookback=True) == 3  # DeepSeek's 3-day lookback
    longer = rules_con(tmp_path, lifetime_s=2 * 86_400 + 1)  # a user's rule: just over 2 days
    assert margin_days(longer, lookback=False) == 3


def test_a_period_registers_its_days_and_the_margin_before_it() -> None:
    period = Period(W48.monday, W48.sunday)
    assert period.read_days(3) == Period(date(2026, 11, 20), date(2026, 11, 29))
    assert period.start == datetime(2026, 11, 23, tzinfo=UTC)
    assert period.end == datetime(2026, 11, 30, tzinfo=UTC)
    assert day_of(Path("wh/requests/day=2026-11-23/k.1.parquet")) == date(2026, 11, 23)
    assert day_of(Path("wh/requests/day=__HIVE_DEFAULT_PARTITION__/k.parquet")) is None
    # --until is an exclusive instant: midnight ends the day before
    assert last_day_before(datetime(2026, 11, 30, tzinfo=UTC)) == date(2026, 11, 29)
    assert last_day_before(datetime(2026, 11, 30, 0, 0, 1, tzinfo=UTC)) == date(2026, 11, 30)


def test_an_open_end_is_closed_at_the_first_or_last_day_with_requests(wh) -> None:
    # the demo starts on 16 November (session 0) and its latest session starts 13 days later
    days = days_with_requests(wh)
    assert days[0] == date(2026, 11, 16) and days[-1] == date(2026, 11, 29)
    assert bounded(wh, None, None) is None
    assert bounded(wh, W48.monday, None) == Period(W48.monday, days[-1])
    assert bounded(wh, None, date(2026, 11, 20)) == Period(days[0], date(2026, 11, 20))


def test_a_period_reads_the_prompt_text_of_the_sources_it_reads_only() -> None:
    # source a holds days long before the period, source b the period's: only b's text is read
    def part(table: str, stem: str, day: str | None = None) -> Path:
        return Path("wh", table, *([f"day={day}"] if day else []), f"{stem}-00-00000.parquet")

    a, b = "a" * 16 + ".0000000000000001", "b" * 16 + ".0000000000000001"
    snapshot = {
        "requests": [part("requests", a, "2026-10-05"), part("requests", b, "2026-11-24")],
        "segments": [part("segments", a, "2026-10-05"), part("segments", b, "2026-11-24")],
        "segment_content": [part("segment_content", a), part("segment_content", b)],
        "rejects": [part("rejects", a)],
        "sources": [Path("wh", "sources", f"{a}.parquet"), Path("wh", "sources", f"{b}.parquet")],
    }
    got = sql.period_parts(snapshot, Period(W48.monday, W48.sunday).read_days(1))
    assert got["requests"] == [part("requests", b, "2026-11-24")]
    assert got["segments"] == [part("segments", b, "2026-11-24")]
    assert got["segment_content"] == [part("segment_content", b)]
    assert got["sources"] == snapshot["sources"]  # every manifest: sources are small
