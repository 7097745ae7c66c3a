"""The demo warehouse (Nov 2026 traffic): its totals re-derived by hand from the requests rows.

Prices in force in Nov 2026, per million tokens (miss, hit, output), from the providers' price
pages:
- gpt-4.1 2 / 0.5 / 8 and gpt-4.1-mini 0.4 / 0.1 / 1.6, at any hour;
- deepseek-v4-flash 0.22 / 0.007 / 0.66 off-peak, 0.44 / 0.014 / 1.32 in peak hours
  (01:00-04:00 and 06:00-10:00 UTC, Monday to Friday); deepseek-v4-pro 0.66 / 0.022 / 1.98
  off-peak, 1.32 / 0.044 / 3.96 peak (rows from 2026-08-16T16:00Z). Weekends are off-peak all
  day (DeepSeek's pricing page, from 2026-08-23), so every demo request with usage is priced;
  the only unpriced ones are the streams cut before their usage (input unknown).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from pipeline import sql as sqlmod
from pipeline.demo import write_demo
from pipeline.ingest import ingest
from pipeline.warehouse import Warehouse

PRICES = {  # miss, hit, output per million tokens (openai.csv rows 7 and 8)
    "gpt-4.1-2025-04-14": (2.0, 0.5, 8.0),
    "gpt-4.1-mini-2025-04-14": (0.4, 0.1, 1.6),
}
DEEPSEEK = {  # model: (off-peak, peak) prices (deepseek.csv, from 2026-08-16T16:00Z)
    "deepseek-v4-flash": ((0.22, 0.007, 0.66), (0.44, 0.014, 1.32)),
    "deepseek-v4-pro": ((0.66, 0.022, 1.98), (1.32, 0.044, 3.96)),
}


def _in_peak_hours(ts: datetime) -> bool:
    minute = ts.hour * 60 + ts.minute
    return 60 <= minute < 240 or 360 <= minute < 600


def price_of(model: str, ts: datetime) -> tuple[float, float, float] | None:
    """The hand-derived price row for a demo request, or None when no price is established."""
    if model in PRICES:
        return PRICES[model]
    off_peak, peak = DEEPSEEK[model]
    if not _in_peak_hours(ts):
        return off_peak
    return peak if ts.weekday() < 5 else off_peak


@pytest.fixture(scope="module")
def con(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("demo")
    capture = root / "capture.jsonl"
    write_demo(capture, seed=7, sessions=24)
    wh = Warehouse(root / "warehouse")
    ingest([capture], wh, workers=1)
    return sqlmod.connect(wh)


def test_demo_totals_match_a_hand_computation_from_the_requests(con: Any) -> None:
    rows = con.sql(
        "SELECT model, started_at, input_tokens, cache_read_tokens, output_tokens FROM requests"
    ).fetchall()
    total = savings = 0.0
    priced = unpriced = 0
    for model, ts, inp, read, out in rows:
        price = price_of(model, ts)
        if price is None or inp is None:
            unpriced += 1
            continue
        miss, hit, out_price = price
        cost = ((inp - read) * miss + read * hit + out * out_price) / 1e6
        total += cost
        savings += (inp * miss + out * out_price) / 1e6 - cost
        priced += 1
    got = con.sql(
        "SELECT sum(cost_total), sum(savings), count(cost_total), count(*) - count(cost_total)"
        " FROM request_costs"
    ).fetchall()[0]
    assert got[0] == pytest.approx(total, rel=1e-9)
    assert got[1] == pytest.approx(savings, rel=1e-9)
    assert (got[2], got[3]) == (priced, unpriced)
    assert priced > 0 and unpriced > 0


def test_demo_weekend_peak_hour_deepseek_requests_are_priced_off_peak(con: Any) -> None:
    rows = con.sql(
        "SELECT r.model, r.started_at, r.input_tokens, c.unpriced_reason, c.price_condition"
        " FROM requests AS r JOIN request_costs AS c USING (request_id)"
        " WHERE r.provider = 'deepseek' AND dayofweek(r.started_at) IN (0, 6)"
    ).fetchall()
    weekend_peak = [r for r in rows if _in_peak_hours(r[1])]
    assert weekend_peak, "the demo should include weekend peak-hour DeepSeek traffic"
    for _model, _ts, inp, reason, condition in weekend_peak:
        assert reason == ("input_unknown" if inp is None else None)
        assert condition is None  # the unconditioned off-peak row, not a peak row


def test_demo_summary_reports_coverage_per_currency(con: Any) -> None:
    rel = con.sql("SELECT currency, requests, share_requests_priced FROM cost_summary")
    rows = rel.fetchall()
    assert [r[0] for r in rows] == ["USD", None]
    assert rows[0][2] == pytest.approx(rows[0][1] / (rows[0][1] + rows[1][1]))


def test_demo_left_on_table_is_the_expected_extra_reads_at_miss_minus_hit(con: Any) -> None:
    # Neither provider reports writes here, so moving d tokens from miss to hit saves
    # d x (miss - hit), and a request that read more than expected (d < 0) has 0 left.
    rows = con.sql(
        "SELECT r.model, r.started_at, r.input_tokens, r.cache_read_tokens,"
        " e.expected_read_tokens"
        " FROM requests AS r JOIN expected_cache AS e USING (request_id)"
    ).fetchall()
    left = 0.0
    known = 0
    for model, ts, inp, read, expected in rows:
        price = price_of(model, ts)
        if price is None or inp is None or expected is None:
            continue
        miss, hit, _ = price
        # reads above the expectation leave nothing on the table: 0, never negative
        left += max(min(max(expected, 0), inp) - read, 0) * (miss - hit) / 1e6
        known += 1
    got = con.sql("SELECT sum(left_on_table), count(left_on_table) FROM request_costs").fetchall()[
        0
    ]
    assert got[1] == known
    assert got[0] == pytest.approx(left, rel=1e-9)
