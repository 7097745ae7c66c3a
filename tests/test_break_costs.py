"""break_costs: the money each cache break cost, worked by hand.

A break costs its lost tokens at the miss price instead of the read price, plus, where the
request wrote the lost prefix to the cache again and the provider charges for that, the write
price above the miss price. The SQL runs here over hand-made input tables (one row per case),
so every expected figure below is arithmetic on the price rows written next to it; the demo
test prices its breaks from the demo's published price rows, independently of request_costs.
"""

from __future__ import annotations

from typing import Any

import duckdb
import pytest
from test_costs_demo import price_of

from pipeline import sql as sqlmod
from pipeline import sql_catalog

# price rows: row_id, currency, miss, hit, write 5m, write 1h (per million tokens)
PRICE_ROWS = [
    ("deepseek.csv:9", "CNY", 2.0, 0.2, None, None),  # no write fee
    ("openai.csv:7", "USD", 2.0, 0.5, 2.0, None),  # a write costs the miss price
    ("anthropic.csv:2", "USD", 3.0, 0.3, 3.75, 6.0),
]

# request_id, tokens_lost, price_row, unpriced_reason, 5m writes, 1h writes, writes reported
CASES = [
    ("deepseek", 10_000, "deepseek.csv:9", None, None, None, None),
    ("openai", 2_048, "openai.csv:7", None, None, None, None),
    ("openai_wrote", 2_048, "openai.csv:7", None, 2_048, 0, 2_048),
    ("anthropic_5m", 10_000, "anthropic.csv:2", None, 12_000, 0, 12_000),
    ("anthropic_mixed", 10_000, "anthropic.csv:2", None, 8_000, 4_000, 12_000),
    ("anthropic_part", 10_000, "anthropic.csv:2", None, 3_000, 0, 3_000),
    ("anthropic_ttl", 10_000, "anthropic.csv:2", "cache_write_ttl_unknown", None, None, 12_000),
    # a cut stream: request_costs names the output first, the writes' split is unknown all the same
    ("anthropic_ttl_cut", 10_000, "anthropic.csv:2", "output_unknown", None, None, 12_000),
    ("unknown_loss", None, "openai.csv:7", None, None, None, None),
    ("unknown_price", 5_000, None, "no_price_for_model", None, None, None),
    ("cold_unpriced", 0, None, "no_price_for_model", None, None, None),
]


@pytest.fixture(scope="module")
def costs() -> dict[str, tuple[Any, ...]]:
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE price_rows_source (row_id VARCHAR, currency VARCHAR,"
        " input_cache_miss_per_mtok DOUBLE, input_cache_hit_per_mtok DOUBLE,"
        " cache_write_5m_per_mtok DOUBLE, cache_write_1h_per_mtok DOUBLE)"
    )
    con.executemany("INSERT INTO price_rows_source VALUES (?, ?, ?, ?, ?, ?)", PRICE_ROWS)
    con.execute(
        "CREATE TABLE cache_breaks (request_id VARCHAR, conversation_id VARCHAR, turn INTEGER,"
        " started_at TIMESTAMPTZ, agent VARCHAR, provider VARCHAR, model VARCHAR,"
        " cause VARCHAR, tokens_lost BIGINT)"
    )
    con.execute(
        "CREATE TABLE request_costs (request_id VARCHAR, price_row VARCHAR,"
        " unpriced_reason VARCHAR, cache_write_5m_tokens BIGINT, cache_write_1h_tokens BIGINT)"
    )
    con.execute("CREATE TABLE requests (request_id VARCHAR, cache_write_tokens BIGINT)")
    for rid, lost, row, reason, w5m, w1h, writes in CASES:
        con.execute("INSERT INTO requests VALUES (?, ?)", [rid, writes])
        con.execute(
            "INSERT INTO cache_breaks VALUES (?, 'c', 2, TIMESTAMPTZ '2026-11-16 09:00:00+00',"
            " 'a', 'p', 'm', 'system_changed', ?)",
            [rid, lost],
        )
        con.execute(
            "INSERT INTO request_costs VALUES (?, ?, ?, ?, ?)", [rid, row, reason, w5m, w1h]
        )
    rows = con.execute(
        "SELECT request_id, lost_cost, currency, lost_write_premium, lost_cost_unpriced_reason"
        f" FROM ({sql_catalog.query_sql('break_costs').rstrip().rstrip(';')})"
    ).fetchall()
    return {r[0]: r[1:] for r in rows}


def test_a_deepseek_break_costs_its_lost_tokens_at_miss_minus_hit_in_the_rows_currency(
    costs: dict[str, tuple[Any, ...]],
) -> None:
    cost, currency, premium, reason = costs["deepseek"]
    assert cost == pytest.approx(10_000 * (2.0 - 0.2) / 1e6)  # 0.018 CNY
    assert (currency, premium, reason) == ("CNY", 0.0, None)


def test_an_openai_break_adds_no_write_premium_whether_or_not_a_write_is_reported(
    costs: dict[str, tuple[Any, ...]],
) -> None:
    for rid in ("openai", "openai_wrote"):
        cost, currency, premium, reason = costs[rid]
        assert cost == pytest.approx(2_048 * (2.0 - 0.5) / 1e6)  # 0.003072 USD
        assert (currency, premium, reason) == ("USD", 0.0, None)


