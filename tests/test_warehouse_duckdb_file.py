"""`<warehouse>/cacheaudit.duckdb`: any DuckDB client, without cacheaudit, sees the rows
`cacheaudit sql` sees, after a --force re-ingest left a replaced generation's parts on disk
(which a plain glob over the Parquet files counts twice), from any working directory, and a
client holding the file open does not block the next ingest."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import duckdb
from conftest import run_cli

from pipeline import sql as sqlmod
from pipeline.warehouse import Warehouse

FIXTURES = Path(__file__).parent / "fixtures" / "breaks"
QUERIES = [
    "SELECT count(*), sum(input_tokens), sum(cache_read_tokens), sum(output_tokens) FROM requests",
    "SELECT request_id, input_tokens, cache_read_tokens FROM requests ORDER BY request_id",
    "SELECT * FROM headline",
    "SELECT count(*) FROM segments",
    "SELECT * FROM cache_breaks ORDER BY ALL",
    "SELECT * FROM cost_summary ORDER BY ALL",
]
# A plain DuckDB client: no cacheaudit import (checked), its own working directory.
READER = textwrap.dedent(
    """
    import json, sys
    import duckdb
    con = duckdb.connect(sys.argv[1], read_only=True)
    con.execute("SET TimeZone = 'UTC'")
    queries = json.loads(sys.argv[2])
    out = [[[str(v) for v in row] for row in con.sql(q).fetchall()] for q in queries]
    assert not any(m == "pipeline" or m.startswith("pipeline.") for m in sys.modules)
    print(json.dumps(out))
    """
)


def _reader(db: Path, cwd: Path) -> list[Any]:
    cwd.mkdir(exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-I", "-c", READER, str(db), json.dumps(QUERIES)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: list[Any] = json.loads(done.stdout)
    return result


def _cacheaudit(warehouse: Path) -> list[Any]:
    out = []
    for q in QUERIES:
        _con, rel = sqlmod.run_user_sql(Warehouse(warehouse), q)
        out.append([[str(v) for v in row] for row in rel.fetchall()])
    return out


def _ingest(warehouse: Path, *extra: str) -> str:
    files = sorted(str(p) for p in FIXTURES.glob("*.jsonl"))
    done = run_cli("ingest", *files, "--warehouse", str(warehouse), "--workers", "1", *extra)
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_a_plain_duckdb_client_sees_what_cacheaudit_sql_sees_after_a_forced_reingest(
    tmp_path: Path,
) -> None:
    wh = tmp_path / "warehouse"
    _ingest(wh)
    stderr = _ingest(wh, "--force")
    db = wh / "cacheaudit.duckdb"
    assert f"duckdb {db}" in stderr

    # The replaced generation's parts are still on disk (kept for readers that listed them):
    # a glob over the files counts every request twice; the database's views do not.
    globbed = duckdb.sql(
        "SELECT count(*) FROM read_parquet($p)", params={"p": str(wh / "requests/**/*.parquet")}
    ).fetchall()
    lines = sum(len(p.read_text().splitlines()) for p in FIXTURES.glob("*.jsonl"))
    assert globbed == [(2 * lines,)]

    seen = _reader(db, tmp_path / "elsewhere")
    assert seen == _cacheaudit(wh)
    assert seen[0][0][0] == str(lines)  # every fixture line is one request, counted once

    cli = run_cli("sql", "--warehouse", str(wh), "--format", "csv", "SELECT count(*) FROM requests")
    assert cli.stdout.splitlines()[1] == str(lines)


def test_the_database_follows_a_build_and_reads_the_stored_views(tmp_path: Path) -> None:
    wh = tmp_path / "warehouse"
    _ingest(wh)
    built = run_cli("build", "--warehouse", str(wh))
    assert built.returncode == 0, built.stderr
    con = duckdb.connect(str(wh / "cacheaudit.duckdb"), read_only=True)
    [(text,)] = con.execute(
        "SELECT sql FROM duckdb_views() WHERE view_name = 'cache_breaks'"
    ).fetchall()
    con.close()
    assert str((wh / "derived" / "cache_breaks.parquet").resolve()) in text
    assert _reader(wh / "cacheaudit.duckdb", tmp_path / "elsewhere") == _cacheaudit(wh)


def test_a_client_holding_the_database_open_does_not_block_an_ingest(tmp_path: Path) -> None:
    wh = tmp_path / "warehouse"
    _ingest(wh)
    db = wh / "cacheaudit.duckdb"
    # Read-write: DuckDB holds the file's lock until the connection closes.
    holder = subprocess.Popen(
        [
            sys.executable,
            "-I",
            "-c",
            "import duckdb, sys; c = duckdb.connect(sys.argv[1]); print('open', flush=True);"
            " sys.stdin.readline(); print(c.sql('select count(*) from requests').fetchall()[0][0])",
            str(db),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        stderr = _ingest(wh, "--force")
        assert "not refreshed" not in stderr
        assert f"duckdb {db}" in stderr
        out, _ = holder.communicate("\n", timeout=60)
    finally:
        if holder.poll() is None:
            holder.kill()
    lines = sum(len(p.read_text().splitlines()) for p in FIXTURES.glob("*.jsonl"))
    # The holder still reads its own (old) file: the replaced parts stay within the grace.
    assert out.strip() == str(lines)
    assert _reader(db, tmp_path / "elsewhere")[0][0][0] == str(lines)


def test_an_ingest_updates_the_database_in_place_and_new_prices_rewrite_it(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Every ingest refreshes the file, so it must not pay for binding every view again (1.5 s
    of a small ingest): with the same queries and price files only the live parts' views are
    replaced. Other price files are another file: it is written from scratch."""
    from pipeline import warehouse_db

    # no other test's copy of a file with those price files
    monkeypatch.setenv("CACHEAUDIT_CACHE_DIR", str(tmp_path / "cache"))
    wh_path = tmp_path / "warehouse"
    files = sorted(str(p) for p in FIXTURES.glob("*.jsonl"))
    first = run_cli("ingest", files[0], "--warehouse", str(wh_path), "--workers", "1")
    assert first.returncode == 0, first.stderr
    rest = run_cli("ingest", *files[1:], "--warehouse", str(wh_path), "--workers", "1")
    assert rest.returncode == 0, rest.stderr
    db = wh_path / "cacheaudit.duckdb"
    assert _reader(db, tmp_path / "elsewhere") == _cacheaudit(wh_path)

    wh = Warehouse(wh_path)

    def no_full_write(*args: Any) -> None:
        raise AssertionError("written from scratch")

    monkeypatch.setattr(warehouse_db, "_write_full", no_full_write)
    warehouse_db.write(wh)  # same stamp: updated in place, or the patch raises
    monkeypatch.undo()

    prices = Path(__file__).parent / "fixtures" / "prices" / "user_override.csv"

    def no_update(*args: Any) -> None:
        raise AssertionError("updated in place with other price files")

    monkeypatch.setattr(warehouse_db, "_update", no_update)
    warehouse_db.write(wh, sqlmod.SqlOptions(prices_paths=(prices,)))
    with duckdb.connect(str(db), read_only=True) as con:
        [(users,)] = con.execute(
            "SELECT count(*) FROM price_rows_source WHERE layer = 'user'"
        ).fetchall()
    assert users > 0


