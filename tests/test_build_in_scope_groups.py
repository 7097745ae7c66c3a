"""On a large warehouse `cacheaudit build` computes request_prefix one group of cache scopes at a
time, so its memory follows the largest group instead of the warehouse. Every window of the view
stays within a scope, so the stored rows are those of a build in one piece: the tests split a
small warehouse into groups of a few hundred segments and compare every column of every stored
view, with traffic keyed by account and traffic without one (scopes by file, session and run)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import duckdb
import pytest

from pipeline import derived, materialise, prefix_groups, sql
from pipeline.demo import write_demo
from pipeline.ingest import ingest
from pipeline.period import Period
from pipeline.warehouse import Warehouse

SMALL_GROUPS = 400  # segments per group: the demo's ~30,000 segments in dozens of groups


@pytest.fixture(scope="module")
def unsplit(tmp_path_factory: pytest.TempPathFactory) -> Warehouse:
    root = tmp_path_factory.mktemp("groups")
    keyed = root / "keyed.jsonl"
    write_demo(keyed, sessions=6)
    # the same kind of traffic recorded without keys: scopes by file, session and run
    unkeyed = root / "unkeyed.jsonl"
    write_demo(unkeyed, seed=23, sessions=4)
    text = unkeyed.read_text(encoding="utf-8")
    text = re.sub(r'"account":"[^"]*",', "", text).replace('"id":"demo-', '"id":"nokey-')
    unkeyed.write_text(text, encoding="utf-8")
    wh = Warehouse(root / "wh")
    ingest([keyed, unkeyed], wh)
    materialise.build(wh)
    return wh


def _split_copy(unsplit: Warehouse, tmp_path: Path, lines: list[str] | None = None) -> Warehouse:
    wh = Warehouse(tmp_path / "split")
    shutil.copytree(unsplit.root, wh.root)
    shutil.rmtree(wh.root / derived.DERIVED_DIR)
    materialise.build(
        wh, group_segments=SMALL_GROUPS, progress=None if lines is None else lines.append
    )
    return wh


def _differing_rows(a: Path, b: Path) -> int:
    def pattern(p: Path) -> str:
        return str(p / "**" / "*.parquet") if p.is_dir() else str(p)

    con = duckdb.connect()
    ((n,),) = con.execute(
        "SELECT count(*) FROM ("
        "(SELECT * FROM read_parquet($a) EXCEPT ALL SELECT * FROM read_parquet($b)) UNION ALL "
        "(SELECT * FROM read_parquet($b) EXCEPT ALL SELECT * FROM read_parquet($a)))",
        {"a": pattern(a), "b": pattern(b)},
    ).fetchall()
    return int(n)


def test_the_test_traffic_has_scopes_with_and_without_an_account(unsplit: Warehouse) -> None:
    con = sql.connect(unsplit, only=["request_prefix"])
    rows = con.execute(
        "SELECT account IS NULL, count(DISTINCT cache_scope) FROM request_prefix GROUP BY 1"
    ).fetchall()
    assert dict(rows)[True] >= 2 and dict(rows)[False] >= 2


def test_a_build_in_groups_of_scopes_stores_the_same_rows_in_every_view(
    unsplit: Warehouse, tmp_path: Path
) -> None:
    split = _split_copy(unsplit, tmp_path)
    stored = derived.derived_path(split, "request_prefix")
    # the groups' rows, one folder per day
    assert sorted(p.name for p in stored.iterdir()) == sorted(
        p.name.removeprefix("day=") for p in (split.root / "requests").iterdir()
    )
    for view in derived.MATERIALISED:
        assert (
            _differing_rows(derived.derived_path(unsplit, view), derived.derived_path(split, view))
            == 0
        )


def test_a_build_in_groups_keeps_the_arrival_order_over_the_whole_warehouse(
    unsplit: Warehouse, tmp_path: Path
) -> None:
    split = _split_copy(unsplit, tmp_path)
    con = sql.connect(split, only=["request_prefix"])
    # the day's number times 10^9 plus the rank within the day: 1 to n on each day
    days = con.execute(
        "SELECT date_diff('day', DATE '1970-01-01', started_at::DATE) AS day, count(*),"
        " min(arrival_order), max(arrival_order), count(DISTINCT arrival_order)"
        " FROM request_prefix GROUP BY 1"
    ).fetchall()
    assert len(days) > 3
    for day, n, first, last, distinct in days:
        assert (first, last, distinct) == (day * 10**9 + 1, day * 10**9 + n, n)


def test_the_parts_of_a_build_in_groups_are_read_as_the_stored_view(
    unsplit: Warehouse, tmp_path: Path
) -> None:
    split = _split_copy(unsplit, tmp_path)
    assert derived.fresh_derived(split, "request_prefix") == derived.derived_path(
        split, "request_prefix"
    )
    assert materialise.nothing_to_build(split, list(derived.MATERIALISED), sql.SqlOptions(), False)
    # the work files of the groups are gone; only the views and their stamps stay
    left = sorted(
        p.name for p in (split.root / derived.DERIVED_DIR).iterdir() if p.name != ".spill"
    )
    assert left == sorted(
        f"{v}.{ext}" for v in derived.MATERIALISED for ext in ("parquet", "stamp.json")
    )


def test_a_build_in_groups_says_which_group_it_is_computing(
    unsplit: Warehouse, tmp_path: Path
) -> None:
    lines: list[str] = []
    _split_copy(unsplit, tmp_path, lines)
    groups = [line for line in lines if re.match(r"request_prefix: group \d+ of \d+", line)]
    total = int(groups[0].rsplit(" ", 1)[1])
    assert len(groups) == total > 3
    assert groups[-1].startswith(f"request_prefix: group {total} of {total} ({total - 1} done")


def test_a_warehouse_under_the_group_size_is_built_in_one_piece(
    unsplit: Warehouse, tmp_path: Path
) -> None:
    wh = Warehouse(tmp_path / "whole")
    shutil.copytree(unsplit.root, wh.root)
    shutil.rmtree(wh.root / derived.DERIVED_DIR)
    lines: list[str] = []
    materialise.build(wh, progress=lines.append)
    assert lines == []  # no group
    days = list(derived.derived_path(wh, "request_prefix").iterdir())
    assert days and all(len(list(day.iterdir())) == 1 for day in days)


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*.parquet")}


def test_a_failing_group_leaves_the_stored_view_as_it_was_and_no_work_files(
    unsplit: Warehouse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wh = Warehouse(tmp_path / "failing")
    shutil.copytree(unsplit.root, wh.root)
    before = _files(derived.derived_path(wh, "request_prefix"))

    def fail(*args: object, **kwargs: object) -> int:
        raise duckdb.OutOfMemoryException("Out of Memory Error: could not allocate block")

    monkeypatch.setattr(prefix_groups, "_write_count", fail)
    with pytest.raises(Exception, match="building request_prefix: Out of Memory"):
        materialise.build(wh, force=True, group_segments=SMALL_GROUPS)
    assert _files(derived.derived_path(wh, "request_prefix")) == before
    hidden = [p.name for p in (wh.root / derived.DERIVED_DIR).iterdir() if p.name.startswith(".")]
    assert hidden in ([], [".spill"])


def test_build_split_segments_on_the_command_line_prints_each_group_on_stderr(
    unsplit: Warehouse, tmp_path: Path, cli
) -> None:  # type: ignore[no-untyped-def]
    wh = tmp_path / "cli"
    shutil.copytree(unsplit.root, wh)
    result = cli("build", "-w", str(wh), "--force", "--split-segments", str(SMALL_GROUPS))
    assert result.returncode == 0, result.stderr
    assert re.search(r"^request_prefix: group 1 of \d+$", result.stderr, re.MULTILINE)
    # a long build says how far it is: each stage's time, then the time left at the groups' pace
    assert re.search(r"^request_prefix: prefix_segments written in \d+ s$", result.stderr, re.M)
    assert re.search(
        r"^request_prefix: group 2 of \d+ \(1 done in \d+ s, about \d+ (s|min) left\)$",
        result.stderr,
        re.MULTILINE,
    )
    assert result.stdout == ""
    assert derived.derived_path(Warehouse(wh), "request_prefix").is_dir()
    # the warehouse's DuckDB file reads the parts as the stored view
    with duckdb.connect(str(wh / "cacheaudit.duckdb"), read_only=True) as con:
        ((rows,),) = con.execute("SELECT count(*) FROM request_prefix").fetchall()
    with duckdb.connect() as con:
        ((requests,),) = con.execute(
            "SELECT count(*) FROM read_parquet($p)",
            {"p": str(wh / "requests" / "**" / "*.parquet")},
        ).fetchall()
    assert rows == requests > 0


def test_a_group_line_says_how_long_the_groups_took_and_how_long_is_left() -> None:
    assert prefix_groups._group_line(1, 6, 0.0) == "request_prefix: group 1 of 6"
    # 3 groups in 45 s: 15 s each, 3 groups left (4, 5, 6): 45 s
    assert prefix_groups._group_line(4, 6, 45.0) == (
        "request_prefix: group 4 of 6 (3 done in 45 s, about 45 s left)"
    )
    # 2 groups in 300 s: 150 s each, 15 left: 2,250 s = 37.5 min, said in whole minutes
    assert prefix_groups._group_line(3, 17, 300.0) == (
        "request_prefix: group 3 of 17 (2 done in 5 min, about 38 min left)"
    )


def test_build_help_states_the_default_group_size(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("build", "--help")
    assert f"{prefix_groups.GROUP_SEGMENTS:,}" in " ".join(result.stdout.split())


def test_build_refuses_a_group_size_under_one_segment_in_one_line(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("build", "-w", str(tmp_path / "wh"), "--split-segments", "0")
    assert result.returncode == 2
    assert result.stderr.strip() == "error: --split-segments must be at least 1"


def test_a_report_reading_the_stored_views_leaves_their_stages_uncomputed(
    unsplit: Warehouse,
) -> None:
    from pipeline.reports.data import materialise
    from pipeline.reports.sections import weekly_views

    ((first,),) = (
        sql.connect(unsplit, only=["requests"]).execute("SELECT min(day) FROM requests").fetchall()
    )
    con = sql.connect(unsplit, period=Period(first, first))
    assert sql.stored_views(con) == set(derived.MATERIALISED)
    materialise(con, set(weekly_views().values()))
    tables = {name for (name,) in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    assert "request_costs" in tables  # the report's own upstream is prepared once
    assert not tables & {"prefix_requests", "prefix_segments"}


def test_a_session_computing_every_view_reads_none_from_storage(unsplit: Warehouse) -> None:
    assert sql.stored_views(sql.connect(unsplit, use_derived=False)) == set()
