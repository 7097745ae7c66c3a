"""Price tables: shipped CSVs, the check, `prices show`, and the condition language."""

from __future__ import annotations

import csv
import re
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest

from pipeline.prices import loader, resolve, validate
from pipeline.prices import tables as price_tables
from pipeline.prices.rows import BUCKETS, ConditionError, parse_condition
from pipeline.sql import SqlOptions

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "prices"
# Every published price found, one row per provider/model/period, each with its public source.
PUBLISHED = FIXTURES / "published-prices.csv"


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
    assert any(f"{bad}:3: price row acme/acme-1" in x and f"overlaps {bad}:2" in x for x in lines)
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


def test_a_lower_case_z_is_utc_in_a_price_table_as_in_a_capture() -> None:
    assert loader.parse_timestamp("2025-01-01T10:00z") == loader.parse_timestamp(
        "2025-01-01T10:00Z"
    )
    assert loader.parse_timestamp("2025-01-01t10:00:30z") == datetime(
        2025, 1, 1, 10, 0, 30, tzinfo=UTC
    )


def test_a_sql_session_refuses_a_broken_price_file(cli, tmp_path: Path) -> None:
    (tmp_path / "wh").mkdir()
    result = cli(
        "sql", "select 1", "-w", str(tmp_path / "wh"), "--prices", str(FIXTURES / "bad.csv")
    )
    assert result.returncode == 4
    assert "prices check" in result.stderr


def test_show_picks_the_offpeak_row_at_night_in_march_2025(cli) -> None:
    result = cli(
        "prices", "show", "deepseek-chat", "--provider", "deepseek", "--at", "2025-03-01T17:00Z"
    )
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
    # DeepSeek's own name (Azure, which resells DeepSeek models, still prices a deepseek-chat)
    result = cli(
        "prices", "show", "deepseek-chat", "--provider", "deepseek", "--at", "2026-11-16T08:00Z"
    )
    assert result.returncode == 4
    assert "no price row in force for 'deepseek-chat'" in result.stderr


def test_list_filters_by_model(cli) -> None:
    result = cli(
        "prices", "list", "--model", "gpt-4.1-mini", "--layer", "shipped", "--format", "csv"
    )
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(result.stdout.splitlines()))
    assert [(r["model"], r["input_cache_miss_per_mtok"]) for r in rows] == [("gpt-4.1-mini", "0.4")]
    everything = cli("prices", "list", "--model", "gpt-4.1-mini", "--format", "csv")
    layers = {r["layer"] for r in csv.DictReader(everything.stdout.splitlines())}
    assert layers == {"shipped", "library"}


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


def test_every_shipped_price_is_a_published_price_never_invented() -> None:
    known = _numbers(PUBLISHED.read_text(encoding="utf-8"))
    tables = loader.load()
    for row in (r for r in tables.prices if r.place.layer == "shipped"):  # ours, not the library's
        for bucket in BUCKETS:
            value = row.prices[bucket]
            assert value is None or value in known, f"{row.place.row_id} {bucket}={value}"


def test_every_shipped_row_names_a_source() -> None:
    tables = loader.load()
    for row in (r for r in tables.prices if r.place.layer == "shipped"):
        assert row.source, row.place.row_id
    for alias in tables.aliases:
        assert alias.source, alias.place.row_id
    assert validate.check(tables) == []


def test_list_with_no_matching_rows_names_the_providers_that_have_rows(cli) -> None:
    result = cli("prices", "list", "--provider", "nosuch")
    assert result.returncode == 0
    assert "no price rows match (provider=nosuch" in result.stderr
    assert "anthropic, deepseek, google, openai, and " in result.stderr
    assert "more from genai-prices" in result.stderr


def _table(tmp_path: Path, rows: dict[int, str], name: str = "user.csv") -> Path:
    """A user price table with `rows` at those line numbers; other lines are filler rows."""
    header = (FIXTURES / "bad.csv").read_text(encoding="utf-8").splitlines()[0]
    last = max(rows)
    lines = [header] + [
        rows.get(n, f"acme,filler-{n},2025-01-01T00:00Z,,USD,,1,0.1,,,2,,")
        for n in range(2, last + 1)
    ]
    table = tmp_path / name
    table.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return table


