"""A provider that resells another's models (Vertex AI's Claude is Anthropic's in the price
library) is priced as the library looks up: by its own models first, by the reseller's source
only for a name none of its own matches. Expected costs are worked out by hand from the
library's rows named in the comments (prices per million tokens)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from conftest import tiny_warehouse

from pipeline import sql as sqlmod

tiny = tiny_warehouse

MARCH = datetime(2026, 3, 1, 12, tzinfo=UTC)


def test_a_resold_models_long_context_tier_does_not_outrank_the_providers_own_row(
    tmp_path: Path,
) -> None:
    # genai-prices: Google's own `*claude-sonnet-4-6*` (3.00 in / 0.30 read / 15.00 out, no
    # tier) matches; Anthropic's row, Google's fallback, has a `prompt_tokens>200000` tier at
    # 6.00 / 0.60 / 22.50 that outranked it by its more specific condition (1.2825 USD).
    # 300,000 in, 100,000 of them read, 1,000 out:
    # 200,000 x 3.00 + 100,000 x 0.30 + 1,000 x 15.00 = 645,000 per million = 0.645 USD.
    rows = [
        tiny.request(name, MARCH, "google", name, input_tokens=300_000,
                     cache_read_tokens=100_000, cache_write_tokens=0, output_tokens=1_000)
        for name in ("claude-sonnet-4-6", "claude-sonnet-4-6@20260217")
    ]  # fmt: skip
    con = sqlmod.connect(tiny.write(tmp_path / "wh", rows))
    got = con.execute(
        "SELECT request_id, round(cost_total, 6), price_layer FROM request_costs ORDER BY 1"
    ).fetchall()
    assert got == [
        ("claude-sonnet-4-6", 0.645, "library"),
        ("claude-sonnet-4-6@20260217", 0.645, "library"),
    ]


def test_a_name_only_the_resold_source_knows_is_still_priced_by_it(tmp_path: Path) -> None:
    # Azure OpenAI's own list in the library does not name gpt-4.1-nano; OpenAI's, its
    # fallback, does: 0.10 in / 0.025 read / 0.40 out. 10,000 in, 4,000 read, 1,000 out:
    # 6,000 x 0.10 + 4,000 x 0.025 + 1,000 x 0.40 = 1,100 per million = 0.0011 USD.
    rows = [
        tiny.request("nano", MARCH, "azure_openai", "gpt-4.1-nano", input_tokens=10_000,
                     cache_read_tokens=4_000, cache_write_tokens=0, output_tokens=1_000)
    ]  # fmt: skip
    con = sqlmod.connect(tiny.write(tmp_path / "wh", rows))
    assert con.execute("SELECT round(cost_total, 8) FROM request_costs").fetchall() == [(0.0011,)]
