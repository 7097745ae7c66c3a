"""A request from before its provider offered prompt caching reported no cache read because
there was none: it is priced with a read of 0 (the requests row keeps NULL, what was reported),
while the same gap after caching began stays unpriced as cache_read_unknown."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import tiny_warehouse

from pipeline import sql as sqlmod

tiny = tiny_warehouse


def test_a_read_absent_before_caching_began_is_priced_as_zero_and_after_it_is_unknown(
    tmp_path: Path,
) -> None:
    rows = [
        # 2024-09-20: OpenAI's prompt caching began on 2024-10-01
        tiny.request("sept", datetime(2024, 9, 20, 12, tzinfo=UTC), "openai",
                     "gpt-4o-2024-08-06", input_tokens=5_000, cache_read_tokens=None,
                     output_tokens=300),
        tiny.request("oct", datetime(2024, 10, 20, 12, tzinfo=UTC), "openai",
                     "gpt-4o-2024-08-06", input_tokens=5_000, cache_read_tokens=None,
                     output_tokens=300),
        # Anthropic's began on 2024-08-14
        tiny.request("july", datetime(2024, 7, 1, 12, tzinfo=UTC), "anthropic",
                     "claude-3-5-sonnet-20240620", input_tokens=10_000,
                     cache_read_tokens=None, output_tokens=1_000),
    ]  # fmt: skip
    con = sqlmod.connect(tiny.write(tmp_path / "wh", rows))
    got = {
        rid: (read, before, cost, reason)
        for rid, read, before, cost, reason in con.sql(
            "SELECT request_id, cache_read_tokens, read_before_caching, cost_total,"
            " unpriced_reason FROM request_costs"
        ).fetchall()
    }
    # gpt-4o-2024-08-06 before caching: 2.50 in / 10.00 out per million:
    # 5,000 x 2.50 + 300 x 10.00 = 0.0125 + 0.003
    assert got["sept"][:2] == (0, True)
    assert got["sept"][2] == pytest.approx(0.0155, rel=1e-12)
    assert got["oct"] == (None, False, None, "cache_read_unknown")
    assert got["july"][:2] == (0, True)
    assert got["july"][2] is not None
    ((kept,),) = con.sql("SELECT count(*) FROM requests WHERE cache_read_tokens IS NULL").fetchall()
    assert kept == 3  # what was reported is kept