@pytest.mark.parametrize(
    ("first", "second", "both"),
    [
        ("utc_time=00:00-12:00", "utc_time=06:00-18:00", "utc_time=06:00-12:00"),
        ("utc_time=00:00-12:00", "weekday=sat-sun", "utc_time=00:00-12:00; weekday=sat-sun"),
        ("prompt_tokens>200000", "prompt_tokens>=200001", "prompt_tokens>=200001"),
        (
            "utc_time=16:30-00:30; weekday=mon-fri",
            "utc_time=00:00-01:00; weekday=fri-sun",
            "utc_time=00:00-00:30; weekday=fri",
        ),
    ],
)
def test_check_reports_two_rows_of_equal_rank_whose_conditions_can_hold_at_one_instant(
    cli, tmp_path: Path, first: str, second: str, both: str
) -> None:
    table = _table(
        tmp_path,
        {
            2: f"acme,acme-1,2025-01-01T00:00Z,2026-01-01T00:00Z,USD,{first},2,1,,,10,,",
            11: f"acme,acme-1,2025-03-01T00:00Z,,USD,{second},3,1,,,10,,",
        },
    )
    result = cli("prices", "check", "--prices", str(table))
    assert result.returncode == 4
    assert result.stderr.splitlines()[0] == (
        f"{table}:11: price row acme/acme-1 ({second}) [2025-03-01T00:00Z, open) and {table}:2"
        f" ({first}) [2025-01-01T00:00Z, 2026-01-01T00:00Z) both apply at equal rank when"
        f" {both!r} in [2025-03-01T00:00Z, 2026-01-01T00:00Z), so which one prices a request"
        " there hangs on their order; make their conditions disjoint, or give the row that"
        " should win more clauses"
    )
    assert "error: 1 problem(s)" in result.stderr


def test_check_reports_only_the_pairs_that_can_apply_together_at_equal_rank(
    tmp_path: Path,
) -> None:
    table = _table(
        tmp_path,
        {
            2: "acme,acme-1,2025-01-01T00:00Z,,USD,utc_time=00:00-12:00,2,1,,,10,,",
            3: "acme,acme-1,2025-01-01T00:00Z,,USD,utc_time=12:00-24:00,2,1,,,10,,",  # disjoint
            4: "acme,acme-1,2025-01-01T00:00Z,,USD,,2,1,,,10,,",  # the default: fewer clauses
            5: "acme,acme-1,2025-01-01T00:00Z,,USD,utc_time=06:00-18:00; weekday=mon,2,1,,,10,,",
            6: "acme,acme-2,2025-01-01T00:00Z,,USD,utc_time=01:00-04:00; weekday=mon-fri,2,1,,,1,,",
            7: "acme,acme-2,2025-01-01T00:00Z,,USD,utc_time=01:00-04:00; weekday=sat-sun,,,,,,,",
            8: "acme,acme-2,2025-01-01T00:00Z,,USD,utc_time=03:00-05:00; weekday=fri-sat,3,1,,,1,,",
        },
    )
    problems = validate.check(loader.load([table]))
    assert [(p.line, p.message.split(" both apply")[0].split(" and ")[-1]) for p in problems] == [
        (8, f"{table}:6 (utc_time=01:00-04:00; weekday=mon-fri) [2025-01-01T00:00Z, open)"),
        (8, f"{table}:7 (utc_time=01:00-04:00; weekday=sat-sun) [2025-01-01T00:00Z, open)"),
    ]
    assert "when 'utc_time=03:00-04:00; weekday=fri'" in problems[0].message
    assert "when 'utc_time=03:00-04:00; weekday=sat'" in problems[1].message


