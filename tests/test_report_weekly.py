"""`report weekly` end to end on a hand-built warehouse (numbers worked out by hand)."""

from __future__ import annotations

import json
import re
from datetime import UTC, date, datetime
from pathlib import Path

import pytest
from fixtures.cassettes import undated_cassette
from test_report_support import EVIL, ROWS, request, write_requests

from pipeline.errors import NotFoundError, UsageError
from pipeline.reports import data as report_data
from pipeline.reports.weekly import WeekSelection, generate_weekly

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def wh(tmp_path: Path):
    return write_requests(tmp_path / "wh", ROWS)


def week_page(wh, out: Path, week: str = "2026-W48") -> str:
    result = generate_weekly(wh, out, WeekSelection(week=week), now=NOW)
    assert result.written == [out / f"{week}.html"]
    return (out / f"{week}.html").read_text(encoding="utf-8")


def specs_of(html: str) -> dict:
    raw = re.search(r'<script type="application/json" id="chart-specs">(.*?)</script>', html, re.S)
    assert raw
    return json.loads(raw.group(1))


def test_the_weekly_page_shows_the_headline_numbers_of_that_week_only(wh, tmp_path) -> None:
    html = week_page(wh, tmp_path / "out")
    # r1..r5: 5 requests, 13,000 input tokens, 3,300 / 9,000 = 36.7% read, r5 without usage.
    assert '<div class="label">Requests</div><div class="value">5</div>' in html
    assert '<div class="label">Input tokens</div><div class="value">13,000</div>' in html
    assert '<div class="value">36.7%</div>' in html
    assert "3,300 of 9,000 tokens; 2 requests left out" in html
    # r4 (no timing) and r5 (no usage) are not in the latency chart, and its caption says so
    assert "2 requests of the week without a recorded time to first text or usage are left" in html
    assert '<div class="label">Usage unknown</div><div class="value">1</div>' in html
    assert "Mon 23 Nov 2026 to Sun 29 Nov 2026 (UTC) · 5 requests" in html
    assert "2026-12-01 09:00:00 UTC" in html


def test_the_output_tile_counts_the_requests_whose_output_is_unknown(tmp_path) -> None:
    # r7 reported its input but its stream was cut before the output count arrived.
    cut = request("r7", "2026-11-26T10:00:00", "anthropic", "claude-sonnet-4-5", 1200, 0,
                  output=None)  # fmt: skip
    wh = write_requests(tmp_path / "wh", [*ROWS, cut])
    html = week_page(wh, tmp_path / "out")
    # r1..r4: 50 + 20 + 10 + 30; r5 (no usage) and r7 (cut) left out.
    assert '<div class="label">Output tokens</div><div class="value">110</div>' in html
    assert "reasoning included; 2 requests with unknown output left out" in html
    assert '<div class="label">Usage unknown</div><div class="value">1</div>' in html


def test_a_week_where_no_request_reported_its_cache_read_has_no_ratio_tokens_not_zero(
    tmp_path,
) -> None:
    # input known, cache read not: the ratio's tokens are unknown, not "0 of 0"
    rows = [request("u1", "2026-11-24T10:00:00", "deepseek", "deepseek-chat", 1_000, None)]
    html = week_page(write_requests(tmp_path / "wh", rows), tmp_path / "out")
    assert "no request reported both input and cache read; 1 request left out" in html
    assert "0 of 0 tokens" not in html


def test_a_model_name_with_a_script_tag_renders_as_text_everywhere(wh, tmp_path) -> None:
    html = week_page(wh, tmp_path / "out")
    assert EVIL not in html
    assert "alert(1)" in html  # it is there, only escaped
    # Four script elements: error probe, chart specs, Vega bundle, embed; none injected.
    assert html.count("<script") == 4
    # In the models table as HTML text ...
    assert "openai · &lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in html
    # ... and in the inline chart data as JSON escapes that cannot close the element.
    assert "\\u003c/script\\u003e\\u003cscript\\u003ealert(1)\\u003c/script\\u003e" in html
    values = specs_of(html)["chart-hit-ratio"]["datasets"]
    assert f"openai · {EVIL}" in {r["series"] for rows in values.values() for r in rows}


