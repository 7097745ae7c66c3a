from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES
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
    [
        ("sql", "select 1"),
        ("views",),
        ("summary",),
        ("report", "weekly"),
        ("build",),
        ("diagnose",),
    ],
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


@pytest.mark.parametrize("command", ["build", "diagnose", "summary"])
def test_an_empty_directory_is_a_warehouse_with_nothing_ingested_yet_for_every_command(
    cli, warehouse: Path, command: str
) -> None:
    # summary took an empty directory as an empty warehouse while build and diagnose said
    # there was no warehouse at all; build writes nothing into it
    warehouse.mkdir()
    result = cli(command, "-w", str(warehouse))
    assert result.returncode == 0, result.stderr
    first = result.stderr.splitlines()[0]
    assert (
        first == f"{warehouse} holds no requests yet: run `cacheaudit ingest FILE -w {warehouse}`"
    )
    assert list(warehouse.iterdir()) == []


def test_sql_on_an_existing_empty_warehouse_directory_still_answers(cli, warehouse: Path) -> None:
    warehouse.mkdir()
    result = cli("sql", "select count(*) as n from requests", "-w", str(warehouse), "-f", "csv")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["n", "0"]


def _summary(cli: Any, warehouse: Path, rows: list[Any]) -> str:
    """What `cacheaudit summary` prints on a warehouse holding these requests."""
    tiny.write(warehouse, rows)
    result = cli("summary", "-w", str(warehouse))
    assert result.returncode == 0, result.stderr
    return str(result.stdout)


def test_summary_says_input_is_unknown_and_on_how_many_requests_instead_of_zero(
    cli, warehouse: Path
) -> None:
    at = datetime(2026, 11, 30, 10, tzinfo=UTC)
    rows = [
        tiny.request(f"r{i}", at, "openai", "gpt-4o", input_tokens=None,
                     cache_read_tokens=None, output_tokens=None)
        for i in range(3)
    ]  # fmt: skip
    stdout = _summary(cli, warehouse, rows)
    assert "input tokens:        unknown (3 requests with input unknown)" in stdout
    assert "cache read tokens:   unknown (3 requests with input or cache read unknown)" in (stdout)


def test_summary_prints_output_tokens_with_the_requests_whose_output_is_unknown(
    cli, warehouse: Path
) -> None:
    at = datetime(2026, 11, 30, 10, tzinfo=UTC)
    rows = [
        tiny.request("a", at, "openai", "gpt-4o", input_tokens=1000, cache_read_tokens=0,
                     output_tokens=40),
        # input reported, output never arrived (a stream cut after the input counts)
        tiny.request("b", at, "anthropic", "claude-sonnet-4-5", input_tokens=900,
                     cache_read_tokens=0, output_tokens=None),
    ]  # fmt: skip
    stdout = _summary(cli, warehouse, rows)
    assert "  usage unknown:     0\n" in stdout
    assert "output tokens:       40 (1 request with unknown output excluded)\n" in stdout


def test_summary_says_how_many_priced_requests_have_unknown_savings_or_left_on_the_table(
    cli, warehouse: Path
) -> None:
    at = datetime(2026, 11, 30, 10, tzinfo=UTC)
    rows = [
        # priced from the tables; no segments, so no expectation: the shortfall is unknown
        tiny.request("a", at, "openai", "gpt-4o", input_tokens=1000, cache_read_tokens=400,
                     output_tokens=100),
        # priced by the provider's reported cost, no price row: savings unknown too
        tiny.request("b", at, "openrouter", "nobody/unlisted-model", input_tokens=1000,
                     cache_read_tokens=0, output_tokens=10, reported_cost=0.01),
    ]  # fmt: skip
    stdout = _summary(cli, warehouse, rows)
    line = next(x for x in stdout.splitlines() if x.startswith("cost (USD):"))
    # a: 600 x 2.50 + 400 x 1.25 + 100 x 10.00 per million = 0.003 (0.0035 uncached), plus
    # b's reported 0.01; only a has a savings
    assert line == (
        "cost (USD):          0.0130  saved by caching 0.0005  provider below its own rules unknown"
        "  (2 requests priced; savings unknown for 1; provider below its own rules unknown for 2)"
    )


