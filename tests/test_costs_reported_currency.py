"""A cost the provider reported counts as the request's cost only where its currency is known
(OpenRouter: USD). Another server's `usage.cost` (a LiteLLM-style gateway) stays in
reported_cost as the raw fact, and the request is priced from the price tables like any other,
or is unpriced with reason reported_cost_currency_unknown. Then every cost view (request_costs,
cost_summary, report_weekly_cost, report_cost_daily, `cacheaudit summary`) has one definition
of priced: cost_total IS NOT NULL, always with a currency.

Prices by hand from openai.csv gpt-4.1 (2.00 miss / 0.50 hit / 8.00 out per million tokens):
100 input + 5 output = 0.0002 + 0.00004 = 0.00024 USD."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fixtures.prices import tiny_warehouse as tiny

from pipeline import sql as sqlmod
from pipeline.warehouse import Warehouse

AT = datetime(2026, 11, 24, 10, 0, tzinfo=UTC)  # ISO week 2026-W48 (Monday 2026-11-23)
GPT41 = 0.00024


def _row(rid: str, provider: str, model: str | None, cost: float | None) -> dict[str, Any]:
    return tiny.request(
        rid, AT, provider, model, input_tokens=100, cache_read_tokens=0, output_tokens=5,
        reported_cost=cost,
    )  # fmt: skip


ROWS = [
    # A gateway on its own host (provider = the host): usage.cost, currency unknown, no prices.
    _row("gateway_unpriced", "gw.internal", "gpt-4.1", 0.00042),
    # The same gateway mapped to openai with --providers: the tables can price it.
    _row("gateway_priced_from_tables", "openai", "gpt-4.1", 0.00042),
    _row("openrouter_reported", "openrouter", "openai/gpt-4.1", 0.0003),
    _row("openai_priced", "openai", "gpt-4.1", None),
    _row("no_model", "openai", None, None),
]


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Warehouse:
    return tiny.write(tmp_path_factory.mktemp("reported") / "warehouse", ROWS)


@pytest.fixture(scope="module")
def con(warehouse: Warehouse) -> Any:
    return sqlmod.connect(warehouse)


def rows(con: Any, query: str) -> list[dict[str, Any]]:
    rel = con.sql(query)
    return [dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()]


def cost(con: Any, request_id: str) -> dict[str, Any]:
    (row,) = rows(con, f"SELECT * FROM request_costs WHERE request_id = '{request_id}'")
    return row


def test_a_reported_cost_of_unknown_currency_is_kept_but_is_not_a_cost_total(con: Any) -> None:
    row = cost(con, "gateway_unpriced")
    assert row["reported_cost"] == pytest.approx(0.00042)  # the raw fact stays
    assert row["cost_total"] is None
    assert row["currency"] is None
    assert row["cost_source"] is None
    assert row["unpriced_reason"] == "reported_cost_currency_unknown"


def test_a_gateway_request_the_tables_can_price_is_priced_from_them_not_its_reported_cost(
    con: Any,
) -> None:
    row = cost(con, "gateway_priced_from_tables")
    assert row["reported_cost"] == pytest.approx(0.00042)
    assert row["cost_source"] == "computed"
    assert row["currency"] == "USD"
    assert row["cost_total"] == pytest.approx(GPT41)
    assert row["unpriced_reason"] is None
    assert row["savings"] == pytest.approx(0.0)  # no cache read: no saving, nothing unknown


def test_an_openrouter_reported_cost_still_wins_in_usd(con: Any) -> None:
    row = cost(con, "openrouter_reported")
    assert row["cost_source"] == "reported"
    assert row["currency"] == "USD"
    assert row["cost_total"] == pytest.approx(0.0003)


def test_no_cost_total_is_without_a_currency(con: Any) -> None:
    (row,) = rows(
        con,
        "SELECT count(*) AS n FROM request_costs WHERE cost_total IS NOT NULL AND currency IS NULL",
    )
    assert row["n"] == 0


def test_every_cost_view_counts_the_same_requests_as_priced(con: Any) -> None:
    total = 2 * GPT41 + 0.0003
    summary = rows(con, "SELECT * FROM cost_summary")
    # One row per currency of the priced requests, then ONE row for the unpriced ones.
    assert [r["currency"] for r in summary] == ["USD", None]
    usd, unpriced = summary
    assert (usd["requests"], unpriced["requests"], usd["requests_unpriced"]) == (3, 2, 2)
    assert usd["requests_reported_cost"] == 1
    assert usd["share_requests_priced"] == pytest.approx(3 / 5)
    assert usd["cost_total"] == pytest.approx(total)
    assert unpriced["unpriced_reasons"] == "model_unknown=1; reported_cost_currency_unknown=1"

    weekly = rows(con, "SELECT * FROM report_weekly_cost")
    assert [(r["currency"], r["requests_priced"], r["requests_unpriced_week"]) for r in weekly] == [
        ("USD", 3, 2)
    ]
    assert weekly[0]["cost_total"] == pytest.approx(total)

    daily = rows(
        con,
        "SELECT DISTINCT currency, requests_priced, requests_unpriced_day, cost_day"
        " FROM report_cost_daily",
    )
    assert [(r["currency"], r["requests_priced"], r["requests_unpriced_day"]) for r in daily] == [
        ("USD", 3, 2)
    ]
    assert daily[0]["cost_day"] == pytest.approx(total)


def test_summary_prints_every_request_as_priced_or_unpriced(cli: Any, warehouse: Warehouse) -> None:
    result = cli("summary", "-w", str(Path(warehouse.root)))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "(3 requests priced;" in out  # the shortfall is unknown: no segments here
    assert "unpriced:          2 requests" in out
    assert "1 with the reported cost has no currency (reported_cost_currency_unknown)" in out
