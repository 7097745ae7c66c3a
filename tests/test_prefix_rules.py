"""Cache rules are data: the built-in table picks the rule in force by provider, model and day;
a user's rule file wins over it; expected reads follow the rule's minimum and granularity."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from pipeline import cache_rules
from pipeline.errors import InputError
from pipeline.sql import SqlOptions

HEADER = ",".join(cache_rules.COLUMNS)


def _rules(options: SqlOptions) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    cache_rules.register(con, options)
    return con


def _pick(con: duckdb.DuckDBPyConnection, provider: str, model: str, day: str) -> tuple:
    con.execute("CREATE OR REPLACE TEMP TABLE requests (provider VARCHAR, model VARCHAR, day DATE)")
    con.execute("INSERT INTO requests VALUES (?, ?, ?)", [provider, model, day])
    sql_text = Path(__file__).resolve().parent.parent / "queries" / "cache_rule_match.sql"
    row = con.execute(
        f"SELECT rule_id, min_tokens, granularity_tokens FROM ({sql_text.read_text()})"
    ).fetchone()
    assert row is not None
    return tuple(row)


def test_the_built_in_rules_follow_each_providers_published_dates_and_minimums() -> None:
    con = _rules(SqlOptions())
    assert _pick(con, "openai", "gpt-4o", "2024-09-30") == ("openai-none", None, None)
    assert _pick(con, "openai", "gpt-4o", "2024-10-01") == ("openai", 1024, 128)
    assert _pick(con, "anthropic", "claude-haiku-4-5-20251001", "2026-01-05") == (
        "anthropic-haiku-4-5",
        4096,
        1,
    )
    assert _pick(con, "deepseek", "deepseek-chat", "2025-06-01") == ("deepseek-64", 64, 64)
    assert _pick(con, "deepseek", "deepseek-chat", "2026-04-24") == ("deepseek-units", None, 1)


def test_a_user_rule_wins_over_the_built_in_one(tmp_path: Path) -> None:
    user = tmp_path / "mine.csv"
    user.write_text(HEADER + "\nmy-openai,openai,gpt-4o*,,,prefix,2048,256,600,,86400,,mine\n")
    con = _rules(SqlOptions(rules_paths=(user,)))
    assert _pick(con, "openai", "gpt-4o", "2025-01-01") == ("my-openai", 2048, 256)
    assert _pick(con, "openai", "gpt-4.1", "2025-01-01") == ("openai", 1024, 128)


def test_a_rule_file_with_an_unknown_unit_model_is_refused_with_a_hint(tmp_path: Path) -> None:
    user = tmp_path / "bad.csv"
    user.write_text(HEADER + "\nx,openai,*,,,magic,1,1,1,,1,,\n")
    with pytest.raises(InputError, match="unknown unit_model"):
        _rules(SqlOptions(rules_paths=(user,)))
