"""Golden Vega-Lite specs of every chart (`chart.to_dict()`), from fixed rows, TZ=UTC.

Regenerate after an intended change with `UPDATE_GOLDEN=1 pytest tests/test_report_golden.py`
and review the diff: the spec is what the reader sees (titles, axes, units, tooltips).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_report_support import EVIL

from pipeline.reports.section import spec
from pipeline.reports.sections import (
    breaks,
    conversation_turns,
    cost_split,
    hit_ratio,
    latency,
    length_buckets,
    prefix_stability,
    provider_gap,
)

GOLDEN = Path(__file__).resolve().parent / "golden" / "report"

HIT_RATIO_ROWS = [
    {
        "week": "2026-11-23",
        "day": "2026-11-23",
        "series": "deepseek · deepseek-chat",
        "provider": "deepseek",
        "model": "deepseek-chat",
        "requests": 1,
        "ratio_read_tokens": 800,
        "ratio_input_tokens": 1000,
        "hit_ratio": 0.8,
        "requests_excluded_from_ratio": 0,
    },
    {
        "week": "2026-11-23",
        "day": "2026-11-24",
        "series": f"openai · {EVIL}",
        "provider": "openai",
        "model": EVIL,
        "requests": 1,
        "ratio_read_tokens": 1000,
        "ratio_input_tokens": 5000,
        "hit_ratio": 0.2,
        "requests_excluded_from_ratio": 0,
    },
]
LATENCY_ROWS = [
    {
        "week": "2026-11-23",
        "delivery": "not streamed",
        "read_share_from": 0.5,
        "read_share_to": 0.6,
        "requests": 1,
        "ttft_p50_ms": 2000.0,
        "ttft_p90_ms": 2000.0,
        "mean_input_tokens": 3000.0,
    },
    {
        "week": "2026-11-23",
        "delivery": "streamed",
        "read_share_from": 0.8,
        "read_share_to": 0.9,
        "requests": 1,
        "ttft_p50_ms": 300.0,
        "ttft_p90_ms": 300.0,
        "mean_input_tokens": 1000.0,
    },
]
LENGTH_ROWS = [
    {
        "week": "2026-11-23",
        "bucket_order": 2,
        "bucket": "1K-4K",
        "requests": 2,
        "requests_in_ratio": 1,
        "ratio_read_tokens": 1500,
        "ratio_input_tokens": 3000,
        "hit_ratio": 0.5,
    },
    {
        "week": "2026-11-23",
        "bucket_order": 1,
        "bucket": "under 1K",
        "requests": 1,
        "requests_in_ratio": 1,
        "ratio_read_tokens": 800,
        "ratio_input_tokens": 1000,
        "hit_ratio": 0.8,
    },
]

COST_ROWS = [
    {
        "week": "2026-11-23",
        "day": "2026-11-23",
        "currency": "USD",
        "part_order": order,
        "part": part,
        "cost": cost,
        "cost_day": 0.66,
        "cost_without_cache_day": 1.2,
        "requests_priced": 1,
        "requests_unpriced_day": 0,
    }
    for order, part, cost in [
        (1, "uncached input", 0.4),
        (2, "cache read", 0.06),
        (3, "cache write", 0.0),
        (4, "output", 0.2),
    ]
]

BREAK_ROWS = [
    {
        "week": "2026-11-23",
        "cause": "system_changed",
        "breaks": 2,
        "tokens_lost": 800,
        "breaks_tokens_unknown": 0,
        "conversations": 1,
    },
    {
        "week": "2026-11-23",
        "cause": "cold_start",
        "breaks": 2,
        "tokens_lost": 0,
        "breaks_tokens_unknown": 0,
        "conversations": 2,
    },
]
GAP_ROWS = [
    {
        "week": "2026-11-23",
        "series": "openai · gpt",
        "requests": 4,
        "requests_unknown": 1,
        "expected_read_tokens": 3328,
        "reported_read_tokens": 2560,
        "gap_tokens": 768,
        "requests_short": 1,
        "delivered_ratio": 0.7692307692307693,
    },
]
STABILITY_ROWS = [
    {
        "week": "2026-11-23",
        "agent": "bot",
        "part": "system",
        "turns": 40,
        "changed_turns": 20,
        "change_rate": 0.5,
    },
    {
        "week": "2026-11-23",
        "agent": "bot",
        "part": "tools",
        "turns": 40,
        "changed_turns": 0,
        "change_rate": 0.0,
    },
]
TURN_ROWS = [
    {
        "conversation_id": "A",
        "turn": 1,
        "request_id": "r1",
        "started_at": "2026-11-23T10:00:00+00:00",
        "agent": "bot",
        "provider": "deepseek",
        "model": "deepseek-chat",
        "input_tokens": 1000,
        "cache_read_tokens": 0,
        "read_tokens": 0,
        "miss_tokens": 1000,
        "expected_read_tokens": None,
        "cause": "cold_start",
        "change_class": None,
        "changed_kind": None,
        "tokens_lost": 0,
        "excerpt": None,
    },
    {
        "conversation_id": "A",
        "turn": 2,
        "request_id": "r2",
        "started_at": "2026-11-23T10:01:00+00:00",
        "agent": "bot",
        "provider": "deepseek",
        "model": "deepseek-chat",
        "input_tokens": 2000,
        "cache_read_tokens": 500,
        "read_tokens": 500,
        "miss_tokens": 1500,
        "expected_read_tokens": 896,
        "cause": "system_changed",
        "change_class": "timestamp",
        "changed_kind": "system",
        "tokens_lost": 400,
        "excerpt": EVIL,
    },
]

CASES = {
    "breaks": lambda: breaks.chart(BREAK_ROWS),
    "provider_gap": lambda: provider_gap.chart(GAP_ROWS),
    "prefix_stability": lambda: prefix_stability.chart(STABILITY_ROWS),
    "conversation_turns": lambda: conversation_turns.chart(TURN_ROWS),
    "cost_split": lambda: cost_split.chart(COST_ROWS, "USD"),
    "hit_ratio": lambda: hit_ratio.chart(HIT_RATIO_ROWS),
    "latency": lambda: latency.chart(LATENCY_ROWS),
    "length_buckets": lambda: length_buckets.chart(LENGTH_ROWS),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_chart_spec_matches_its_golden_file(name: str) -> None:
    got = spec(CASES[name]())
    path = GOLDEN / f"{name}.json"
    if os.environ.get("UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(got, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    assert got == json.loads(path.read_text(encoding="utf-8"))


def test_the_length_chart_orders_buckets_by_length_not_by_name() -> None:
    x = spec(length_buckets.chart(LENGTH_ROWS))["encoding"]["x"]
    assert x["sort"] == ["under 1K", "1K-4K"]


def test_the_hit_ratio_chart_shows_every_utc_day_of_the_week_and_percent() -> None:
    chart = spec(hit_ratio.chart(HIT_RATIO_ROWS))
    enc = chart["encoding"]
    # the rows' UTC days (2026-11-23 is a Monday), each day of the week on the axis
    week = ["Mon 23 Nov", "Tue 24 Nov", "Wed 25 Nov", "Thu 26 Nov", "Fri 27 Nov", "Sat 28 Nov",
            "Sun 29 Nov"]  # fmt: skip
    assert (enc["x"]["field"], enc["x"]["sort"], enc["x"]["scale"]["domain"]) == (
        "day_label",
        week,
        week,
    )
    assert chart["mark"]["invalid"] == "break-paths-show-domains"
    assert enc["y"]["axis"]["format"] == "%"
    assert enc["y"]["scale"]["domain"] == [0, 1]


def test_the_breaks_chart_puts_the_costliest_cause_on_top() -> None:
    y = spec(breaks.chart(BREAK_ROWS))["layer"][0]["encoding"]["y"]
    assert y["sort"] == ["system_changed", "cold_start"]
