"""Reading commands hold no more memory than a build may: every connection the CLI reads
through sets DuckDB's memory limit (DuckDB's own default is 80% of RAM) and spills past it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline import sql
from pipeline.warehouse import Warehouse


def _gib(limit: int) -> str:
    return f"{limit / 1024**3:.1f} GiB"


def test_a_reading_connection_is_capped_at_the_build_limit_and_spills_to_its_own_directory(
    tmp_path: Path,
) -> None:
    wh = Warehouse(tmp_path / "wh")
    wh.ensure()
    con = sql.connect(wh)
    ((limit, spill),) = con.sql(
        "SELECT current_setting('memory_limit'), current_setting('temp_directory')"
    ).fetchall()
    assert limit == _gib(sql.build_memory_limit())
    assert "cacheaudit-spill-" in spill


def test_the_sql_command_runs_under_the_same_cap(tmp_path: Path, cli: Any) -> None:
    wh = tmp_path / "wh"
    Warehouse(wh).ensure()
    out = cli("sql", "-w", str(wh), "SELECT current_setting('memory_limit') AS m", "-f", "csv")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == _gib(sql.build_memory_limit())


def test_a_period_read_is_capped_lower_its_work_being_its_days_only(tmp_path: Path) -> None:
    from datetime import date

    from pipeline.period import Period

    wh = Warehouse(tmp_path / "wh")
    wh.ensure()
    con = sql.connect(wh, period=Period(date(2026, 11, 23), date(2026, 11, 29)))
    ((limit,),) = con.sql("SELECT current_setting('memory_limit')").fetchall()
    expected = min(sql.PERIOD_MEMORY_LIMIT_BYTES, sql.build_memory_limit())
    assert limit == _gib(expected)
