"""request_costs: each request priced with the row in force at its own timestamp.

Every expected number below was worked out by hand from the shipped CSV rows named in the
comment (prices per million tokens), not read back from the view.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import tiny_warehouse

from pipeline import sql as sqlmod
from pipeline.sql import SqlOptions

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "prices"
tiny = tiny_warehouse


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def deepseek(rid: str, ts: str, model: str = "deepseek-chat") -> dict[str, Any]:
    # 1M prompt tokens of which 400K hit, 100K output: easy to price by hand.
    return tiny.request(
        rid, utc(ts), "deepseek", model,
        input_tokens=1_000_000, cache_read_tokens=400_000, output_tokens=100_000,
    )  # fmt: skip


ROWS = [
    deepseek("ds_promo_last_second", "2025-02-08T15:59:59Z"),
    deepseek("ds_standard_first_second", "2025-02-08T16:00:00Z"),
    deepseek("ds_before_offpeak_launch", "2025-02-26T16:29:59Z"),
    deepseek("ds_offpeak_first_window", "2025-02-26T16:30:00Z"),
    deepseek("ds_offpeak_night", "2025-03-03T23:00:00Z"),
    deepseek("ds_offpeak_last_second", "2025-03-04T00:29:59Z"),
    deepseek("ds_peak_morning", "2025-03-04T00:30:00Z"),
    deepseek("ds_reasoner_offpeak", "2025-03-03T17:00:00Z", "deepseek-reasoner"),
    deepseek("ds_v4_before_hit_cut", "2026-04-26T12:14:59Z"),
    deepseek("ds_v4_after_hit_cut", "2026-04-26T12:15:00Z"),
    deepseek("ds_alias_retired", "2026-11-16T08:00:00Z"),
    deepseek("ds_v4flash_peak_monday", "2026-11-16T08:00:00Z", "deepseek-v4-flash"),
    deepseek("ds_v4flash_offpeak_monday", "2026-11-16T12:00:00Z", "deepseek-v4-flash"),
    deepseek("ds_v4flash_peak_hours_saturday", "2026-11-21T08:00:00Z", "deepseek-v4-flash"),
    deepseek("ds_v4flash_peak_hours_first_weekend", "2026-08-22T08:00:00Z", "deepseek-v4-flash"),
    # Anthropic: 2,000 uncached + 10,000 read + 6,000 written (4,000 of them 1h) = 18,000.
    tiny.request(
        "anthropic_5m_and_1h_writes", utc("2025-11-01T00:00:00Z"), "anthropic",
        "claude-sonnet-4-5-20250929", input_tokens=18_000, cache_read_tokens=10_000,
        cache_write_tokens=6_000, cache_write_1h_tokens=4_000, output_tokens=1_000,
    ),
    tiny.request(
        "anthropic_prompt_exactly_200k", utc("2025-11-01T00:00:00Z"), "anthropic",
        "claude-sonnet-4-5-20250929", input_tokens=200_000, cache_read_tokens=200_000,
        cache_write_tokens=0, cache_write_1h_tokens=0, output_tokens=1_000,
    ),
    tiny.request(
        "anthropic_prompt_just_over_200k", utc("2025-11-01T00:00:00Z"), "anthropic",
        "claude-sonnet-4-5-20250929", input_tokens=200_001, cache_read_tokens=200_000,
        cache_write_tokens=0, cache_write_1h_tokens=0, output_tokens=1_000,
    ),
    # The usage of reference sample openrouter_chat_anthropic_cache_write.json, on Sonnet 4.5.
    tiny.request(
        "openrouter_reported", utc("2025-11-01T00:00:00Z"), "openrouter",
        "anthropic/claude-sonnet-4.5", input_tokens=3_214, cache_read_tokens=0,
        cache_write_tokens=3_211, output_tokens=100, reported_cost=0.01355025,
    ),
    tiny.request(
        "unpriced_model", utc("2025-11-01T00:00:00Z"), "openai", "mystery-model-1",
        input_tokens=1_000, cache_read_tokens=0, output_tokens=10,
    ),
    tiny.request(
        "usage_not_reported", utc("2025-11-01T00:00:00Z"), "openai", "gpt-4.1",
        input_tokens=None, cache_read_tokens=None, output_tokens=None,
    ),
    tiny.request(
        "gemini_read_price_unknown", utc("2025-08-01T00:00:00Z"), "google", "gemini-2.5-flash",
        input_tokens=10_000, cache_read_tokens=4_000, output_tokens=100,
    ),
]  # fmt: skip


@pytest.fixture(scope="module")
def con(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    wh = tiny.write(tmp_path_factory.mktemp("costs") / "warehouse", ROWS)
    return sqlmod.connect(wh)


def cost(con: Any, request_id: str) -> dict[str, Any]:
    rel = con.sql("SELECT * FROM request_costs WHERE request_id = ?", params=[request_id])
    rows = rel.fetchall()
    assert len(rows) == 1, request_id
    return dict(zip(rel.columns, rows[0], strict=True))


# DeepSeek, 600K miss + 400K hit + 100K out:
#   V3 promo (0.14 / 0.014 / 0.28):          0.084 + 0.0056 + 0.028 = 0.1176
#   V3 standard (0.27 / 0.07 / 1.10):        0.162 + 0.028  + 0.110 = 0.300
#   V3/R1 off-peak (0.135 / 0.035 / 0.55):   0.081 + 0.014  + 0.055 = 0.150
#   V4-flash launch (0.14 / 0.028 / 0.28):   0.084 + 0.0112 + 0.028 = 0.1232
#   V4-flash after hit cut (0.0028 hit):     0.084 + 0.00112 + 0.028 = 0.11312
#   V4-flash peak (0.44 / 0.014 / 1.32):     0.264 + 0.0056 + 0.132 = 0.4016
#   V4-flash off-peak (0.22 / 0.007 / 0.66): 0.132 + 0.0028 + 0.066 = 0.2008
@pytest.mark.parametrize(
    ("request_id", "total", "price_row"),
    [
        ("ds_promo_last_second", 0.1176, "deepseek.csv:4"),
        ("ds_standard_first_second", 0.300, "deepseek.csv:6"),
        ("ds_before_offpeak_launch", 0.300, "deepseek.csv:6"),
        ("ds_offpeak_first_window", 0.150, "deepseek.csv:8"),
        ("ds_offpeak_night", 0.150, "deepseek.csv:8"),
        ("ds_offpeak_last_second", 0.150, "deepseek.csv:8"),
        ("ds_peak_morning", 0.300, "deepseek.csv:6"),
        ("ds_reasoner_offpeak", 0.150, "deepseek.csv:12"),
        ("ds_v4_before_hit_cut", 0.1232, "deepseek.csv:18"),
        ("ds_v4_after_hit_cut", 0.11312, "deepseek.csv:19"),
        ("ds_v4flash_peak_monday", 0.4016, "deepseek.csv:25"),
        ("ds_v4flash_offpeak_monday", 0.2008, "deepseek.csv:24"),
    ],
)
def test_a_deepseek_request_is_priced_with_the_row_in_force_at_its_own_second(
    con: Any, request_id: str, total: float, price_row: str
) -> None:
    row = cost(con, request_id)
    assert row["price_row"] == price_row
    assert row["cost_total"] == pytest.approx(total, rel=1e-9)
    assert row["currency"] == "USD"
    assert row["cost_source"] == "computed"
    assert row["unpriced_reason"] is None


def test_deepseek_buckets_and_savings_across_the_2025_02_08_16h_change(con: Any) -> None:
    promo = cost(con, "ds_promo_last_second")
    assert promo["cost_uncached_input"] == pytest.approx(0.084)
    assert promo["cost_cache_read"] == pytest.approx(0.0056)
    assert promo["cost_output"] == pytest.approx(0.028)
    assert promo["cost_cache_write_5m"] is None  # DeepSeek reports no writes: unknown, not 0
    # Without the cache all 1M tokens are misses: 0.14 + 0.028 = 0.168; saved 0.168 - 0.1176.
    assert promo["cost_without_cache"] == pytest.approx(0.168)
    assert promo["savings"] == pytest.approx(0.0504)
    standard = cost(con, "ds_standard_first_second")
    assert standard["cost_without_cache"] == pytest.approx(0.27 + 0.11)
    assert standard["savings"] == pytest.approx(0.08)


def test_deepseek_chat_goes_through_the_v4_flash_alias_until_the_alias_is_retired(
    con: Any,
) -> None:
    during = cost(con, "ds_v4_after_hit_cut")
    assert during["price_model"] == "deepseek-v4-flash"
    assert during["alias_row"] == "model_aliases.csv:2"
    after = cost(con, "ds_alias_retired")
    assert after["price_model"] == "deepseek-chat"
    assert after["cost_total"] is None
    assert after["unpriced_reason"] == "no_price_at_time"


def test_weekend_peak_hours_are_off_peak_once_the_weekend_rule_is_in_force(con: Any) -> None:
    # DeepSeek's pricing page: peak hours Monday through Friday; weekends off-peak all day
    # from 2026-08-23. A Saturday 08:00 UTC request in November pays the off-peak row.
    row = cost(con, "ds_v4flash_peak_hours_saturday")
    assert row["price_row"] == "deepseek.csv:24"
    assert row["cost_total"] == pytest.approx(0.2008)


def test_weekend_peak_hours_of_the_first_week_stay_unpriced_because_the_sources_disagree(
    con: Any,
) -> None:
    # The announcement said daily, the later page weekdays; the rule's first hour is unknown.
    row = cost(con, "ds_v4flash_peak_hours_first_weekend")
    assert row["price_row"] == "deepseek.csv:26"
    assert row["cost_total"] is None
    assert row["unpriced_reason"] == "no_price_for_uncached_input"


def test_an_anthropic_request_prices_5m_and_1h_writes_separately(con: Any) -> None:
    # Sonnet 4.5 (3 / 0.30 / 3.75 / 6 / 15): 2,000 uncached 0.006, 10,000 read 0.003,
    # 2,000 5m writes 0.0075, 4,000 1h writes 0.024, 1,000 out 0.015 -> 0.0555.
    row = cost(con, "anthropic_5m_and_1h_writes")
    assert row["price_model"] == "claude-sonnet-4-5"
    assert row["cache_write_5m_tokens"] == 2_000
    assert row["cache_write_1h_tokens"] == 4_000
    assert row["cost_uncached_input"] == pytest.approx(0.006)
    assert row["cost_cache_read"] == pytest.approx(0.003)
    assert row["cost_cache_write_5m"] == pytest.approx(0.0075)
    assert row["cost_cache_write_1h"] == pytest.approx(0.024)
    assert row["cost_total"] == pytest.approx(0.0555)
    # No cache: 18,000 x 3 = 0.054 + 0.015 = 0.069; saved 0.0135.
    assert row["savings"] == pytest.approx(0.0135)


def test_a_prompt_just_over_200k_prices_every_token_at_the_long_context_rate(con: Any) -> None:
    at_threshold = cost(con, "anthropic_prompt_exactly_200k")
    # 200,000 read x 0.30 = 0.06 + 1,000 out x 15 = 0.015.
    assert at_threshold["cost_total"] == pytest.approx(0.075)
    assert at_threshold["price_condition"] is None
    over = cost(con, "anthropic_prompt_just_over_200k")
    # Long-context row (6 / 0.60 / 22.50) on ALL tokens: 1 x 6 + 200,000 x 0.60 + 1,000 x 22.5.
    assert over["price_condition"] == "prompt_tokens>200000"
    assert over["cost_total"] == pytest.approx(0.000006 + 0.12 + 0.0225)


def test_an_openrouter_reported_cost_wins_and_is_labelled(con: Any) -> None:
    row = cost(con, "openrouter_reported")
    assert row["price_provider"] == "anthropic"
    assert row["price_model"] == "claude-sonnet-4-5"
    assert row["cost_source"] == "reported"
    assert row["currency"] == "USD"
    assert row["cost_total"] == pytest.approx(0.01355025)
    # Our own price agrees with what OpenRouter billed: 3 x 3 + 3,211 x 3.75 + 100 x 15.
    assert row["cost_computed"] == pytest.approx(0.000009 + 0.01204125 + 0.0015)
    # Writing the cache cost more than not caching: 3,214 x 3 + 100 x 15 = 0.011142.
    assert row["savings"] == pytest.approx(0.011142 - 0.01355025)
    assert row["savings"] < 0


def test_an_unknown_model_is_null_with_a_reason_never_zero(con: Any) -> None:
    row = cost(con, "unpriced_model")
    assert row["cost_total"] is None
    assert row["cost_source"] is None
    assert row["unpriced_reason"] == "no_price_for_model"
    assert row["cost_uncached_input"] is None
    unknown = cost(con, "usage_not_reported")
    assert unknown["cost_total"] is None
    assert unknown["unpriced_reason"] == "input_unknown"


def test_a_bucket_with_tokens_but_no_price_leaves_the_request_unpriced(con: Any) -> None:
    # Gemini 2.5 Flash's cached price changed on an unknown date between 07-04 and 10-31.
    row = cost(con, "gemini_read_price_unknown")
    assert row["cost_uncached_input"] == pytest.approx(6_000 * 0.30 / 1e6)
    assert row["cost_cache_read"] is None
    assert row["cost_total"] is None
    assert row["unpriced_reason"] == "no_price_for_cache_read"


def test_cost_summary_counts_coverage_and_unpriced_reasons(con: Any) -> None:
    rel = con.sql("SELECT * FROM cost_summary")
    rows = [dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()]
    assert [r["currency"] for r in rows] == ["USD", None]
    usd, unpriced = rows
    # 22 requests; unpriced: retired alias, peak hours of the first weekend (2026-08-22),
    # unknown model, no usage, gemini.
    assert usd["requests"] == 17
    assert unpriced["requests"] == 5
    assert usd["requests_all"] == 22
    assert usd["share_requests_priced"] == pytest.approx(17 / 22)
    assert usd["requests_reported_cost"] == 1
    assert unpriced["unpriced_reasons"] == (
        "input_unknown=1; no_price_at_time=1; no_price_for_cache_read=1; no_price_for_model=1;"
        " no_price_for_uncached_input=1"
    )
    deepseek_total = 0.1176 + 0.300 * 3 + 0.150 * 4 + 0.1232 + 0.11312 + 0.4016 + 0.2008 * 2
    others = 0.0555 + 0.075 + (0.000006 + 0.12 + 0.0225) + 0.01355025
    assert usd["cost_total"] == pytest.approx(deepseek_total + others)


def test_cost_if_ideal_moves_reusable_tokens_out_of_writes_then_misses(tmp_path: Path) -> None:
    # Own session: expected_cache is replaced by hand-set expectations so the arithmetic is
    # checked independently of how expected_cache estimates them.
    rows = [r for r in ROWS if r["request_id"] in IDEAL_IDS]
    con = sqlmod.connect(tiny.write(tmp_path / "warehouse", rows))
    expected = pa.table(
        {
            "request_id": ["anthropic_5m_and_1h_writes", "ds_promo_last_second"],
            "expected_read_tokens": pa.array([16_000, 900_000], pa.int64()),
        }
    )
    con.register("test_expected_reads", expected)
    con.execute("CREATE OR REPLACE VIEW expected_cache AS SELECT * FROM test_expected_reads")
    anthropic = cost(con, "anthropic_5m_and_1h_writes")
    # 6,000 more reads: the 4,000 1h and 2,000 5m writes become reads.
    # Ideal: 2,000 x 3 + 16,000 x 0.30 + 1,000 x 15 = 0.006 + 0.0048 + 0.015 = 0.0258.
    assert anthropic["cost_if_ideal"] == pytest.approx(0.0258)
    assert anthropic["left_on_table"] == pytest.approx(0.0555 - 0.0258)
    promo = cost(con, "ds_promo_last_second")
    # 900K read, 100K miss: 0.014 + 0.0126 + 0.028 = 0.0546.
    assert promo["cost_if_ideal"] == pytest.approx(0.0546)
    assert promo["left_on_table"] == pytest.approx(0.1176 - 0.0546)
    # A request expected_cache knows nothing about has an unknown ideal, not 0.
    assert cost(con, "ds_standard_first_second")["left_on_table"] is None


IDEAL_IDS = {"anthropic_5m_and_1h_writes", "ds_promo_last_second", "ds_standard_first_second"}


def test_request_costs_takes_expected_reads_from_the_expected_cache_view(con: Any) -> None:
    mismatched = con.sql(
        "SELECT count(*) FROM request_costs AS c JOIN expected_cache AS e USING (request_id)"
        " WHERE c.expected_read_tokens IS DISTINCT FROM e.expected_read_tokens"
    ).fetchall()[0][0]
    assert mismatched == 0


def test_user_price_rows_win_over_shipped_rows(tmp_path: Path) -> None:
    wh = tiny.write(tmp_path / "warehouse", [deepseek("ds", "2025-03-03T23:00:00Z")])
    options = SqlOptions(prices_paths=(FIXTURES / "user_override.csv",))
    con = sqlmod.connect(wh, options=options)
    row = cost(con, "ds")
    # User row 1.00 / 0.10 / 2.00 beats the shipped off-peak row: 0.6 + 0.04 + 0.2.
    assert row["price_layer"] == "user"
    assert row["cost_total"] == pytest.approx(0.84)
    digest_user = con.sql("SELECT price_digest, user_rows FROM price_digest").fetchall()[0]
    shipped = sqlmod.connect(wh).sql("SELECT price_digest, user_rows FROM price_digest")
    digest_shipped = shipped.fetchall()[0]
    assert digest_user[1] == 1 and digest_shipped[1] == 0
    assert digest_user[0] != digest_shipped[0]


PRICE_HEADER = (
    "provider,model,effective_from,effective_to,currency,condition,input_cache_miss_per_mtok,"
    "input_cache_hit_per_mtok,cache_write_5m_per_mtok,cache_write_1h_per_mtok,output_per_mtok,"
    "notes,source"
)


def sonnet_dated(rid: str, ts: str) -> dict[str, Any]:
    # 2,000 uncached + 10,000 read + 6,000 written (4,000 of them 1h) = 18,000; 1,000 out.
    return tiny.request(
        rid, utc(ts), "anthropic", "claude-sonnet-4-5-20250929", input_tokens=18_000,
        cache_read_tokens=10_000, cache_write_tokens=6_000, cache_write_1h_tokens=4_000,
        output_tokens=1_000,
    )  # fmt: skip


def test_an_exact_user_row_beats_a_shipped_alias_and_a_user_alias_beats_a_shipped_row(
    tmp_path: Path,
) -> None:
    table = tmp_path / "dated.csv"
    table.write_text(
        f"{PRICE_HEADER}\n"
        "anthropic,claude-sonnet-4-5-20250929,2025-11-01,,USD,,1,0.1,1.25,2,5,negotiated,\n",
        encoding="utf-8",
    )
    aliases = tmp_path / "aliases.csv"
    aliases.write_text(
        "provider,alias,model,effective_from,effective_to,note,source\n"
        "openai,gpt-4.1,gpt-4.1-mini,,,ours,test\n",
        encoding="utf-8",
    )
    wh = tiny.write(
        tmp_path / "warehouse",
        [sonnet_dated("before_user_row", "2025-10-15T00:00:00Z"),
         sonnet_dated("with_user_row", "2025-12-01T00:00:00Z"),
         tiny.request("user_alias", utc("2025-12-01T00:00:00Z"), "openai", "gpt-4.1",
                      input_tokens=1_000, cache_read_tokens=0, output_tokens=10)],
    )  # fmt: skip
    con = sqlmod.connect(wh, options=SqlOptions(prices_paths=(table, aliases)))
    ours = cost(con, "with_user_row")
    # 2,000 x 1 + 10,000 x 0.1 + 2,000 x 1.25 + 4,000 x 2 + 1,000 x 5, per million.
    assert (ours["price_row"], ours["alias_row"]) == (f"{table}:2", None)
    assert ours["price_model"] == "claude-sonnet-4-5-20250929"
    assert ours["cost_total"] == pytest.approx(0.0185)
    # Before the user row starts the shipped alias applies: anthropic.csv:12 (3/0.3/3.75/6/15).
    shipped = cost(con, "before_user_row")
    assert (shipped["price_row"], shipped["alias_row"]) == (
        "anthropic.csv:12",
        "model_aliases.csv:15",
    )
    assert shipped["cost_total"] == pytest.approx(0.0555)
    # A user alias is not beaten by the shipped gpt-4.1 row (openai.csv:7): gpt-4.1-mini's.
    aliased = cost(con, "user_alias")
    assert (aliased["alias_row"], aliased["price_row"]) == (f"{aliases}:2", "openai.csv:8")


def test_prices_show_and_request_costs_pick_the_same_row_between_equal_rank_patterns(
    cli, tmp_path: Path
) -> None:
    # Two patterns, both matching mymodel, rank equally; file order decides: line 2 before
    # line 11 (as text, "x.csv:11" would sort before "x.csv:2").
    lines = [PRICE_HEADER, "openai,mymodel*,2025-01-01,2026-01-01,USD,,2,1,,,10,,"]
    lines += [f"openai,other-{n},2025-01-01,2026-01-01,USD,,1,1,,,1,," for n in range(3, 11)]
    lines += ["openai,*model,2025-01-01,2026-01-01,USD,,3,1,,,10,,"]
    table = tmp_path / "tie.csv"
    table.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert cli("prices", "check", "--prices", str(table)).returncode == 0
    shown = cli(
        "prices", "show", "mymodel", "--provider", "openai", "--at", "2025-03-03T08:00Z",
        "--prices", str(table),
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    # (the table cuts long row ids: the row is told by its model pattern and miss price)
    marked = [line.split()[4:9:4] for line in shown.stdout.splitlines() if line.startswith("*")]
    row = tiny.request(
        "r", utc("2025-03-03T08:00:00Z"), "openai", "mymodel",
        input_tokens=1_000_000, cache_read_tokens=0, output_tokens=0,
    )  # fmt: skip
    con = sqlmod.connect(
        tiny.write(tmp_path / "warehouse", [row]), options=SqlOptions(prices_paths=(table,))
    )
    got = cost(con, "r")
    assert marked == [["mymodel*", "2"]]
    assert got["price_row"] == f"{table}:2"
    assert got["cost_total"] == pytest.approx(2.0)


def _deepseek_record(rid: str, ts: str) -> bytes:
    import orjson

    from pipeline.capture_format import dumps_record, make_record

    body = {"model": "deepseek-chat", "messages": [{"role": "user", "content": "hi"}]}
    usage = {
        "prompt_tokens": 1_000_000,
        "completion_tokens": 100_000,
        "total_tokens": 1_100_000,
        "prompt_cache_hit_tokens": 400_000,
        "prompt_cache_miss_tokens": 600_000,
        "prompt_tokens_details": {"cached_tokens": 400_000},
    }
    response = {
        "id": rid,
        "object": "chat.completion",
        "model": "deepseek-chat",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        ],
        "usage": usage,
    }
    record = make_record(
        started_at=utc(ts),
        method="POST",
        url="https://api.deepseek.com/chat/completions",
        request_headers=[("content-type", "application/json")],
        request_body=orjson.dumps(body),
        status=200,
        response_headers=[("content-type", "application/json")],
        response_body=orjson.dumps(response),
        record_id=rid,
    )
    return dumps_record(record)


def test_an_ingested_deepseek_capture_is_priced_on_each_side_of_the_16h_change(
    tmp_path: Path,
) -> None:
    from pipeline.ingest import ingest
    from pipeline.warehouse import Warehouse

    capture = tmp_path / "capture.jsonl"
    capture.write_bytes(
        _deepseek_record("before", "2025-02-08T15:59:59Z")
        + _deepseek_record("after", "2025-02-08T16:00:00Z")
    )
    wh = Warehouse(tmp_path / "warehouse")
    ingest([capture], wh, workers=1)
    con = sqlmod.connect(wh)
    # Same numbers as the hand-made rows above: promo 0.1176, then V3 standard 0.300.
    assert cost(con, "before")["cost_total"] == pytest.approx(0.1176)
    assert cost(con, "after")["cost_total"] == pytest.approx(0.300)
