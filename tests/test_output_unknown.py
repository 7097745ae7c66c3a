"""Output tokens of a request can be unknown while its input is known (an Anthropic or Gemini
stream cut after the input counts arrived): every output sum counts the requests it leaves out."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fixtures.prices import tiny_warehouse as tiny

from pipeline import sql

MON = datetime(2026, 11, 23, 10, tzinfo=UTC)  # ISO week 2026-W48
NEXT_MON = datetime(2026, 11, 30, 10, tzinfo=UTC)  # 2026-W49


@pytest.fixture(scope="module")
def con(tmp_path_factory: pytest.TempPathFactory) -> Any:
    rows = [
        tiny.request("ok", MON, "openai", "gpt-4o", input_tokens=1000, cache_read_tokens=200,
                     output_tokens=50),
        # usage reported (input side), output never arrived: the stream was cut
        tiny.request("cut", MON, "anthropic", "claude-sonnet-4-5", input_tokens=2000,
                     cache_read_tokens=0, output_tokens=None),
        # no usage at all
        tiny.request("none", MON, "openai", "gpt-4o", input_tokens=None,
                     cache_read_tokens=None, output_tokens=None),
        tiny.request("next", NEXT_MON, "openai", "gpt-4o", input_tokens=500,
                     cache_read_tokens=0, output_tokens=7),
    ]  # fmt: skip
    root: Path = tmp_path_factory.mktemp("output_unknown") / "wh"
    return sql.connect(tiny.write(root, rows))


def test_headline_counts_the_requests_left_out_of_the_output_sum(con: Any) -> None:
    got = con.sql(
        "SELECT requests_usage_unknown, output_tokens, requests_output_unknown FROM headline"
    ).fetchall()
    # 'cut' reported its usage, so requests_usage_unknown does not count it; the new column does.
    assert got == [(1, 57, 2)]


def test_weekly_headline_counts_the_requests_left_out_of_the_output_sum_per_week(
    con: Any,
) -> None:
    got = con.sql(
        "SELECT week, requests_usage_unknown, output_tokens, requests_output_unknown"
        " FROM report_weekly_headline ORDER BY week"
    ).fetchall()
    assert got == [(MON.date(), 1, 50, 2), (NEXT_MON.date(), 0, 7, 0)]


def test_cost_summary_counts_the_requests_left_out_of_the_output_sum_per_row(con: Any) -> None:
    got = con.sql(
        "SELECT currency, requests, output_tokens, requests_output_unknown FROM cost_summary"
        " ORDER BY currency NULLS LAST"
    ).fetchall()
    # Priced: 'ok' and 'next'; unpriced: 'cut' (output_unknown) and 'none' (input_unknown).
    assert got == [("USD", 2, 57, 0), (None, 2, None, 2)]


def test_cost_summary_counts_the_requests_left_out_of_its_input_and_cache_read_sums(
    tmp_path: Path,
) -> None:
    rows = [
        tiny.request("ok", MON, "openai", "gpt-4o", input_tokens=1000, cache_read_tokens=200,
                     output_tokens=50),
        # input reported, cache read not: unknown, not a reported 0
        tiny.request("noread", MON, "openai", "gpt-4o", input_tokens=800,
                     cache_read_tokens=None, output_tokens=10),
        tiny.request("none", MON, "openai", "gpt-4o", input_tokens=None,
                     cache_read_tokens=None, output_tokens=None),
    ]  # fmt: skip
    con = sql.connect(tiny.write(tmp_path / "wh", rows))
    got = con.sql(
        "SELECT currency, requests, input_tokens, requests_input_unknown, cache_read_tokens,"
        " requests_cache_read_unknown FROM cost_summary ORDER BY currency NULLS LAST"
    ).fetchall()
    assert got == [("USD", 1, 1000, 0, 200, 0), (None, 2, 800, 1, None, 2)]
