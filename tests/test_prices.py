"""Price tables: shipped CSVs, the check, `prices show`, and the condition language."""

from __future__ import annotations

import csv
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pipeline.prices import loader, resolve, validate
from pipeline.prices.rows import BUCKETS, ConditionError, parse_condition

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "prices"
RESEARCH = Path(__file__).resolve().parents[2] / "shared" / "reference" / "prices-research.csv"


def test_the_shipped_tables_pass_the_check(cli) -> None:
    result = cli("prices", "check")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok: ")
    assert re.search(r"digest [0-9a-f]{64}$", result.stdout.strip())


def test_check_explains_each_problem_with_file_and_line_and_exits_4(cli) -> None:
    bad = FIXTURES / "bad.csv"
    result = cli("prices", "check", "--prices", str(bad))
    assert result.returncode == 4
    lines = result.stderr.splitlines()
    assert any(f"{bad}:3: price row acme/acme-1" in x and "overlaps line 2" in x for x in lines)
    assert any(f"{bad}:4: effective_from is not before effective_to" in x for x in lines)
    assert any(f"{bad}:5: unknown currency 'UDS'" in x for x in lines)
    assert any(f"{bad}:6: input_cache_miss_per_mtok is negative" in x for x in lines)
    assert any(f"{bad}:7: bad time '25:00'" in x for x in lines)
    assert "error: 5 problem(s)" in result.stderr


def test_a_bad_date_names_its_column_file_and_line(tmp_path: Path) -> None:
    header = (FIXTURES / "bad.csv").read_text(encoding="utf-8").splitlines()[0]
    table = tmp_path / "dates.csv"
    table.write_text(
        f"{header}\n"
        "acme,acme-1,2025-13-01,,USD,,1.00,0.10,,,2.00,,\n"
        "acme,acme-2,2025-01-01,2025-02-30T00:00Z,USD,,1.00,0.10,,,2.00,,\n"
        "acme,acme-3,2025-01-01T10:00,,USD,,1.00,0.10,,,2.00,,\n",
        encoding="utf-8",
    )
    problems = [str(p) for p in validate.check(loader.load([table]))]
    assert problems == [
        f"{table}:2: effective_from '2025-13-01' is not a date (YYYY-MM-DD) or a UTC time"
        " (YYYY-MM-DDTHH:MMZ): month must be in 1..12",
        f"{table}:3: effective_to '2025-02-30T00:00Z' is not a date (YYYY-MM-DD) or a UTC time"
        " (YYYY-MM-DDTHH:MMZ): day is out of range for month",
        f"{table}:4: effective_from '2025-01-01T10:00' has no zone; write it in UTC with a Z",
    ]


def test_a_sql_session_refuses_a_broken_price_file(cli, tmp_path: Path) -> None:
    (tmp_path / "wh").mkdir()
    result = cli(
        "sql", "select 1", "-w", str(tmp_path / "wh"), "--prices", str(FIXTURES / "bad.csv")
    )
    assert result.returncode == 4
    assert "prices check" in result.stderr


def test_show_picks_the_offpeak_row_at_night_in_march_2025(cli) -> None:
    result = cli("prices", "show", "deepseek-chat", "--at", "2025-03-01T17:00Z")
    assert result.returncode == 0, result.stderr
    used = [line for line in result.stdout.splitlines() if line.startswith("*")]
    assert len(used) == 1
    assert "deepseek.csv:8" in used[0] and "0.135" in used[0]


def _tiered_table(tmp_path: Path, *conditions: str) -> Path:
    header = (FIXTURES / "bad.csv").read_text(encoding="utf-8").splitlines()[0]
    rows = [f"acme,acme-1,2025-01-01T00:00Z,,USD,{c},1.00,0.10,,,2.00,,x" for c in conditions]
    table = tmp_path / "tiers.csv"
    table.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    return table


def test_show_without_prompt_tokens_says_the_used_row_depends_on_the_prompt_size(
    cli, tmp_path: Path
) -> None:
    table = _tiered_table(tmp_path, "", "prompt_tokens>1000")
    args = ("prices", "show", "acme-1", "--at", "2025-06-01T00:00Z", "--prices", str(table))
    result = cli(*args)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    marked = [(x[0], "prompt_tokens>1000" in x) for x in lines if x.startswith(("* ", "? "))]
    assert marked == [("?", True), ("*", False)]  # best first: the tier, then the base row
    assert any(
        line.startswith("?: used instead of * when the whole prompt reaches its prompt_tokens")
        and "pass --prompt-tokens N" in line
        for line in lines
    )
    # With the prompt size the choice is made: one row, no caveat.
    sized = cli(*args, "--prompt-tokens", "5000").stdout.splitlines()
    marked = [(x[0], "prompt_tokens>1000" in x) for x in sized if x.startswith(("* ", "? "))]
    assert marked == [("*", True)]
    assert not any("--prompt-tokens" in line for line in sized)