def test_check_accepts_rows_whose_common_days_miss_each_others_weekdays(tmp_path: Path) -> None:
    # Both in force only on Wed 2025-01-01 and Thu 01-02: the Saturday row cannot apply then.
    table = _table(
        tmp_path,
        {
            2: "acme,acme-1,2024-01-01T00:00Z,2025-01-03T00:00Z,USD,utc_time=00:00-12:00,2,1,,,10,"
            ",",
            3: "acme,acme-1,2025-01-01T00:00Z,,USD,weekday=sat,3,1,,,10,,",
        },
    )
    assert validate.check(loader.load([table])) == []
    # One more day of overlap reaches Saturday 2025-01-04 (hours 00-12): now they collide.
    later = _table(
        tmp_path,
        {
            2: "acme,acme-1,2024-01-01T00:00Z,2025-01-04T06:00Z,USD,utc_time=00:00-12:00,2,1,,,10,"
            ",",
            3: "acme,acme-1,2025-01-01T00:00Z,,USD,weekday=sat,3,1,,,10,,",
        },
        "later.csv",
    )
    assert [p.line for p in validate.check(loader.load([later]))] == [3]


@pytest.mark.parametrize(
    ("cell", "reason"),
    [
        ("inf", "'inf' is not a finite number"),
        ("nan", "'nan' is not a finite number"),
        ("1e400", "'1e400' is not a finite number"),
        ("-0.5", "is negative: -0.5"),
        ("5e12", "5e12 is over 1e+09 per million tokens; prices are per million tokens"),
    ],
)
def test_a_price_that_is_not_finite_or_is_absurd_is_refused_with_file_and_line(
    cli, tmp_path: Path, cell: str, reason: str
) -> None:
    table = _table(tmp_path, {2: f"acme,acme-1,2025-01-01T00:00Z,,USD,,1,0.1,,,{cell},,"})
    checked = cli("prices", "check", "--prices", str(table))
    assert checked.returncode == 4
    assert checked.stderr.splitlines()[0] == f"{table}:2: output_per_mtok {reason}"
    # Any command loading the table refuses it the same way, before pricing anything.
    shown = cli("prices", "show", "acme-1", "--at", "2025-06-01T00:00Z", "--prices", str(table))
    assert shown.returncode == 4
    assert f"{table}:2: output_per_mtok {reason}" in shown.stderr


def test_show_prices_a_dated_id_with_a_user_row_for_it_not_through_the_shipped_alias(
    cli, tmp_path: Path
) -> None:
    table = _table(
        tmp_path, {2: "anthropic,claude-sonnet-4-5-20250929,2025-11-01,,USD,,1,0.1,1.25,2,5,,"}
    )
    args = ("prices", "show", "claude-sonnet-4-5-20250929", "--provider", "anthropic")
    result = cli(*args, "--at", "2025-12-01T00:00Z", "--prices", str(table))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == (
        f"anthropic/claude-sonnet-4-5-20250929 (priced as itself: {table}:2 is a user row for"
        " this exact name, which wins over alias model_aliases.csv:15: claude-sonnet-4-5-20250929"
        " -> claude-sonnet-4-5) at 2025-12-01T00:00:00Z"
    )
    used = [line.split() for line in lines if line.startswith("*")]
    assert [u[3:5] + u[-10:-5] for u in used] == [
        ["anthropic", "claude-sonnet-4-5-20250929", "1", "0.1", "1.25", "2", "5"]
    ]
    # Before the user row starts, the shipped alias prices the id, and says why.
    early = cli(*args, "--at", "2025-10-15T00:00Z", "--prices", str(table))
    assert early.returncode == 0, early.stderr
    assert early.stdout.splitlines()[0] == (
        "anthropic/claude-sonnet-4-5 (alias model_aliases.csv:15: claude-sonnet-4-5-20250929 ->"
        " claude-sonnet-4-5; no price row for the exact name is in force) at 2025-10-15T00:00:00Z"
    )
    used = [line.split() for line in early.stdout.splitlines() if line.startswith("*")]
    assert [u[1] for u in used] == ["anthropic.csv:12"]


