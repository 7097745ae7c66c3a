"""Server-side web searches are billed per search on top of the tokens, and audio input at its
own rate: the counts the response reports are priced with the row in force, a search with no
fee established leaves the request unpriced, and an unreported audio share of the cache reads
is unknown, never guessed."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from conftest import tiny_warehouse

from pipeline import sql as sqlmod

tiny = tiny_warehouse

DEC = datetime(2025, 12, 1, 12, tzinfo=UTC)
COLUMNS = (
    "cost_total, cost_web_search, cost_uncached_input, cost_cache_read, cost_without_cache,"
    " unpriced_reason, price_layer"
)


@pytest.fixture(scope="module")
def costs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    rows = [
        # Anthropic: 10 USD per 1,000 searches (our researched row)
        tiny.request("search", DEC, "anthropic", "claude-sonnet-4-5", input_tokens=10_000,
                     cache_read_tokens=0, cache_write_tokens=0, output_tokens=500,
                     web_search_requests=3),
        tiny.request("no-count", DEC, "anthropic", "claude-sonnet-4-5", input_tokens=10_000,
                     cache_read_tokens=0, cache_write_tokens=0, output_tokens=500),
        tiny.request("zero", DEC, "anthropic", "claude-sonnet-4-5", input_tokens=10_000,
                     cache_read_tokens=0, cache_write_tokens=0, output_tokens=500,
                     web_search_requests=0),
        # OpenAI: our researched gpt-4.1 row (2.00 / 0.50 / 8.00) has no fee; the price
        # library's row for the same model lends its 10 USD per 1,000 calls
        tiny.request("lent-fee", DEC, "openai", "gpt-4.1", input_tokens=10_000,
                     cache_read_tokens=0, output_tokens=500, web_search_requests=2),
        # DeepSeek has no search fee anywhere: searches there cannot be priced
        tiny.request("no-fee", DEC, "deepseek", "deepseek-chat", input_tokens=1_000,
                     cache_read_tokens=0, output_tokens=100, web_search_requests=2),
        # Gemini 2.5 Flash after 2025-10-31: text 0.30 / 0.03, audio 1.00 / 0.10, output 2.50
        tiny.request("audio", DEC, "google", "gemini-2.5-flash", input_tokens=1_000,
                     cache_read_tokens=200, output_tokens=100, audio_input_tokens=400,
                     audio_cache_read_tokens=100),
        tiny.request("audio-split-unknown", DEC, "google", "gemini-2.5-flash",
                     input_tokens=1_000, cache_read_tokens=200, output_tokens=100,
                     audio_input_tokens=400),
        tiny.request("audio-no-reads", DEC, "google", "gemini-2.5-flash", input_tokens=1_000,
                     cache_read_tokens=0, output_tokens=100, audio_input_tokens=400),
        # Gemini 2.5 Pro has one input price for every modality
        tiny.request("audio-pro", DEC, "google", "gemini-2.5-pro", input_tokens=1_000,
                     cache_read_tokens=0, output_tokens=0, audio_input_tokens=1_000),
        # priced by the price library only: gemini-2.0-flash audio input 0.70 (text 0.10)
        tiny.request("audio-library", DEC, "google", "gemini-2.0-flash", input_tokens=1_000,
                     cache_read_tokens=0, output_tokens=0, audio_input_tokens=1_000),
    ]  # fmt: skip
    con = sqlmod.connect(tiny.write(tmp_path_factory.mktemp("wh") / "wh", rows))
    cursor = con.sql(f"SELECT request_id, {COLUMNS} FROM request_costs")
    names = [d[0] for d in cursor.description][1:]
    return {row[0]: dict(zip(names, row[1:], strict=True)) for row in cursor.fetchall()}


def test_each_reported_web_search_adds_the_fee_per_thousand_to_the_cost(
    costs: dict[str, dict[str, Any]],
) -> None:
    got = costs["search"]
    # 10,000 x 3.00 + 500 x 15.00 per million, + 3 x 10 / 1,000
    assert got["cost_web_search"] == pytest.approx(0.03, rel=1e-12)
    assert got["cost_total"] == pytest.approx(0.03 + 0.0075 + 0.03, rel=1e-12)
    # the fee is no cache cost: it is paid with or without the cache
    assert got["cost_without_cache"] == pytest.approx(got["cost_total"], rel=1e-12)


def test_a_response_without_a_search_count_pays_no_fee_and_a_reported_zero_costs_zero(
    costs: dict[str, dict[str, Any]],
) -> None:
    assert costs["no-count"]["cost_web_search"] is None
    assert costs["no-count"]["cost_total"] == pytest.approx(0.0375, rel=1e-12)
    assert costs["zero"]["cost_web_search"] == 0
    assert costs["zero"]["cost_total"] == pytest.approx(0.0375, rel=1e-12)


def test_a_winning_row_without_a_fee_takes_it_from_the_next_row_in_force_that_has_one(
    costs: dict[str, dict[str, Any]],
) -> None:
    got = costs["lent-fee"]
    assert got["price_layer"] == "shipped"  # the tokens are priced by our row
    assert got["cost_web_search"] == pytest.approx(2 * 10 / 1e3, rel=1e-12)
    assert got["cost_total"] == pytest.approx((10_000 * 2.00 + 500 * 8.00) / 1e6 + 0.02, rel=1e-12)


def test_searches_under_a_row_without_a_fee_leave_the_request_unpriced(
    costs: dict[str, dict[str, Any]],
) -> None:
    got = costs["no-fee"]
    assert (got["cost_total"], got["unpriced_reason"]) == (None, "no_price_for_web_search")


def test_audio_input_and_audio_cache_reads_are_priced_at_their_own_rates(
    costs: dict[str, dict[str, Any]],
) -> None:
    got = costs["audio"]
    # uncached 800 of which 300 audio; reads 200 of which 100 audio
    uncached = (500 * 0.30 + 300 * 1.00) / 1e6
    read = (100 * 0.03 + 100 * 0.10) / 1e6
    assert got["cost_uncached_input"] == pytest.approx(uncached, rel=1e-12)
    assert got["cost_cache_read"] == pytest.approx(read, rel=1e-12)
    assert got["cost_total"] == pytest.approx(uncached + read + 100 * 2.50 / 1e6, rel=1e-12)
    assert got["cost_without_cache"] == pytest.approx(
        (600 * 0.30 + 400 * 1.00 + 100 * 2.50) / 1e6, rel=1e-12
    )


def test_audio_read_from_the_cache_without_its_share_reported_is_unpriced_not_guessed(
    costs: dict[str, dict[str, Any]],
) -> None:
    got = costs["audio-split-unknown"]
    assert (got["cost_total"], got["unpriced_reason"]) == (None, "audio_cache_split_unknown")
    # with no cache reads there is nothing to split
    no_reads = costs["audio-no-reads"]
    assert no_reads["cost_total"] == pytest.approx(
        (600 * 0.30 + 400 * 1.00 + 100 * 2.50) / 1e6, rel=1e-12
    )


def test_audio_costs_the_text_rate_where_the_row_has_no_audio_price(
    costs: dict[str, dict[str, Any]],
) -> None:
    assert costs["audio-pro"]["cost_total"] == pytest.approx(1_000 * 1.25 / 1e6, rel=1e-12)


def test_the_price_library_prices_audio_input_at_its_audio_rate(
    costs: dict[str, dict[str, Any]],
) -> None:
    got = costs["audio-library"]
    assert got["price_layer"] == "library"
    assert got["cost_total"] == pytest.approx(1_000 * 0.70 / 1e6, rel=1e-12)


def test_spoken_output_is_priced_at_the_audio_output_rate_and_unknown_where_not_reported(
    tmp_path: Any,
) -> None:
    # gpt-audio (the price library, as https://platform.openai.com/docs/pricing lists it):
    # text 2.50 in / 10.00 out, audio 32.00 in / 64.00 out, per million tokens.
    # 1,000 in (800 audio) and 2,000 out (1,800 audio):
    # 200 x 2.50 + 800 x 32.00 + 200 x 10.00 + 1,800 x 64.00 = 143,300 per million = 0.1433
    at = datetime(2025, 11, 10, 10, tzinfo=UTC)
    spoken = tiny.request("spoken", at, "openai", "gpt-audio", input_tokens=1_000,
                          cache_read_tokens=0, output_tokens=2_000)  # fmt: skip
    spoken.update(audio_input_tokens=800, audio_output_tokens=1_800)
    unsaid = tiny.request("unsaid", at, "openai", "gpt-audio", input_tokens=1_000,
                          cache_read_tokens=0, output_tokens=2_000)  # fmt: skip
    unsaid.update(audio_input_tokens=800)
    con = sqlmod.connect(tiny.write(tmp_path / "wh", [spoken, unsaid]))
    got = con.execute(
        "SELECT request_id, cost_total, cost_output, unpriced_reason FROM request_costs ORDER BY 1"
    ).fetchall()
    assert got[0][1] == pytest.approx(0.1433, rel=1e-12)
    assert got[0][2] == pytest.approx((200 * 10.00 + 1_800 * 64.00) / 1e6, rel=1e-12)
    # its output may be all text or all speech: 0.0200 to 0.1280 USD; unknown, not a guess
    assert got[1] == ("unsaid", None, None, "audio_output_unknown")


def test_a_fee_per_request_is_added_to_the_tokens_and_stacks_in_the_days_bars(
    tmp_path: Any,
) -> None:
    # Perplexity sonar in the price library: 1.00 in / 1.00 out per million tokens, 12 USD per
    # 1,000 requests (https://docs.perplexity.ai/getting-started/pricing: the largest search
    # context's fee, as the library gives it). 10,000 in, 1,000 out:
    # 10,000 x 1.00 / 1e6 + 1,000 x 1.00 / 1e6 + 12 / 1,000 = 0.011 + 0.012 = 0.023 USD
    at = datetime(2026, 3, 1, 12, tzinfo=UTC)
    row = tiny.request("sonar", at, "perplexity", "sonar", input_tokens=10_000,
                       cache_read_tokens=0, output_tokens=1_000)  # fmt: skip
    con = sqlmod.connect(tiny.write(tmp_path / "wh", [row]))
    ((total, fee, without_cache),) = con.execute(
        "SELECT cost_total, cost_request_fee, cost_without_cache FROM request_costs"
    ).fetchall()
    assert (total, fee, without_cache) == (
        pytest.approx(0.023),
        pytest.approx(0.012),
        pytest.approx(0.023),
    )
    parts = dict(con.execute("SELECT part, cost FROM report_cost_daily").fetchall())
    assert parts["request fee"] == pytest.approx(0.012)
    assert sum(parts.values()) == pytest.approx(0.023)  # the bars add up to the day's cost


def test_a_users_own_token_prices_keep_the_libraries_fee_per_request(tmp_path: Any) -> None:
    # A user's row for sonar with their own token prices (2.00 in / 2.00 out) and no fee
    # column: the fee is not a token price, so it comes from the library's row (12 USD per
    # 1,000 requests). 10,000 in, 1,000 out: 0.022 + 0.012 = 0.034 USD (the fee was dropped:
    # 0.022). A row that says its own fee keeps it: 5 per 1,000 -> 0.022 + 0.005.
    header = (
        "provider,model,effective_from,effective_to,currency,condition,"
        "input_cache_miss_per_mtok,input_cache_hit_per_mtok,cache_write_5m_per_mtok,"
        "cache_write_1h_per_mtok,output_per_mtok,request_fee_per_1k,notes,source"
    )
    at = datetime(2026, 3, 1, 12, tzinfo=UTC)
    rows = [
        tiny.request("own-tokens", at, "perplexity", "sonar", input_tokens=10_000,
                     cache_read_tokens=0, output_tokens=1_000),
        tiny.request("own-fee", at, "perplexity", "sonar-pro", input_tokens=10_000,
                     cache_read_tokens=0, output_tokens=1_000),
    ]  # fmt: skip
    table = tmp_path / "mine.csv"
    table.write_text(
        f"{header}\n"
        "perplexity,sonar,2026-01-01,,USD,,2,2,,,2,,,contract\n"
        "perplexity,sonar-pro,2026-01-01,,USD,,2,2,,,2,5,,contract\n",
        encoding="utf-8",
    )
    con = sqlmod.connect(
        tiny.write(tmp_path / "wh", rows), options=sqlmod.SqlOptions(prices_paths=(table,))
    )
    got = {
        r[0]: r[1:]
        for r in con.execute(
            "SELECT request_id, price_row, cost_request_fee, cost_total FROM request_costs"
        ).fetchall()
    }
    assert got["own-tokens"] == (f"{table}:2", pytest.approx(0.012), pytest.approx(0.034))
    assert got["own-fee"] == (f"{table}:3", pytest.approx(0.005), pytest.approx(0.027))