def test_summary_prints_a_ratio_just_short_of_one_as_above_99_9_percent(
    cli, warehouse: Path
) -> None:
    at = datetime(2026, 11, 30, 10, tzinfo=UTC)
    rows = [
        tiny.request("a", at, "openai", "gpt-4o", input_tokens=10_000, cache_read_tokens=9_996,
                     output_tokens=0),
    ]  # fmt: skip
    stdout = _summary(cli, warehouse, rows)
    assert "hit ratio:           >99.9% (token-weighted;" in stdout


def test_summary_prints_a_tiny_cost_with_its_digits_not_as_zero(cli, warehouse: Path) -> None:
    at = datetime(2026, 11, 30, 10, tzinfo=UTC)
    rows = [
        # 10 uncached x 2.50 per million = 0.000025 USD
        tiny.request("a", at, "openai", "gpt-4o", input_tokens=10, cache_read_tokens=0,
                     output_tokens=0),
    ]  # fmt: skip
    stdout = _summary(cli, warehouse, rows)
    assert "cost (USD):          0.000025  saved by caching 0.0000" in stdout


def test_reading_commands_refuse_a_directory_of_captures_passed_as_the_warehouse(
    tmp_path: Path, cli: Any
) -> None:
    captures = tmp_path / "captures"
    captures.mkdir()
    (captures / "capture.jsonl").write_text("{}\n")
    for args in (["summary"], ["views"], ["sql", "select count(*) from requests"]):
        out = cli(*args, "-w", str(captures))
        assert out.returncode == 5, (args, out.stdout, out.stderr)
        assert f"{captures} is not a warehouse" in out.stderr
        assert out.stdout == ""


def test_what_an_interrupted_first_ingest_leaves_reads_as_an_empty_warehouse(
    tmp_path: Path, cli: Any
) -> None:
    # the ingest keeps its lock file (another may be waiting on it) and perhaps empty tables
    for leftovers in ([".ingest.lock"], [".ingest.lock", "requests", "rejects"]):
        wh = tmp_path / str(len(leftovers))
        wh.mkdir()
        (wh / ".ingest.lock").touch()
        for table in leftovers[1:]:
            (wh / table).mkdir()
        out = cli("sql", "select count(*) as n from requests", "-w", str(wh), "--format", "csv")
        assert (out.returncode, out.stdout) == (0, "n\n0\n"), out.stderr


def test_one_priced_request_is_said_in_the_singular() -> None:
    from pipeline.commands.summary import _priced_note

    row = {"requests": 1, "requests_savings_unknown": 1, "requests_ideal_unknown": 0}
    assert _priced_note(row) == "1 request priced; savings unknown for 1"


def test_ingest_of_a_directory_without_captures_names_the_directory_and_what_it_looks_for(
    tmp_path: Path, cli
) -> None:
    # it said only "no input files", with the hint `cacheaudit ingest CAPTURE.jsonl`, though
    # the user had named a directory (an empty one, or one of notes)
    empty = tmp_path / "capture"
    empty.mkdir()
    done = cli("ingest", str(empty), "-w", str(tmp_path / "wh"))
    assert done.returncode == 3
    assert done.stderr.splitlines()[0] == f"error: no capture files in {empty}"
    assert ".jsonl" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "wh").exists()