def test_a_first_file_starts_from_another_warehouses_file_and_reads_only_its_own_parts(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A warehouse's first file is a copy of the last one written from scratch (binding every
    view took 3.4 s of a 3-record first ingest), updated for this warehouse: its views must
    read this warehouse's parts and none of the other's."""
    from pipeline import warehouse_db

    monkeypatch.setenv("CACHEAUDIT_CACHE_DIR", str(tmp_path / "cache"))
    files = sorted(str(p) for p in FIXTURES.glob("*.jsonl"))
    first, second = tmp_path / "first", tmp_path / "second"
    for wh_path, part in ((first, files[:1]), (second, files[1:])):
        done = run_cli("ingest", *part, "--warehouse", str(wh_path), "--workers", "1")
        assert done.returncode == 0, done.stderr
    kept = list((tmp_path / "cache").glob(warehouse_db.TEMPLATE_PREFIX + "*"))
    assert len(kept) == 1  # written by the first warehouse's ingest, reused by the second's

    def no_full_write(*args: Any) -> None:
        raise AssertionError("written from scratch")

    db = second / "cacheaudit.duckdb"
    db.unlink()
    monkeypatch.setattr(warehouse_db, "_write_full", no_full_write)
    warehouse_db.write(Warehouse(second))
    seen = _reader(db, tmp_path / "elsewhere")
    assert seen == _cacheaudit(second)
    assert seen != _cacheaudit(first)
    with duckdb.connect(str(db), read_only=True) as con:
        texts = " ".join(sql for (sql,) in con.execute("SELECT sql FROM duckdb_views()").fetchall())
    assert str(second.resolve()) in texts
    assert str(first.resolve()) not in texts


def test_an_unreadable_kept_file_is_written_again_from_scratch(
    tmp_path: Path, monkeypatch: Any
) -> None:
    from pipeline import warehouse_db

    monkeypatch.setenv("CACHEAUDIT_CACHE_DIR", str(tmp_path / "cache"))
    wh_path = tmp_path / "warehouse"
    _ingest(wh_path)
    [kept] = (tmp_path / "cache").glob(warehouse_db.TEMPLATE_PREFIX + "*")
    kept.write_bytes(b"not a database")
    (wh_path / "cacheaudit.duckdb").unlink()
    warehouse_db.write(Warehouse(wh_path))
    assert _reader(wh_path / "cacheaudit.duckdb", tmp_path / "elsewhere") == _cacheaudit(wh_path)
    with duckdb.connect(str(kept), read_only=True) as con:  # a readable copy again
        assert con.execute(f"SELECT count(*) FROM {warehouse_db.META}").fetchall() == [(1,)]


def _view_sql(db: Path, name: str) -> str:
    with duckdb.connect(str(db), read_only=True) as con:
        [(text,)] = con.execute(
            "SELECT sql FROM duckdb_views() WHERE view_name = $name", {"name": name}
        ).fetchall()
    return str(text)


def test_stored_views_follow_every_ingest_and_build_though_unchanged_ones_are_kept(
    tmp_path: Path,
) -> None:
    # An update replaces a stored view only when its body changes (a build stored it, or an
    # ingest made it stale): each step below changes it or must leave it as it was.
    wh = tmp_path / "warehouse"
    db = wh / "cacheaudit.duckdb"
    stored = str((wh / "derived" / "cache_breaks.parquet").resolve())
    first, *rest = sorted(str(p) for p in FIXTURES.glob("*.jsonl"))
    assert rest
    ingest = ["ingest", "--workers", "1"]
    steps = [
        ([*ingest, first], False),
        (["build"], True),
        ([*ingest, rest[0]], False),  # the stored rows are stale: the query again
        ([*ingest, *rest[1:]], False),
        (["build"], True),
        (["build"], True),  # nothing changed: the same stored rows
    ]
    for command, reads_stored in steps:
        done = run_cli(*command, "--warehouse", str(wh))
        assert done.returncode == 0, done.stderr
        assert (stored in _view_sql(db, "cache_breaks")) is reads_stored, command
        assert _reader(db, tmp_path / "elsewhere") == _cacheaudit(wh), command
