from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from fixtures.prices import tiny_warehouse as tiny


def test_no_arguments_prints_help_and_does_not_crash(cli) -> None:
    result = cli()
    assert "ingest" in result.stdout
    assert "internal error" not in result.stderr


def test_a_sql_error_is_one_line_on_stderr_with_exit_1(cli, warehouse: Path) -> None:
    warehouse.mkdir()
    result = cli("sql", "select nope_column from requests", "--warehouse", str(warehouse))
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith("error: ")
    assert "nope_column" in result.stderr.splitlines()[0]


def test_views_on_an_empty_warehouse_lists_the_contract_views(cli, warehouse: Path) -> None:
    warehouse.mkdir()
    result = cli("views", "--warehouse", str(warehouse))
    assert result.returncode == 0, result.stderr
    for view in ("requests", "segments", "rejects", "sources"):
        assert f"\n{view}\n" in "\n" + result.stdout


@pytest.mark.parametrize(
    "command",
    [("sql", "select 1"), ("views",), ("summary",), ("report", "weekly")],
    ids=lambda c: " ".join(c),
)
def test_a_command_reading_a_missing_warehouse_names_it_and_exits_not_found(
    cli, tmp_path: Path, command: tuple[str, ...]
) -> None:
    missing = tmp_path / "no" / "such"
    result = cli(*command, "--warehouse", str(missing))
    assert result.returncode == 5, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0] == f"error: no warehouse at {missing}"
    assert lines[1].startswith(
        f"hint: create it with `cacheaudit ingest FILE... --warehouse {missing}`"
    )
    assert not missing.exists()


def test_sql_on_an_existing_empty_warehouse_directory_still_answers(cli, warehouse: Path) -> None:
    warehouse.mkdir()
    result = cli("sql", "select count(*) as n from requests", "-w", str(warehouse), "-f", "csv")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["n", "0"]


def test_summary_says_input_is_unknown_and_on_how_many_requests_instead_of_zero(
    cli, warehouse: Path
) -> None:
    at = datetime(2026, 11, 30, 10, tzinfo=UTC)
    rows = [
        tiny.request(f"r{i}", at, "openai", "gpt-4o", input_tokens=None,
                     cache_read_tokens=None, output_tokens=None)
        for i in range(3)
    ]  # fmt: skip
    tiny.write(warehouse, rows)
    result = cli("summary", "-w", str(warehouse))
    assert result.returncode == 0, result.stderr
    assert "input tokens:        unknown (3 requests with input unknown)" in result.stdout
    assert "cache read tokens:   unknown (3 requests with input or cache read unknown)" in (
        result.stdout
    )