def test_every_section_with_data_gets_a_chart_div_and_a_spec(wh, tmp_path) -> None:
    html = week_page(wh, tmp_path / "out")
    specs = specs_of(html)
    assert {"chart-hit-ratio", "chart-latency", "chart-length-buckets"} <= set(specs)
    for chart_id in specs:
        assert f'<div class="chart" id="{chart_id}"></div>' in html


def test_a_section_whose_view_is_missing_says_so_instead_of_drawing_an_empty_chart(
    wh, tmp_path, monkeypatch
) -> None:
    real = report_data.view_exists
    monkeypatch.setattr(report_data, "view_exists", lambda v: v != "report_latency" and real(v))
    html = week_page(wh, tmp_path / "out")
    assert '<p class="note">not available: view report_latency missing</p>' in html
    assert "chart-latency" not in html


def test_a_week_without_requests_is_not_found_and_names_the_weeks_that_have_data(
    wh, tmp_path
) -> None:
    with pytest.raises(NotFoundError) as caught:
        generate_weekly(wh, tmp_path / "out", WeekSelection(week="2026-W40"), now=NOW)
    assert caught.value.message == "no requests in week 2026-W40"
    assert caught.value.hint == "weeks with data: 2026-W48, 2026-W49"
    assert not (tmp_path / "out" / "2026-W40.html").exists()


def test_since_until_writes_every_week_with_data_that_overlaps_the_range(wh, tmp_path) -> None:
    out = tmp_path / "out"
    sel = WeekSelection(since=date(2026, 11, 29), until=date(2026, 12, 20))
    result = generate_weekly(wh, out, sel, now=NOW)
    # 11-29 is the Sunday of W48; W50 and W51 have no data and are not written.
    assert result.written == [out / "2026-W48.html", out / "2026-W49.html"]


def test_an_until_at_the_end_of_the_calendar_means_everything_after_since(wh, tmp_path) -> None:
    # walking week by week to 9999-12-31 once stepped past the last date Python can hold
    out = tmp_path / "out"
    sel = WeekSelection(since=date(2026, 11, 29), until=date(9999, 12, 31))
    result = generate_weekly(wh, out, sel, now=NOW)
    assert result.written == [out / "2026-W48.html", out / "2026-W49.html"]


def test_conflicting_selections_are_a_usage_error(wh, tmp_path) -> None:
    with pytest.raises(UsageError):
        generate_weekly(wh, tmp_path, WeekSelection(week="2026-W48", all_weeks=True), now=NOW)
    with pytest.raises(UsageError):
        generate_weekly(wh, tmp_path, WeekSelection(since=date(2026, 11, 1)), now=NOW)


def test_all_skips_weeks_whose_inputs_did_not_change_and_redoes_those_that_did(
    wh, tmp_path
) -> None:
    out = tmp_path / "out"
    first = generate_weekly(wh, out, WeekSelection(all_weeks=True), now=NOW)
    assert first.written == [out / "2026-W48.html", out / "2026-W49.html"]
    again = generate_weekly(wh, out, WeekSelection(all_weeks=True), now=NOW)
    assert again.written == []
    assert again.unchanged == [out / "2026-W48.html", out / "2026-W49.html"]
    # A new source with a request on Tuesday of W49 changes W49's inputs only.
    write_requests(
        wh.root,
        [request("r7", "2026-12-01T10:00:00", "deepseek", "deepseek-chat", 100, 0)],
        source_hash="cd" * 16,
    )
    third = generate_weekly(wh, out, WeekSelection(all_weeks=True), now=NOW)
    assert third.written == [out / "2026-W49.html"]
    assert third.unchanged == [out / "2026-W48.html"]
    assert "· 2 requests" in (out / "2026-W49.html").read_text(encoding="utf-8")


def test_the_index_lists_every_generated_week_newest_first_with_its_numbers(wh, tmp_path) -> None:
    out = tmp_path / "out"
    generate_weekly(wh, out, WeekSelection(all_weeks=True), now=NOW)
    index = (out / "index.html").read_text(encoding="utf-8")
    w49 = index.index('<a href="2026-W49.html">2026-W49</a>')
    w48 = index.index('<a href="2026-W48.html">2026-W48</a>')
    assert w49 < w48
    # W49: r6 alone, 2,000 input tokens with a reported zero read: 0.0%, not a dash.
    assert '<td class="num">2,000</td><td class="num">0.0%</td>' in index
    assert len(index) < 50_000  # no 900 KB Vega bundle on a page without charts