def test_an_anthropic_break_adds_the_write_premium_for_the_lost_tokens_it_wrote_again(
    costs: dict[str, tuple[Any, ...]],
) -> None:
    read_part = 10_000 * (3.0 - 0.3) / 1e6  # 0.027
    cost, _, premium, _ = costs["anthropic_5m"]
    assert premium == pytest.approx(10_000 * (3.75 - 3.0) / 1e6)  # 0.0075
    assert cost == pytest.approx(read_part + 0.0075)
    # 4,000 lost tokens were 1h writes (first in the prefix), the other 6,000 5m writes
    cost, _, premium, _ = costs["anthropic_mixed"]
    assert premium == pytest.approx((4_000 * (6.0 - 3.0) + 6_000 * (3.75 - 3.0)) / 1e6)
    assert cost == pytest.approx(read_part + 0.012 + 0.0045)
    # only 3,000 tokens were written: the rest of the loss was no write
    cost, _, premium, _ = costs["anthropic_part"]
    assert premium == pytest.approx(3_000 * 0.75 / 1e6)
    assert cost == pytest.approx(read_part + 0.00225)


def test_an_unknown_loss_price_or_write_lifetime_leaves_the_cost_null_with_its_reason(
    costs: dict[str, tuple[Any, ...]],
) -> None:
    assert costs["unknown_loss"] == (None, None, None, "loss_unknown")
    assert costs["unknown_price"] == (None, None, None, "no_price_for_model")
    assert costs["anthropic_ttl"] == (None, None, None, "cache_write_ttl_unknown")
    assert costs["anthropic_ttl_cut"] == (None, None, None, "cache_write_ttl_unknown")


def test_a_break_that_lost_nothing_costs_zero_even_without_a_price(
    costs: dict[str, tuple[Any, ...]],
) -> None:
    assert costs["cold_unpriced"] == (0.0, None, 0.0, None)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from pipeline.demo import write_demo
    from pipeline.ingest import ingest
    from pipeline.warehouse import Warehouse

    root = tmp_path_factory.mktemp("demo")
    write_demo(root / "capture.jsonl", seed=7, sessions=24)
    wh = Warehouse(root / "warehouse")
    ingest([root / "capture.jsonl"], wh, workers=1)
    return sqlmod.connect(wh)


def test_the_demo_break_money_equals_its_lost_tokens_priced_by_hand_from_the_price_rows(
    demo: Any,
) -> None:
    """The demo's models (gpt-4.1, DeepSeek V4 with off-peak windows) report no writes, so a
    break costs tokens_lost x (miss - hit) at the row in force at its own time."""
    rows = demo.execute(
        "SELECT model, started_at, tokens_lost FROM cache_breaks WHERE tokens_lost > 0"
    ).fetchall()
    expected, unpriced = 0.0, 0
    for model, ts, lost in rows:
        price = price_of(model, ts)
        if price is None:
            unpriced += 1
            continue
        expected += lost * (price[0] - price[1]) / 1e6
    total, currencies, nulls, unknown_loss = demo.execute(
        "SELECT sum(lost_cost), list(DISTINCT currency) FILTER (currency IS NOT NULL),"
        " count(*) FILTER (lost_cost IS NULL AND tokens_lost > 0),"
        " count(*) FILTER (lost_cost_unpriced_reason = 'loss_unknown') FROM break_costs"
    ).fetchone()
    assert expected > 0.4  # the demo loses money to its planted breaks
    assert total == pytest.approx(expected)
    assert currencies == ["USD"]
    assert nulls == unpriced
    assert (
        unknown_loss
        == demo.execute("SELECT count(*) FROM cache_breaks WHERE tokens_lost IS NULL").fetchone()[0]
    )


def test_the_demo_findings_hold_every_break_once_and_their_money_sums_to_the_hand_priced_loss(
    demo: Any,
) -> None:
    rows = demo.execute(
        "SELECT model, started_at, tokens_lost FROM cache_breaks WHERE tokens_lost > 0"
    ).fetchall()
    expected = 0.0
    for model, ts, lost in rows:
        price = price_of(model, ts)
        if price is not None:
            expected += lost * (price[0] - price[1]) / 1e6
    money, turns = demo.execute("SELECT sum(lost_cost), sum(turns) FROM findings").fetchone()
    breaks = demo.execute(
        "SELECT count(*) FROM cache_breaks WHERE cause <> 'cold_start'"
    ).fetchone()[0]
    assert money == pytest.approx(expected)
    assert turns == breaks


def test_the_demo_findings_name_the_planted_causes_with_their_fix(demo: Any) -> None:
    """The demo plants a timestamp in research-agent's system prompt and reorders ops-agent's
    tools: each becomes a finding whose fix says what to change."""
    fixes = dict(
        demo.execute(
            "SELECT scope || ' ' || cause || ' ' || change_class, any_value(fix) FROM findings"
            " WHERE change_class IS NOT NULL GROUP BY ALL"
        ).fetchall()
    )
    assert fixes["research-agent system_changed timestamp"] == (
        "move the timestamp after the history"
    )
    assert fixes["ops-agent tools_changed reordered"] == (
        "keep the tool order stable (sort the tools by name)"
    )