def test_check_refuses_a_condition_with_two_prompt_tokens_clauses_naming_file_and_line(
    cli, tmp_path: Path
) -> None:
    table = _tiered_table(tmp_path, "", "prompt_tokens>100; prompt_tokens>=50")
    result = cli("prices", "check", "--prices", str(table))
    assert result.returncode == 4
    assert result.stderr.splitlines()[0] == (
        f"{table}:3: condition 'prompt_tokens>100; prompt_tokens>=50' has two prompt_tokens"
        " clauses; write one (one threshold per row; a tier above it is a row of its own)"
    )
    assert "error: 1 problem(s)" in result.stderr


@pytest.mark.parametrize(
    "text", ["utc_time=00:00-08:00; utc_time=16:30-24:00", "weekday=mon; weekday=sat-sun"]
)
def test_a_condition_repeating_a_clause_kind_is_refused_not_overwritten(text: str) -> None:
    with pytest.raises(ConditionError, match="has two"):
        parse_condition(text)


def test_show_says_a_retired_alias_has_no_price(cli) -> None:
    result = cli("prices", "show", "deepseek-chat", "--at", "2026-11-16T08:00Z")
    assert result.returncode == 4
    assert "no price row in force for 'deepseek-chat'" in result.stderr


def test_list_filters_by_model(cli) -> None:
    result = cli("prices", "list", "--model", "gpt-4.1-mini", "--format", "csv")
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(result.stdout.splitlines()))
    assert [(r["model"], r["input_cache_miss_per_mtok"]) for r in rows] == [("gpt-4.1-mini", "0.4")]


def test_an_offpeak_window_that_wraps_midnight_becomes_two_windows() -> None:
    cond = parse_condition("utc_time=16:30-00:30")
    assert cond.windows == ((0, 1800), (59400, 86400))
    assert cond.holds(datetime(2025, 3, 1, 0, 29, 59, tzinfo=UTC), None) is True
    assert cond.holds(datetime(2025, 3, 1, 0, 30, tzinfo=UTC), None) is False


def test_a_long_context_condition_is_strictly_over_the_threshold() -> None:
    cond = parse_condition("prompt_tokens>200000")
    assert cond.min_prompt_tokens == 200_001
    assert cond.holds(datetime(2025, 3, 1, tzinfo=UTC), 200_000) is False
    assert cond.holds(datetime(2025, 3, 1, tzinfo=UTC), None) is None
    assert parse_condition("prompt_tokens>=272000").min_prompt_tokens == 272_000


def test_an_unknown_condition_is_refused() -> None:
    with pytest.raises(ConditionError):
        parse_condition("region=eu")


def test_python_resolution_matches_the_alias_history_of_deepseek_chat() -> None:
    tables = loader.load()
    at = datetime(2026, 5, 1, tzinfo=UTC)
    res = resolve.resolve(tables, "deepseek", "deepseek-chat", at)
    assert res.model == "deepseek-v4-flash"
    row = resolve.pick(tables, res, at, 1000)
    assert row is not None and row.prices["input_cache_hit_per_mtok"] == 0.0028
    early = resolve.resolve(tables, "deepseek", "deepseek-chat", datetime(2025, 1, 1, tzinfo=UTC))
    assert early.model == "deepseek-chat" and early.alias is None


def test_every_demo_model_resolves_in_november_2026() -> None:
    tables = loader.load()
    at = datetime(2026, 11, 16, 8, tzinfo=UTC)
    priced = {}
    for provider, model in [
        ("openai", "gpt-4.1-2025-04-14"),
        ("openai", "gpt-4.1-mini-2025-04-14"),
        ("deepseek", "deepseek-chat"),
        ("deepseek", "deepseek-reasoner"),
    ]:
        res = resolve.resolve(tables, provider, model, at)
        row = resolve.pick(tables, res, at, 1000)
        priced[model] = row.place.row_id if row else None
    # The research retires the deepseek-chat/-reasoner aliases on 2026-07-24: unpriced, not
    # guessed.
    assert priced == {
        "gpt-4.1-2025-04-14": "openai.csv:7",
        "gpt-4.1-mini-2025-04-14": "openai.csv:8",
        "deepseek-chat": None,
        "deepseek-reasoner": None,
    }


def _numbers(text: str) -> set[float]:
    return {float(n) for n in re.findall(r"(?<![\w.])\d+(?:\.\d+)?", text)}


def test_every_shipped_price_comes_from_the_research_never_invented() -> None:
    if not RESEARCH.exists():
        pytest.skip(f"research CSV not found at {RESEARCH}")
    known = _numbers(RESEARCH.read_text(encoding="utf-8"))
    tables = loader.load()
    for row in tables.prices:
        for bucket in BUCKETS:
            value = row.prices[bucket]
            assert value is None or value in known, f"{row.place.row_id} {bucket}={value}"


def test_every_shipped_row_names_a_source() -> None:
    tables = loader.load()
    for row in tables.prices:
        assert row.source, row.place.row_id
    for alias in tables.aliases:
        assert alias.source, alias.place.row_id
    assert validate.check(tables) == []


def test_list_with_no_matching_rows_names_the_providers_that_have_rows(cli) -> None:
    result = cli("prices", "list", "--provider", "nosuch")
    assert result.returncode == 0
    assert "no price rows match (provider=nosuch" in result.stderr
    assert "anthropic, deepseek, google, openai" in result.stderr
