"""request_costs at the edges an audit found: cache writes whose 5m/1h split is not reported,
compacted responses and long-context tiers, OpenAI writes without a write fee, a model whose
long-context price is not known. Every expected number is worked out by hand from the shipped
CSV row named in the comment (prices per million tokens)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from conftest import SAMPLES, tiny_warehouse

from pipeline import sql as sqlmod
from pipeline.dialects import messages
from pipeline.warehouse import Warehouse

tiny = tiny_warehouse

NOV = datetime(2025, 11, 1, tzinfo=UTC)
DEC = datetime(2025, 12, 1, tzinfo=UTC)


def opus_writes(rid: str, ttls: list[str] | None, one_hour: int | None) -> dict[str, Any]:
    # claude-opus-4-5 (anthropic.csv: 5.00 miss / 0.50 hit / 6.25 5m / 10.00 1h / 25.00 out):
    # 10 uncached + 100,000 written, no output.
    row = tiny.request(
        rid, DEC, "anthropic", "claude-opus-4-5", input_tokens=100_010, cache_read_tokens=0,
        output_tokens=0, cache_write_tokens=100_000, cache_write_1h_tokens=one_hour,
    )  # fmt: skip
    row["cache_ttls"] = ttls
    return row


def compacted(rid: str, passes: list[int], read: int, output: int) -> dict[str, Any]:
    # claude-sonnet-4-5: <=200K 3.00 / 0.30 / out 15.00; >200K 6.00 / 0.60 / out 22.50.
    row = tiny.request(
        rid, NOV, "anthropic", "claude-sonnet-4-5-20250929", input_tokens=sum(passes),
        cache_read_tokens=read, output_tokens=output, cache_write_tokens=0,
        cache_write_1h_tokens=0,
    )  # fmt: skip
    row["largest_pass_prompt_tokens"] = max(passes)
    row["smallest_pass_prompt_tokens"] = min(passes)
    return row


ROWS = [
    opus_writes("writes_split_reported", ["5m", "1h"], 40_000),
    opus_writes("writes_only_1h_breakpoints", ["1h"], None),
    opus_writes("writes_only_5m_breakpoints", ["5m", "5m"], None),
    opus_writes("writes_mixed_breakpoints_split_unknown", ["5m", "1h"], None),
    compacted("compaction_both_passes_under_200k", [150_100, 60_000], 150_000, 2_100),
    compacted("compaction_both_passes_over_200k", [210_000, 205_000], 400_000, 1_000),
    compacted("compaction_passes_straddle_200k", [250_000, 1_000], 200_000, 1_000),
    # gpt-4.1 (openai.csv: 2.00 miss / 0.50 hit / no write fee / 8.00 out): the 2026 usage
    # shape of samples/openai_chat_prompt_cache_write.json.
    tiny.request(
        "openai_write_without_fee", datetime(2026, 7, 20, tzinfo=UTC), "openai", "gpt-4.1",
        input_tokens=4_020, cache_read_tokens=0, output_tokens=4, cache_write_tokens=4_012,
    ),
    # claude-sonnet-4-20250514 over 200K: its long-context rate was not found in a public source.
    tiny.request(
        "sonnet4_over_200k", datetime(2025, 9, 1, tzinfo=UTC), "anthropic",
        "claude-sonnet-4-20250514", input_tokens=250_000, cache_read_tokens=200_000,
        output_tokens=100, cache_write_tokens=0, cache_write_1h_tokens=0,
    ),
]  # fmt: skip


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Warehouse:
    return tiny.write(tmp_path_factory.mktemp("edge") / "warehouse", ROWS)


@pytest.fixture(scope="module")
def con(warehouse: Warehouse) -> Any:
    return sqlmod.connect(warehouse)


def cost(con: Any, request_id: str) -> dict[str, Any]:
    rel = con.sql("SELECT * FROM request_costs WHERE request_id = ?", params=[request_id])
    [row] = rel.fetchall()
    return dict(zip(rel.columns, row, strict=True))


def test_a_reported_5m_1h_split_is_priced_as_reported(con: Any) -> None:
    row = cost(con, "writes_split_reported")
    # 10 x 5.00 + 60,000 x 6.25 + 40,000 x 10.00
    assert row["cost_total"] == pytest.approx((50 + 375_000 + 400_000) / 1e6)


def test_unsplit_writes_of_a_request_with_only_1h_breakpoints_are_priced_as_1h(con: Any) -> None:
    row = cost(con, "writes_only_1h_breakpoints")
    assert (row["cache_write_5m_tokens"], row["cache_write_1h_tokens"]) == (0, 100_000)
    assert row["cost_total"] == pytest.approx((50 + 1_000_000) / 1e6)  # not 0.62505 (all 5m)


def test_unsplit_writes_of_a_request_with_only_5m_breakpoints_are_priced_as_5m(con: Any) -> None:
    row = cost(con, "writes_only_5m_breakpoints")
    assert (row["cache_write_5m_tokens"], row["cache_write_1h_tokens"]) == (100_000, 0)
    assert row["cost_total"] == pytest.approx((50 + 625_000) / 1e6)


def test_unsplit_writes_with_both_lifetimes_asked_for_are_unpriced_not_guessed(con: Any) -> None:
    row = cost(con, "writes_mixed_breakpoints_split_unknown")
    assert row["cache_write_1h_tokens"] is None and row["cache_write_5m_tokens"] is None
    assert row["cost_total"] is None and row["left_on_table"] is None
    assert row["unpriced_reason"] == "cache_write_ttl_unknown"


def test_a_compacted_response_takes_the_tier_of_its_passes_not_of_their_sum(con: Any) -> None:
    row = cost(con, "compaction_both_passes_under_200k")
    assert row["price_condition"] in (None, "")  # 210,100 summed, but no pass over 200K
    # 60,100 x 3.00 + 150,000 x 0.30 + 2,100 x 15.00
    assert row["cost_total"] == pytest.approx(0.1803 + 0.045 + 0.0315)


def test_a_compacted_response_with_every_pass_over_200k_is_priced_long_context(con: Any) -> None:
    row = cost(con, "compaction_both_passes_over_200k")
    assert row["price_condition"] == "prompt_tokens>200000"
    # 15,000 x 6.00 + 400,000 x 0.60 + 1,000 x 22.50
    assert row["cost_total"] == pytest.approx(0.09 + 0.24 + 0.0225)


def test_passes_on_both_sides_of_the_threshold_leave_the_request_unpriced(con: Any) -> None:
    row = cost(con, "compaction_passes_straddle_200k")
    assert row["cost_total"] is None and row["savings"] is None
    assert row["unpriced_reason"] == "passes_in_different_price_tiers"


def test_openai_writes_before_gpt_5_6_cost_the_miss_price_not_nothing(con: Any) -> None:
    row = cost(con, "openai_write_without_fee")
    assert row["unpriced_reason"] is None
    # 8 uncached + 4,012 written, all at 2.00; 4 out at 8.00: as if nothing were cached.
    assert row["cost_total"] == pytest.approx((4_020 * 2.00 + 4 * 8.00) / 1e6)
    assert row["savings"] == pytest.approx(0.0)


def test_sonnet_4_over_200k_stays_unpriced_until_its_long_context_rate_is_known(con: Any) -> None:
    row = cost(con, "sonnet4_over_200k")
    assert row["price_condition"] == "prompt_tokens>200000"
    assert row["cost_total"] is None
    assert row["unpriced_reason"] == "no_price_for_uncached_input"


def test_the_compaction_sample_keeps_each_pass_prompt() -> None:
    body = (SAMPLES / "anthropic_messages_stream_compaction_cache_read.sse").read_bytes()
    response = messages.parse_response(200, body, "anthropic", True)
    assert response.usage is not None
    # compaction pass: 100 + 55,096 read; message pass: 181.
    assert response.usage.pass_prompt_tokens == [55_196, 181]
    assert response.usage.input_tokens == 55_196 + 181


def test_a_warehouse_written_before_a_column_existed_reads_it_as_null(tmp_path: Path) -> None:
    wh = tiny.write(tmp_path / "warehouse", [ROWS[4]])
    for part in wh.files("requests"):
        table = pq.read_table(part)
        old = table.drop_columns(["largest_pass_prompt_tokens", "smallest_pass_prompt_tokens"])
        pq.write_table(old, part)
    con = sqlmod.connect(wh)
    [(largest,)] = con.sql("SELECT largest_pass_prompt_tokens FROM requests").fetchall()
    assert largest is None
    # priced from input_tokens, as before the column existed: 210,100 > 200K
    assert cost(con, "compaction_both_passes_under_200k")["price_condition"] == (
        "prompt_tokens>200000"
    )
