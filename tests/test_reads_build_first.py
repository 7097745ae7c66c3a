"""Reading commands store the views they need first when an ingest made them stale
(pipeline/build_first.py): once, said on stderr, never waiting for an ingest, never failing
where the warehouse cannot be written."""

from __future__ import annotations

import errno
import fcntl
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_cli

from pipeline import build_first, derived, materialise, sql
from pipeline.errors import QueryError
from pipeline.ingest import ingest
from pipeline.warehouse import LOCK_NAME, Warehouse

BREAKS = Path(__file__).resolve().parent / "fixtures" / "breaks"
BUILDING = "first: not stored since the last ingest"


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A warehouse ingested and never built."""
    root = tmp_path_factory.mktemp("ingested") / "wh"
    ingest(sorted(BREAKS.glob("*.jsonl")), Warehouse(root), workers=1)
    return root


@pytest.fixture
def wh(ingested: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "wh"
    shutil.copytree(ingested, copy)
    return copy


def _stored(root: Path) -> set[str]:
    return {
        n for n in derived.MATERIALISED if derived.fresh_derived(Warehouse(root), n) is not None
    }


@pytest.mark.parametrize(
    "command",
    [
        ["summary"],
        ["summary", "--by", "agent"],
        ["findings"],
        ["check", "--max-lost-share", "1"],
        ["sql", "select count(*) from cache_breaks"],
    ],
    ids=lambda c: " ".join(c[:2]),
)
def test_a_read_of_the_whole_history_stores_the_views_first_once_and_says_so(
    wh: Path, command: list[str]
) -> None:
    first = run_cli(*command, "-w", str(wh))
    assert first.returncode == 0, first.stderr
    assert BUILDING in first.stderr
    assert _stored(wh) == set(derived.MATERIALISED)
    again = run_cli(*command, "-w", str(wh))
    assert again.returncode == 0, again.stderr
    assert BUILDING not in again.stderr
    # the stored views give the answer computed on the fly
    assert again.stdout == first.stdout


def test_the_answer_from_the_stored_views_is_the_one_computed_on_the_fly(wh: Path) -> None:
    on_the_fly = sql.connect(Warehouse(wh), use_derived=False)
    expected = on_the_fly.execute("SELECT * FROM findings ORDER BY ALL").fetchall()
    out = run_cli("summary", "-w", str(wh))
    assert BUILDING in out.stderr
    stored = sql.connect(Warehouse(wh))
    assert stored.execute("SELECT count(*) FROM cacheaudit_stored_views").fetchone() == (3,)
    assert stored.execute("SELECT * FROM findings ORDER BY ALL").fetchall() == expected


def test_sql_on_the_ingested_tables_only_builds_nothing(wh: Path) -> None:
    out = run_cli("sql", "select count(*) from requests", "-w", str(wh))
    assert out.returncode == 0, out.stderr
    assert BUILDING not in out.stderr
    assert _stored(wh) == set()


def test_a_period_read_builds_nothing(wh: Path) -> None:
    day = sql.connect(Warehouse(wh)).execute("SELECT min(day) FROM requests").fetchone()
    assert day is not None
    out = run_cli("summary", "--by", "day", "--since", str(day[0]), "-w", str(wh))
    assert out.returncode == 0, out.stderr
    assert BUILDING not in out.stderr
    assert _stored(wh) == set()


def test_a_read_while_an_ingest_runs_does_not_wait_and_computes_the_views_itself(
    wh: Path,
) -> None:
    with (wh / LOCK_NAME).open("a") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)  # as a running ingest holds it
        # a read that waited for the lock would never end: a timeout fails the test instead
        out = subprocess.run(
            [sys.executable, "-m", "pipeline", "findings", "-w", str(wh)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert out.returncode == 0, out.stderr
    assert f"an ingest into {wh} is running: computing the views" in out.stderr
    assert "system_changed" in out.stdout
    assert _stored(wh) == set()


@pytest.mark.parametrize(
    ("failure", "reason"),
    [
        (OSError(errno.EROFS, "Read-only file system"), "Read-only file system"),
        (OSError(errno.EIO, "Input/output error"), "Input/output error"),
        # DuckDB's own write errors reach the build as a QueryError
        (QueryError("compacting the days: IO Error: No space left on device"), "No space left"),
    ],
    ids=["read-only", "io-error", "disk-full"],
)
def test_a_read_where_the_views_cannot_be_stored_computes_them_in_memory_and_says_so(
    wh: Path, monkeypatch: pytest.MonkeyPatch, failure: Exception, reason: str
) -> None:
    def cannot(*args: object, **kwargs: object) -> None:
        raise failure

    monkeypatch.setattr(materialise, "build", cannot)
    said: list[str] = []
    assert build_first.store_stale_views(Warehouse(wh), ["findings"], say=said.append) == []
    assert said[-1].startswith(f"warning: cannot store the views in {wh} (")
    assert reason in said[-1]
    assert said[-1].endswith("computing them in memory")


def test_a_shared_lock_creates_no_table_folders(wh: Path) -> None:
    """A git checkout drops the empty rejects/ folder; on a read-only mount a reader's build
    must not need to create it."""
    shutil.rmtree(wh / "rejects", ignore_errors=True)
    with Warehouse(wh).lock(shared=True):
        pass
    assert not (wh / "rejects").exists()


def test_the_duckdb_file_is_left_to_a_running_ingest_instead_of_waiting_for_it(
    wh: Path,
) -> None:
    from pipeline import warehouse_db

    with (wh / LOCK_NAME).open("a") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        said = warehouse_db.refresh(Warehouse(wh), wait=False)
    assert said == f"{warehouse_db.DB_NAME} left to the running ingest, which rewrites it"


def test_sql_reading_a_view_name_in_a_string_builds_nothing(wh: Path) -> None:
    out = run_cli(
        "sql", "select count(*) from requests where agent = 'cache_breaks'", "-w", str(wh)
    )
    assert out.returncode == 0, out.stderr
    assert BUILDING not in out.stderr
    assert _stored(wh) == set()


def test_the_views_a_statement_reads_are_found_by_the_parser() -> None:
    assert build_first.views_read_by("select * from cache_breaks -- conversations") == {
        "cache_breaks"
    }
    assert build_first.views_read_by("select 1; select * from findings") == {"findings"}
    assert build_first.views_read_by("show tables") == set()
    assert build_first.views_read_by("SELECT * FROM Findings") == {"findings"}
    # a statement that does not parse: the run reports it, nothing is built for it
    assert build_first.views_read_by("selec * from findings") == set()
    # the tables of a join USING are found by binding it: without a session, the words
    joined = "select * from (select * from cache_breaks) join requests using (request_id)"
    assert build_first.views_read_by(joined) == {"cache_breaks", "requests"}


PRICES = Path(__file__).resolve().parent / "fixtures" / "prices" / "user_override.csv"


def test_a_read_with_its_own_prices_stores_and_reads_the_views_every_read_uses(wh: Path) -> None:
    # the stored views read no price: a user's price file (a CI gate's negotiated prices)
    # leaves them current, so such a read need not compute them again every time
    first = run_cli("check", "--max-lost-share", "1", "--prices", str(PRICES), "-w", str(wh))
    assert first.returncode == 0, first.stderr
    assert BUILDING in first.stderr
    assert _stored(wh) == set(derived.MATERIALISED)  # current for reads without --prices too
    again = run_cli("check", "--max-lost-share", "1", "--prices", str(PRICES), "-w", str(wh))
    assert BUILDING not in again.stderr and again.stdout == first.stdout


def test_only_the_views_that_read_prices_have_stamps_that_a_price_file_changes(
    wh: Path, tmp_path: Path
) -> None:
    warehouse = Warehouse(wh)
    own = sql.SqlOptions(prices_paths=(PRICES,))
    for name in derived.MATERIALISED:
        assert derived.view_stamp(warehouse, name, own) == derived.view_stamp(warehouse, name)
    assert derived.view_stamp(warehouse, "request_costs", own) != derived.view_stamp(
        warehouse, "request_costs"
    )
    user_rules = tmp_path / "rules.csv"
    shutil.copy(Path(sql.__file__).parent / "rules" / "cache_rules.csv", user_rules)
    rules = sql.SqlOptions(rules_paths=(user_rules,))  # the same rules, read once more
    assert derived.view_stamp(warehouse, "cache_breaks", rules) != derived.view_stamp(
        warehouse, "cache_breaks"
    )


def test_a_read_with_its_own_rules_builds_nothing(wh: Path, tmp_path: Path) -> None:
    rules = tmp_path / "rules.csv"
    shutil.copy(Path(sql.__file__).parent / "rules" / "cache_rules.csv", rules)
    out = run_cli("findings", "--rules", str(rules), "-w", str(wh))
    assert out.returncode == 0, out.stderr
    assert BUILDING not in out.stderr
    assert _stored(wh) == set()