def test_resolve_takes_an_exact_row_over_an_alias_of_its_layer_or_a_lower_one(
    tmp_path: Path,
) -> None:
    (tmp_path / "aliases.csv").write_text(
        "provider,alias,model,effective_from,effective_to,note,source\n"
        "openai,gpt-4.1,gpt-4.1-mini,,,ours,test\n",
        encoding="utf-8",
    )
    _table(tmp_path, {2: "anthropic,claude-sonnet-4-5-20250929,2025-11-01,,USD,,1,0.1,1.25,2,5,,"})
    tables = loader.load([tmp_path])
    at = datetime(2025, 12, 1, tzinfo=UTC)
    # A user row for the dated id beats the shipped alias model_aliases.csv:15.
    dated = resolve.resolve(tables, "anthropic", "claude-sonnet-4-5-20250929", at)
    assert (dated.model, dated.alias) == ("claude-sonnet-4-5-20250929", None)
    assert dated.skipped_alias is not None and dated.skipped_alias.place.row_id == (
        "model_aliases.csv:15"
    )
    row = resolve.pick(tables, dated, at, 1000)
    assert row is not None and row.place.row_id == f"{tmp_path / 'user.csv'}:2"
    # A user alias still beats the shipped row for the exact name (openai.csv:7).
    aliased = resolve.resolve(tables, "openai", "gpt-4.1", at)
    assert aliased.model == "gpt-4.1-mini" and aliased.alias is not None
    assert aliased.exact_row is not None and aliased.exact_row.place.row_id == "openai.csv:7"


def test_check_reports_an_alias_that_a_row_of_its_own_layer_for_the_same_name_shadows(
    tmp_path: Path,
) -> None:
    (tmp_path / "a_aliases.csv").write_text(
        "provider,alias,model,effective_from,effective_to,note,source\n"
        "acme,acme-1-2025,acme-1,2025-06-01,,,\n",
        encoding="utf-8",
    )
    _table(
        tmp_path,
        {
            2: "acme,acme-1,2025-01-01T00:00Z,,USD,,1,0.1,,,2,,",
            3: "acme,acme-1-2025,2025-01-01T00:00Z,2025-07-01T00:00Z,USD,,1,0.1,,,2,,",
        },
        "b_prices.csv",
    )
    problems = [str(p) for p in validate.check(loader.load([tmp_path]))]
    assert problems == [
        f"{tmp_path / 'a_aliases.csv'}:2: alias acme/acme-1-2025 -> acme-1 [2025-06-01T00:00Z,"
        f" open) is not used while price row {tmp_path / 'b_prices.csv'}:3 [2025-01-01T00:00Z,"
        " 2025-07-01T00:00Z) for acme-1-2025 itself is in force (a row for the exact name wins"
        " over an alias of its layer); end one of them"
    ]


def test_a_session_reads_a_price_file_again_once_it_changed(tmp_path: Path) -> None:
    # sessions share the loaded tables while the files stay as they were
    header = (
        "provider,model,effective_from,effective_to,currency,condition,input_cache_miss_per_mtok,"
        "input_cache_hit_per_mtok,cache_write_5m_per_mtok,cache_write_1h_per_mtok,"
        "output_per_mtok,notes,source\n"
    )
    table = tmp_path / "mine.csv"
    options = SqlOptions(prices_paths=(table,))

    def user_models() -> list[str]:
        con = duckdb.connect()
        price_tables.register(con, options)
        rows = con.execute(
            "SELECT model FROM price_rows_source WHERE file = ? ORDER BY model", [str(table)]
        ).fetchall()
        con.close()
        return [m for (m,) in rows]

    table.write_text(header + "openai,mine-a,2025-01-01,,USD,,1,0.1,,,2,,\n", encoding="utf-8")
    assert user_models() == ["mine-a"]
    assert user_models() == ["mine-a"]
    table.write_text(header + "openai,mine-bb,2025-01-01,,USD,,1,0.1,,,2,,\n", encoding="utf-8")
    assert user_models() == ["mine-bb"]
