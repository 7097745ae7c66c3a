"""A mistake in the user's SQL is the user's error: DuckDB's message on one line, exit 1. Only a
real bug (DuckDB's internal errors) says "bug" and exits 70."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest
from fixtures.prices import tiny_warehouse as tiny

from pipeline import sql_run
from pipeline.errors import QueryError


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_an_impossible_date_in_a_filter_is_duckdbs_message_on_one_line_with_exit_1(
    cli, warehouse: Path, fmt: str
) -> None:
    # DuckDB converts the literal while it reads rows: an empty warehouse would never reach it.
    at = datetime(2026, 11, 30, 10, tzinfo=UTC)
    tiny.write(warehouse, [tiny.request("r1", at, "openai", "gpt-4o", input_tokens=10,
                                        cache_read_tokens=0, output_tokens=1)])  # fmt: skip
    query = "select * from requests where started_at > '2026-13-01'"
    result = cli("sql", query, "--warehouse", str(warehouse), "--format", fmt)
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines == ['error: Conversion Error: timestamp field value out of range: "2026-13-01"'], (
        result.stderr
    )
    assert "bug" not in result.stderr


def test_a_value_that_fails_while_rows_are_read_is_a_user_error_also_with_out(
    cli, warehouse: Path, tmp_path: Path
) -> None:
    warehouse.mkdir()
    out = tmp_path / "x.parquet"
    result = cli(
        "sql", "select 'x'::int as n", "-w", str(warehouse), "-f", "parquet", "-o", str(out)
    )
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == [
        "error: Conversion Error: Could not convert string 'x' to INT32"
    ]


def test_a_syntax_error_keeps_the_hint_to_the_views_and_says_nothing_of_a_bug(
    cli, warehouse: Path
) -> None:
    warehouse.mkdir()
    result = cli("sql", "selec 1", "-w", str(warehouse))
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        'error: Parser Error: syntax error at or near "selec"',
        "hint: `cacheaudit views` lists views and columns",
    ]


def test_a_file_the_statement_reads_that_does_not_exist_is_a_user_error(
    cli, warehouse: Path, tmp_path: Path
) -> None:
    warehouse.mkdir()
    missing = tmp_path / "none.csv"
    result = cli("sql", f"select * from read_csv('{missing}')", "-w", str(warehouse))
    assert result.returncode == 1
    assert str(missing) in result.stderr.splitlines()[0]
    assert "bug" not in result.stderr


def test_duckdbs_internal_error_is_not_passed_off_as_the_users_mistake() -> None:
    with pytest.raises(duckdb.InternalException), sql_run.statement_errors():
        raise duckdb.InternalException("INTERNAL Error: an assertion failed")
    with pytest.raises(QueryError), sql_run.statement_errors():
        raise duckdb.BinderException("Binder Error: no column")
