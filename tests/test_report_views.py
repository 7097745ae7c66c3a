"""The report views' SQL on hand-built rows (numbers worked out by hand in the comments)."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest
from test_report_support import EVIL, ROWS, request, write_requests

from pipeline import sql


def rows(con, query: str) -> list[tuple]:
    return con.execute(query).fetchall()


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    # Read-only queries: one connection for the module (connecting builds every view).
    return sql.connect(write_requests(tmp_path_factory.mktemp("views") / "wh", ROWS))


def test_weekly_headline_counts_unknown_usage_and_weights_the_ratio_by_tokens(con) -> None:
    got = rows(
        con,
        "SELECT week, requests, requests_usage_unknown, input_tokens, ratio_read_tokens,"
        " ratio_input_tokens, hit_ratio, requests_excluded_from_ratio, output_tokens,"
        " days_with_data FROM report_weekly_headline ORDER BY week",
    )
    # W48: r1..r5. Input known for r1-r4 (1000+3000+5000+4000); both known for r1-r3:
    # read 800+1500+1000 = 3300 of 9000 = 0.3667; r4 (read unknown) and r5 (no usage) left out.
    assert got[0][:6] == (date(2026, 11, 23), 5, 1, 13000, 3300, 9000)
    assert got[0][6] == pytest.approx(3300 / 9000)
    assert got[0][7:] == (2, 110, 3)
    # W49: r6 alone, reported 0 read (a known zero, not unknown).
    assert got[1] == (date(2026, 11, 30), 1, 0, 2000, 0, 2000, 0.0, 0, 5, 1)


def test_daily_hit_ratio_keeps_a_model_whose_reads_are_unknown_without_a_ratio(con) -> None:
    got = rows(
        con,
        "SELECT day, series, requests, hit_ratio, requests_excluded_from_ratio"
        " FROM report_daily_hit_ratio WHERE week = DATE '2026-11-23' ORDER BY day, series",
    )
    assert got == [
        (date(2026, 11, 23), "deepseek · deepseek-chat", 1, 0.8, 0),
        (date(2026, 11, 24), "deepseek · deepseek-chat", 1, 0.5, 0),
        (date(2026, 11, 24), f"openai · {EVIL}", 1, 0.2, 0),
        (date(2026, 11, 25), "openai · gpt-4.1", 2, None, 2),
    ]


def test_length_buckets_put_each_request_in_its_range_and_unknown_input_apart(con) -> None:
    got = rows(
        con,
        "SELECT bucket, requests, requests_in_ratio, hit_ratio FROM report_length_buckets"
        " WHERE week = DATE '2026-11-23' ORDER BY bucket_order",
    )
    # 1000 < 1024; 3000 and 4000 < 4096 (r4's read is unknown); 5000; r5 has no input.
    assert got == [
        ("under 1K", 1, 1, 0.8),
        ("1K-4K", 2, 1, 0.5),
        ("4K-16K", 1, 1, 0.2),
        ("input unknown", 1, 0, None),
    ]


def test_length_bucket_edges_are_inclusive_at_the_bottom(tmp_path: Path) -> None:
    edges = [1023, 1024, 4096, 16384, 65536, 199_999, 200_000]
    wh = write_requests(
        tmp_path / "wh",
        [request(f"r{i}", "2026-11-23T10:00:00", "x", "m", n, 0) for i, n in enumerate(edges)],
    )
    got = rows(
        sql.connect(wh), "SELECT bucket, requests FROM report_length_buckets ORDER BY bucket_order"
    )
    assert got == [
        ("under 1K", 1),
        ("1K-4K", 1),
        ("4K-16K", 1),
        ("16K-64K", 1),
        ("64K-200K", 2),
        ("200K and over", 1),
    ]


def test_latency_bins_read_share_in_tenths_by_delivery_and_skips_unknown_timing(
    con, tmp_path: Path
) -> None:
    got = rows(
        con,
        "SELECT delivery, read_share_from, read_share_to, requests, ttft_p50_ms"
        " FROM report_latency WHERE week = DATE '2026-11-23' ORDER BY ALL",
    )
    # r2: 1500/3000 = 0.5 not streamed; r3: 1000/5000 = 0.2 and r1: 800/1000 = 0.8 streamed.
    # r4 has no timing and no read; r5 no usage.
    assert got == [
        ("not streamed", 0.5, 0.6, 1, 2000.0),
        ("streamed", 0.2, 0.3, 1, 400.0),
        ("streamed", 0.8, 0.9, 1, 300.0),
    ]
    # and the two left out are counted on every row of the week
    left_out = rows(
        con, "SELECT DISTINCT requests_left_out FROM report_latency WHERE week = DATE '2026-11-23'"
    )
    assert left_out == [(2,)]


def test_a_full_cache_read_falls_in_the_top_latency_bin(tmp_path: Path) -> None:
    wh = write_requests(
        tmp_path / "wh",
        [request("r1", "2026-11-23T10:00:00", "x", "m", 5000, 5000, ttft_ms=100.0)],
    )
    got = rows(sql.connect(wh), "SELECT read_share_from, read_share_to FROM report_latency")
    assert got == [(0.9, 1.0)]


def cost_rows():
    return [
        # 400K uncached x 1.00 + 600K read x 0.10 + 100K output x 2.00 per million = 0.66 USD;
        # without caching 1M x 1.00 + 0.20 = 1.20.
        request("c1", "2026-11-23T10:00:00", "testprov", "m1", 1_000_000, 600_000, output=100_000),
        # 2M uncached = 2.00, nothing saved.
        request("c2", "2026-11-24T10:00:00", "testprov", "m1", 2_000_000, 0, output=0),
        # No price for this provider: unpriced, counted.
        request("c3", "2026-11-24T11:00:00", "nobody", "m-x", 1000, 0),
    ]


@pytest.fixture
def cost_con(tmp_path: Path):
    from test_report_support import PRICES_CSV

    prices = tmp_path / "prices.csv"
    prices.write_text(PRICES_CSV)
    wh = write_requests(tmp_path / "wh", cost_rows())
    return sql.connect(wh, options=sql.SqlOptions(prices_paths=(prices,)))


def test_weekly_cost_sums_priced_requests_per_currency_and_counts_the_unpriced(cost_con) -> None:
    got = rows(
        cost_con,
        "SELECT week, currency, requests_priced, round(cost_total, 6),"
        " round(cost_without_cache, 6), round(savings, 6), requests_unpriced_week"
        " FROM report_weekly_cost",
    )
    assert got == [(date(2026, 11, 23), "USD", 2, 2.66, 3.2, 0.54, 1)]


def test_daily_cost_is_split_into_four_parts_with_the_uncached_reference(cost_con) -> None:
    got = rows(
        cost_con,
        "SELECT day, part, round(cost, 6), round(cost_day, 6), round(cost_without_cache_day, 6),"
        " requests_priced, requests_unpriced_day FROM report_cost_daily ORDER BY day, part_order",
    )
    d1, d2 = date(2026, 11, 23), date(2026, 11, 24)
    assert got == [
        (d1, "uncached input", 0.4, 0.66, 1.2, 1, 0),
        (d1, "cache read", 0.06, 0.66, 1.2, 1, 0),
        (d1, "cache write", 0.0, 0.66, 1.2, 1, 0),
        (d1, "output", 0.2, 0.66, 1.2, 1, 0),
        (d2, "uncached input", 2.0, 2.0, 2.0, 1, 1),
        (d2, "cache read", 0.0, 2.0, 2.0, 1, 1),
        (d2, "cache write", 0.0, 2.0, 2.0, 1, 1),
        (d2, "output", 0.0, 2.0, 2.0, 1, 1),
    ]


def test_a_day_whose_requests_paid_a_search_fee_has_a_web_search_part(tmp_path: Path) -> None:
    # 1M uncached x 1.00 + 10 searches x 10.00 per 1,000 = 1.00 + 0.10 USD: the parts add up
    prices = tmp_path / "prices.csv"
    prices.write_text(
        "provider,model,effective_from,effective_to,currency,condition,input_cache_miss_per_mtok,"
        "input_cache_hit_per_mtok,cache_write_5m_per_mtok,cache_write_1h_per_mtok,output_per_mtok,"
        "web_search_per_1k,notes,source\n"
        "testprov,m1,2026-01-01T00:00Z,,USD,,1.00,0.10,,,2.00,10.00,made up for tests,none\n"
    )
    searched = {
        **request("s1", "2026-11-23T10:00:00", "testprov", "m1", 1_000_000, 0, output=0),
        "web_search_requests": 10,
    }
    wh = write_requests(tmp_path / "wh", [searched])
    con = sql.connect(wh, options=sql.SqlOptions(prices_paths=(prices,)))
    got = rows(
        con, "SELECT part, round(cost, 6), round(cost_day, 6) FROM report_cost_daily"
        " ORDER BY part_order",
    )  # fmt: skip
    assert got == [
        ("uncached input", 1.0, 1.1),
        ("cache read", 0.0, 1.1),
        ("cache write", 0.0, 1.1),
        ("output", 0.0, 1.1),
        ("web search", 0.1, 1.1),
    ]


def reported_cost_rows():
    """A week where the provider reported some costs (OpenRouter), and a day with no price."""
    return [
        # computed: 0.66 USD, 1.20 without caching (as c1 above)
        request("c1", "2026-11-23T10:00:00", "testprov", "m1", 1_000_000, 600_000, output=100_000),
        # reported 0.01 USD, no price row: no cost without caching, so no savings
        {
            **request("o1", "2026-11-23T11:00:00", "openrouter", "nobody/unlisted", 1000, 0),
            "reported_cost": 0.01,
        },
        # reported 0.001 USD wins over the computed 0.0026 (1,000 x 2.50 + 10 x 10.00 per million)
        {
            **request("o2", "2026-11-23T12:00:00", "openrouter", "openai/gpt-4o", 1000, 0),
            "reported_cost": 0.001,
        },
        # Wednesday: the only request of the day has no price
        request("c4", "2026-11-25T10:00:00", "nobody", "m-x", 1000, 0),
    ]


@pytest.fixture
def reported_con(tmp_path: Path):
    from test_report_support import PRICES_CSV

    prices = tmp_path / "prices.csv"
    prices.write_text(PRICES_CSV)
    wh = write_requests(tmp_path / "wh", reported_cost_rows())
    return sql.connect(wh, options=sql.SqlOptions(prices_paths=(prices,)))


def test_weekly_cost_counts_the_priced_requests_whose_savings_are_unknown(reported_con) -> None:
    got = rows(
        reported_con,
        "SELECT requests_priced, round(cost_total, 6), round(savings, 6),"
        " requests_savings_unknown, requests_unpriced_week FROM report_weekly_cost",
    )
    # savings: (1.20 - 0.66) + (0.0026 - 0.001); o1 has none and is counted.
    assert got == [(3, 0.671, 0.5416, 1, 1)]


def test_daily_cost_bars_add_up_to_the_weekly_cost_when_the_provider_reported_it(
    reported_con,
) -> None:
    [(bars, headline)] = rows(
        reported_con,
        "SELECT (SELECT sum(cost) FROM report_cost_daily),"
        " (SELECT sum(cost_total) FROM report_weekly_cost)",
    )
    assert bars == pytest.approx(headline)
    got = rows(
        reported_con,
        "SELECT part, round(cost, 6), round(cost_day, 6), requests_priced, requests_unpriced_day,"
        " requests_without_cache_unknown FROM report_cost_daily"
        " WHERE day = DATE '2026-11-23' ORDER BY part_order",
    )
    # The reported costs are one unsplit part (0.01 + 0.001, not o2's computed 0.0026); o1 has a
    # cost, so it is priced, not unpriced, as in the headline; its cost without caching is not.
    assert got == [
        ("uncached input", 0.4, 0.671, 3, 0, 1),
        ("cache read", 0.06, 0.671, 3, 0, 1),
        ("cache write", 0.0, 0.671, 3, 0, 1),
        ("output", 0.2, 0.671, 3, 0, 1),
        ("reported by the provider", 0.011, 0.671, 3, 0, 1),
    ]


def test_daily_cost_keeps_a_day_whose_requests_all_went_unpriced(reported_con) -> None:
    got = rows(
        reported_con,
        "SELECT currency, part, cost, requests_priced, requests_unpriced_day"
        " FROM report_cost_daily WHERE day = DATE '2026-11-25'",
    )
    assert got == [(None, None, None, 0, 1)]