def test_the_cli_prints_each_page_and_exits_5_for_an_empty_week(wh, tmp_path, cli) -> None:
    out = tmp_path / "out"
    done = cli("report", "weekly", "--week", "2026-W48", "-w", str(wh.root), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{out / '2026-W48.html'}\n"
    missing = cli("report", "weekly", "--week", "2026-W40", "-w", str(wh.root), "--out", str(out))
    assert missing.returncode == 5
    assert "error: no requests in week 2026-W40" in missing.stderr


def test_the_default_out_dir_comes_from_the_environment(wh, tmp_path, cli) -> None:
    out = tmp_path / "elsewhere"
    done = cli(
        "report", "weekly", "--all", "-w", str(wh.root), env={"CACHEAUDIT_REPORTS_DIR": str(out)}
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.glob("*.html")) == [
        "2026-W48.html",
        "2026-W49.html",
        "index.html",
    ]


def test_the_headline_shows_cost_savings_and_unpriced_requests_at_the_given_prices(
    tmp_path,
) -> None:
    from test_report_support import PRICES_CSV
    from test_report_views import cost_rows

    from pipeline.sql import SqlOptions

    prices = tmp_path / "prices.csv"
    prices.write_text(PRICES_CSV)
    wh = write_requests(tmp_path / "wh", cost_rows())
    out = tmp_path / "out"
    generate_weekly(
        wh,
        out,
        WeekSelection(week="2026-W48"),
        options=SqlOptions(prices_paths=(prices,)),
        now=NOW,
    )
    html = (out / "2026-W48.html").read_text(encoding="utf-8")
    # 0.66 + 2.00 USD; saved (1.20 + 2.00) - 2.66 = 0.54; the "nobody" request has no price.
    assert '<div class="label">Cost (USD)</div><div class="value">2.6600 USD</div>' in html
    assert '<div class="label">Saved by caching</div><div class="value">0.5400 USD</div>' in html
    assert '<div class="label">No price</div><div class="value">1</div>' in html
    spec = specs_of(html)["chart-cost-split"]
    assert spec["title"] == "Cost per day, by kind of token (USD); dashed: cost without caching"
    assert "1 request on these days had no price and is left out." in html


def test_diff_excerpts_and_findings_render_as_text_in_their_tables() -> None:
    from pipeline.reports.data import WeekData
    from pipeline.reports.sections import breaks, hygiene
    from pipeline.reports.weeks import IsoWeek

    top = {
        "week": "2026-11-23",
        "rank": 1,
        "conversation_id": EVIL,
        "agent": EVIL,
        "model": "m",
        "breaks": 1,
        "tokens_lost": 5,
        "breaks_tokens_unknown": 0,
        "main_cause": "tools_changed",
        "costliest_cause": "tools_changed",
        "change_class": "reordered",
        "changed_kind": "tool",
        "costliest_turn": 2,
        "excerpt": EVIL,
    }
    cause = {
        "week": "2026-11-23",
        "cause": "tools_changed",
        "breaks": 1,
        "tokens_lost": 5,
        "breaks_tokens_unknown": 0,
        "conversations": 1,
    }
    finding = {
        "week": "2026-11-23",
        "rank": 1,
        "subject_kind": "agent",
        "subject": EVIL,
        "finding": "volatile_content",
        "detail": EVIL,
        "example_request_id": "r1",
        "conversation_id": "A",
        "position": 1,
        "excerpt": EVIL,
        "turns_affected": 2,
        "tokens_per_turn": 10.0,
        "tokens_total": 20.0,
    }
    data = WeekData(
        IsoWeek(date(2026, 11, 23)),
        {"report_break_causes": [cause], "report_top_breaks": [top], "report_hygiene": [finding]},
    )
    escaped = "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;"
    for section in (breaks.build(data), hygiene.build(data)):
        assert EVIL not in section.body_html
        assert f"<code>{escaped}</code>" in section.body_html


def test_breaks_with_an_unknown_loss_are_counted_in_the_caption_and_tables_not_summed() -> None:
    from pipeline.reports.data import WeekData
    from pipeline.reports.sections import breaks, conversation_turns
    from pipeline.reports.weeks import IsoWeek

    causes = [
        {
            "week": "2026-11-23",
            "cause": "system_changed",
            "breaks": 3,
            "tokens_lost": 900,
            "breaks_tokens_unknown": 2,
            "conversations": 1,
        }
    ]
    top = [
        {
            "week": "2026-11-23",
            "rank": 1,
            "conversation_id": "A",
            "agent": "bot",
            "model": "m",
            "breaks": 1,
            "tokens_lost": None,
            "breaks_tokens_unknown": 1,
            "main_cause": "system_changed",
            "costliest_cause": "system_changed",
            "change_class": "timestamp",
            "changed_kind": "system",
            "costliest_turn": 2,
            "excerpt": "x",
        }
    ]
    section = breaks.build(
        WeekData(
            IsoWeek(date(2026, 11, 23)),
            {"report_break_causes": causes, "report_top_breaks": top},
        )
    )
    assert "2 breaks had an unknown loss" in section.caption
    assert '<th class="num">Loss unknown</th>' in section.body_html
    # the unknown sum is a dash, never 0; the count of unknown losses beside it
    assert '<td class="num">\u2014</td><td class="num">1</td><td class="num">1</td>' in (
        section.body_html
    )

    turn = {"input_tokens": 10, "read_tokens": 0, "miss_tokens": 10, "expected_read_tokens": 0}
    turns = [
        {**turn, "turn": 1, "cause": "cold_start", "tokens_lost": 0},
        {**turn, "turn": 2, "cause": "system_changed", "tokens_lost": None},
        {**turn, "turn": 3, "cause": "system_changed", "tokens_lost": 7},
    ]
    caption = conversation_turns.build(turns).caption
    assert "2 cache breaks after the first. Tokens lost is unknown (\u2014) for 1 break" in caption


def _priced_page(tmp_path: Path, rows: list[dict]) -> tuple[str, str]:
    """The 2026-W48 page and the index, at the made-up USD prices of test_report_support."""
    from test_report_support import PRICES_CSV

    from pipeline.sql import SqlOptions

    prices = tmp_path / "prices.csv"
    prices.write_text(PRICES_CSV)
    out = tmp_path / "out"
    generate_weekly(
        write_requests(tmp_path / "wh", rows),
        out,
        WeekSelection(week="2026-W48"),
        options=SqlOptions(prices_paths=(prices,)),
        now=NOW,
    )
    return (
        (out / "2026-W48.html").read_text(encoding="utf-8"),
        (out / "index.html").read_text(encoding="utf-8"),
    )


def test_the_input_tile_and_the_index_count_the_requests_whose_input_is_unknown(
    tmp_path,
) -> None:
    # r8 reported usage without the prompt count (an OTel span with only output).
    span = request("r8", "2026-11-26T10:00:00", "openai", "gpt-4.1", None, None, output=5)
    wh = write_requests(tmp_path / "wh", [*ROWS, span])
    out = tmp_path / "out"
    generate_weekly(wh, out, WeekSelection(week="2026-W48"), now=NOW)
    html = (out / "2026-W48.html").read_text(encoding="utf-8")
    # r1..r4 known (13,000); r5 (no usage) and r8 left out; usage unknown stays r5 alone.
    assert '<div class="label">Input tokens</div><div class="value">13,000</div>' in html
    assert "cached included; 2 requests with unknown input left out" in html
    assert '<div class="label">Usage unknown</div><div class="value">1</div>' in html
    index = (out / "index.html").read_text(encoding="utf-8")
    assert '<td class="num">13,000<br>2 requests with input unknown</td>' in index


def test_with_reported_costs_the_saved_card_counts_its_unknowns_and_the_bars_agree(
    tmp_path,
) -> None:
    from test_report_views import reported_cost_rows

    rows = [r for r in reported_cost_rows() if r["request_id"] != "c4"]
    html, _ = _priced_page(tmp_path, rows)
    # 0.66 + 0.01 + 0.001 reported; o1 (reported, no price row) has no savings: counted.
    assert '<div class="label">Cost (USD)</div><div class="value">0.6710 USD</div>' in html
    assert "vs. the same requests uncached; unknown for 1 request</div>" in html
    assert '<div class="label">No price</div><div class="value">0</div>' in html
    # o1 has a cost: the caption does not call it unpriced, and the bars carry the same 0.671.
    assert "had no price" not in html
    bars = specs_of(html)["chart-cost-split"]["datasets"]
    values = next(iter(bars.values()))
    assert sum(v["cost"] for v in values) == pytest.approx(0.671)
    assert "1 priced request with no cost without caching" in html


def test_the_cost_caption_counts_the_unpriced_requests_of_a_day_with_no_priced_request(
    tmp_path,
) -> None:
    from test_report_views import reported_cost_rows

    # c1 priced on Monday; c4 alone and unpriced on Wednesday.
    rows = [r for r in reported_cost_rows() if r["request_id"] in ("c1", "c4")]
    html, _ = _priced_page(tmp_path, rows)
    assert '<div class="label">No price</div><div class="value">1</div>' in html
    assert "1 request on these days had no price and is left out." in html


def test_small_amounts_and_near_total_ratios_never_print_as_zero_or_100_percent(
    tmp_path,
) -> None:
    # 4 uncached x 1.00 + 9,996 read x 0.10 + 10 output x 2.00 per million = 0.0010236 USD;
    # without caching 0.01002, saved 0.0089964; 9,996 / 10,000 read.
    html, index = _priced_page(
        tmp_path, [request("c1", "2026-11-23T10:00:00", "testprov", "m1", 10_000, 9_996)]
    )
    assert '<div class="label">Cost (USD)</div><div class="value">0.0010 USD</div>' in html
    assert '<div class="label">Saved by caching</div><div class="value">0.0090 USD</div>' in html
    assert '<div class="label">Hit ratio</div><div class="value">&gt;99.9%</div>' in html
    assert '<td class="num">&gt;99.9%</td>' in html  # the per-model table
    assert "100.0%" not in html
    assert "0.0010 USD" in index
    assert '<td class="num">&gt;99.9%</td>' in index


def test_the_hit_ratio_table_names_what_its_left_out_requests_lack(wh, tmp_path) -> None:
    html = week_page(wh, tmp_path / "out")
    # r4 reported usage but not its cache read; r5 reported no usage: both left out.
    assert '<th class="num">Left out (input or cache read unknown)</th>' in html
    assert "2 requests with unknown input or cache-read tokens left out." in html
    assert "Left out (usage unknown)" not in html
    assert "with unknown usage left out" not in html


def test_report_weekly_counts_one_conversation_page_in_the_singular(tmp_path: Path, cli) -> None:
    # it said "1 written and 1 conversation pages they link to"
    breaks = Path(__file__).parent / "fixtures" / "breaks" / "system_changed.jsonl"
    wh = tmp_path / "wh"
    assert cli("ingest", str(breaks), "-w", str(wh)).returncode == 0
    done = cli("report", "weekly", "--week", "2026-W47", "-w", str(wh), "-o", str(tmp_path / "o"))
    assert done.returncode == 0, done.stderr
    assert "1 written and 1 conversation page they link to, 0 unchanged" in done.stderr


@pytest.mark.parametrize("command", [["weekly"], ["conversation", "s1"]])
def test_report_out_that_is_a_file_is_named_as_such_not_as_a_file_that_exists(
    tmp_path: Path, cli, command: list[str]
) -> None:
    # `--out capture.jsonl` said "cannot use capture.jsonl: File exists"
    breaks = Path(__file__).parent / "fixtures" / "breaks" / "system_changed.jsonl"
    wh = tmp_path / "wh"
    assert cli("ingest", str(breaks), "-w", str(wh)).returncode == 0
    a_file = tmp_path / "capture.jsonl"
    a_file.write_text("", encoding="utf-8")
    done = cli("report", *command, "-w", str(wh), "--out", str(a_file))
    assert done.returncode == 2
    assert done.stderr.splitlines()[0] == f"error: --out {a_file} is a file, not a directory"


def test_report_weekly_of_only_undated_requests_says_they_have_no_week_not_that_none_exist(
    tmp_path: Path, cli
) -> None:
    # a cassette without Date headers gave "error: the warehouse has no requests", though
    # `summary` counted its request
    cassette = undated_cassette(tmp_path / "cassette.json", model="gpt-4.1-2025-04-14")
    wh = tmp_path / "wh"
    assert cli("ingest", str(cassette), "-w", str(wh)).returncode == 0
    done = cli("report", "weekly", "-w", str(wh), "-o", str(tmp_path / "out"))
    assert done.returncode == NotFoundError.exit_code
    assert (
        "error: no request in the warehouse has a start time, so none belongs to a week"
        in done.stderr.splitlines()
    )
