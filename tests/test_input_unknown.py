"""Input tokens of a request can be unknown while its usage was reported (an OTel span with only
the output count, an impossible prompt count made NULL): every input sum counts the requests it
leaves out, and "usage unknown" keeps meaning "no usage reported at all"."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fixtures.prices import tiny_warehouse as tiny

from pipeline import sql

MON = datetime(2026, 11, 23, 10, tzinfo=UTC)  # ISO week 2026-W48
NEXT_MON = datetime(2026, 11, 30, 10, tzinfo=UTC)  # 2026-W49


def _rows() -> list[dict[str, Any]]:
    return [
        tiny.request("ok", MON, "openai", "gpt-4o", input_tokens=1000, cache_read_tokens=200,
                     output_tokens=50),
        # usage reported, but only the output count: input unknown, usage not "missing"
        {**tiny.request("span", MON, "openai", "gpt-4o", input_tokens=None,
                        cache_read_tokens=None, output_tokens=20), "usage_status": "reported"},
        # no usage at all
        tiny.request("none", MON, "openai", "gpt-4o", input_tokens=None,
                     cache_read_tokens=None, output_tokens=None),
        tiny.request("next", NEXT_MON, "openai", "gpt-4o", input_tokens=500,
                     cache_read_tokens=0, output_tokens=7),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def con(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root: Path = tmp_path_factory.mktemp("input_unknown") / "wh"
    return sql.connect(tiny.write(root, _rows()))


def test_headline_counts_the_requests_left_out_of_the_input_sum_even_with_usage_reported(
    con: Any,
) -> None:
    got = con.sql(
        "SELECT requests_usage_unknown, input_tokens, requests_input_unknown FROM headline"
    ).fetchall()
    # 'span' reported usage, so requests_usage_unknown does not count it; the input count does.
    assert got == [(1, 1500, 2)]


def test_weekly_headline_counts_the_requests_left_out_of_the_input_sum_per_week(
    con: Any,
) -> None:
    got = con.sql(
        "SELECT week, requests_usage_unknown, input_tokens, requests_input_unknown"
        " FROM report_weekly_headline ORDER BY week"
    ).fetchall()
    assert got == [(MON.date(), 1, 1000, 2), (NEXT_MON.date(), 0, 500, 0)]


def test_summary_prints_input_tokens_with_the_requests_whose_input_is_unknown(
    cli, warehouse: Path
) -> None:
    tiny.write(warehouse, _rows())
    result = cli("summary", "-w", str(warehouse))
    assert result.returncode == 0, result.stderr
    assert "  usage unknown:     1\n" in result.stdout
    assert "input tokens:        1,500 (2 requests with unknown input excluded)\n" in result.stdout
