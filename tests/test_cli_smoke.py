from __future__ import annotations

from pathlib import Path


def test_no_arguments_prints_help_and_does_not_crash(cli) -> None:
    result = cli()
    assert "ingest" in result.stdout
    assert "internal error" not in result.stderr


def test_a_sql_error_is_one_line_on_stderr_with_exit_1(cli, warehouse: Path) -> None:
    result = cli("sql", "select nope_column from requests", "--warehouse", str(warehouse))
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith("error: ")
    assert "nope_column" in result.stderr.splitlines()[0]


def test_views_on_an_empty_warehouse_lists_the_contract_views(cli, warehouse: Path) -> None:
    result = cli("views", "--warehouse", str(warehouse))
    assert result.returncode == 0, result.stderr
    for view in ("requests", "segments", "rejects", "sources"):
        assert f"\n{view}\n" in "\n" + result.stdout