def test_one_priced_request_and_one_written_row_are_said_in_the_singular(
    cli, warehouse: Path, tmp_path: Path
) -> None:
    # a HAR of one call printed "(1 requests priced)"; `sql --out` printed "1 rows -> ..."
    at = datetime(2026, 11, 30, 10, tzinfo=UTC)
    rows = [
        tiny.request("a", at, "openai", "gpt-4o", input_tokens=1000, cache_read_tokens=400,
                     output_tokens=100),
    ]  # fmt: skip
    stdout = _summary(cli, warehouse, rows)
    line = next(x for x in stdout.splitlines() if x.startswith("cost (USD):"))
    assert "(1 request priced;" in line
    out = tmp_path / "one.csv"
    done = cli("sql", "select 1 as x", "-w", str(warehouse), "--format", "csv", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert f"1 row -> {out}" in done.stderr.splitlines()


def test_ingest_of_a_project_folder_reads_its_captures_not_its_warehouse_or_hidden_folders(
    tmp_path: Path, cli
) -> None:
    # `cacheaudit ingest .` in a project read the warehouse's own build stamps
    # (derived/*.stamp.json) and a .venv's JSON files as traffic: each a reject, every time
    import shutil

    project = tmp_path / "project"
    (project / "capture").mkdir(parents=True)
    shutil.copy(FIXTURES / "breaks" / "system_changed.jsonl", project / "capture" / "a.jsonl")
    (project / ".venv" / "lib").mkdir(parents=True)
    (project / ".venv" / "lib" / "pkg.json").write_text('{"name": "pkg"}', encoding="utf-8")
    wh = project / "warehouse"
    assert cli("ingest", str(project / "capture"), "-w", str(wh)).returncode == 0
    assert cli("build", "-w", str(wh)).returncode == 0
    assert list((wh / "derived").glob("*.json"))  # what the walk used to pick up
    done = cli("ingest", str(project), "-w", str(wh))
    assert done.returncode == 0, done.stderr
    assert "passing over 1 warehouse folder(s) in it" in done.stderr
    assert "0 rejected" in done.stderr.splitlines()[-2]  # the total line
    assert "stamp.json" not in done.stderr and "pkg.json" not in done.stderr


def test_a_dangling_capture_link_is_named_only_where_the_walk_reads(tmp_path: Path) -> None:
    from pipeline.input_files import expand

    project = tmp_path / "project"
    (project / "capture").mkdir(parents=True)
    (project / "capture" / "a.jsonl").write_text("{}\n", encoding="utf-8")
    (project / "capture" / "gone.jsonl").symlink_to(tmp_path / "nowhere.jsonl")
    # in a hidden folder (an editor's or a virtualenv's) nothing is the user's capture
    (project / ".cache").mkdir()
    (project / ".cache" / "old.jsonl").symlink_to(tmp_path / "nowhere.jsonl")
    said: list[str] = []
    assert expand([project], say=said.append) == [project / "capture" / "a.jsonl"]
    assert said == [
        f"{project}: ignoring 1 link(s) to nothing, e.g. gone.jsonl -> {tmp_path / 'nowhere.jsonl'}"
    ]


@pytest.mark.parametrize(
    ("option", "value"), [("--workers", "0"), ("--workers", "-3"), ("--max-record-bytes", "0")]
)
def test_ingest_refuses_a_worker_count_or_record_limit_under_one_in_one_line(
    tmp_path: Path, cli, option: str, value: str
) -> None:
    capture = FIXTURES / "breaks" / "system_changed.jsonl"
    done = cli("ingest", str(capture), "-w", str(tmp_path / "wh"), option, value)
    assert done.returncode == 2
    assert done.stderr.strip() == f"error: {option} must be at least 1, not {value}"
    assert not (tmp_path / "wh").exists()


def test_ingest_of_a_warehouse_folder_says_it_is_a_warehouse(tmp_path: Path, cli) -> None:
    # a user who named the warehouse as input got its stamps as rejects in another warehouse
    wh = tmp_path / "warehouse"
    cli("ingest", str(FIXTURES / "breaks" / "system_changed.jsonl"), "-w", str(wh))
    done = cli("ingest", str(wh), "-w", str(tmp_path / "other"))
    assert done.returncode == 3
    first = done.stderr.splitlines()[0]
    assert first == f"error: {wh} is a cacheaudit warehouse, not a folder of captures"
    assert not (tmp_path / "other").exists()


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
def test_a_full_disk_is_said_as_such_not_as_a_bug(cli) -> None:
    # `demo --out` on a full disk printed "internal error: OSError ... this is a bug" (exit 70)
    done = cli("demo", "--out", "/dev/full")
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines()[0].startswith("error: No space left on device")
    assert "bug" not in done.stderr


def test_demo_refuses_fewer_than_one_session_rather_than_write_an_empty_capture(
    cli, tmp_path: Path
) -> None:
    # `demo --sessions 0` (or -1) wrote an empty capture and exited 0
    done = cli("demo", "--sessions", "0", "--out", str(tmp_path / "d.jsonl"))
    assert done.returncode == 2
    assert "--sessions" in done.stderr
    assert not (tmp_path / "d.jsonl").exists()
