"""`cacheaudit sql` registers only the views a statement names (and what they read).

Registering every view of queries/ made DuckDB bind them all (3.6 s on a 1 GB warehouse) before
a query that usually reads one. The answers and the errors must be the same as with every view.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from pipeline import sql, sql_catalog
from pipeline.errors import QueryError
from pipeline.warehouse import Warehouse


def test_a_statement_gets_the_views_it_names_in_any_case() -> None:
    named = sql_catalog.views_named_in(
        'SELECT * FROM Requests r JOIN "cache_breaks" b USING (request_id)'
    )
    assert named == {"requests", "cache_breaks"}


def test_a_statement_naming_no_view_gets_none() -> None:
    assert sql_catalog.views_named_in("select 1 + 1") == set()


def test_a_column_named_like_a_view_only_adds_that_view() -> None:
    # `segments` is a view and could be a column name too: the match over-includes, never misses
    assert sql_catalog.views_named_in("select segments from requests") == {"segments", "requests"}


@pytest.mark.parametrize(
    "statement",
    [
        "select table_name from information_schema.tables",
        "SHOW TABLES",
        "describe requests",
        "select * from duckdb_views()",
        "summarize requests",
        "select count(*) from pg_views",  # pg_catalog tables resolve without their schema
        "select * from pragma_table_info('requests')",
    ],
)
def test_a_statement_reading_the_catalog_gets_every_view(statement: str) -> None:
    assert sql_catalog.views_named_in(statement) is None


def test_only_the_named_views_and_their_inputs_are_created(warehouse: Path) -> None:
    warehouse.mkdir()
    con, rel = sql.run_user_sql(Warehouse(warehouse), "select count(*) from requests")
    assert rel.fetchall() == [(0,)]
    created = {r[0] for r in con.execute("select view_name from duckdb_views()").fetchall()}
    assert "requests" in created
    assert "cache_breaks" not in created
    assert sql_catalog.needed(["requests"]) <= created


def test_a_view_reached_without_its_name_still_answers_through_the_full_session(
    warehouse: Path,
) -> None:
    warehouse.mkdir()
    # the name is built at run time, so the scan cannot see it: the retry over every view answers
    _, rel = sql.run_user_sql(
        Warehouse(warehouse), "select count(*) from query_table('cache_' || 'breaks')"
    )
    assert rel.fetchall() == [(0,)]


def test_a_misspelt_view_is_suggested_among_every_view(cli, warehouse: Path) -> None:
    warehouse.mkdir()
    result = cli("sql", "select * from cache_break", "-w", str(warehouse))
    assert result.returncode == 1
    assert 'Did you mean "cache_breaks"' in result.stderr.splitlines()[0]


def test_listing_the_tables_with_sql_shows_every_view(cli, warehouse: Path) -> None:
    warehouse.mkdir()
    result = cli("sql", "show tables", "-w", str(warehouse), "-f", "csv")
    assert result.returncode == 0, result.stderr
    names = set(result.stdout.splitlines()[1:])
    assert set(sql_catalog.load_queries()) <= names


def test_the_documented_views_are_what_a_session_reports(warehouse: Path) -> None:
    warehouse.mkdir()
    session = sql.views(sql.connect(Warehouse(warehouse)))
    documented = sql.documented_views()
    assert {v: [(c, t) for c, t, _ in cols] for v, cols in documented.items()} == session


def test_views_prints_each_column_with_its_type_and_unit(cli, warehouse: Path) -> None:
    warehouse.mkdir()
    out = cli("views", "-w", str(warehouse))
    assert out.returncode == 0, out.stderr
    requests = out.stdout.split("\nrequests\n", 1)[1]
    assert "  input_tokens  BIGINT  (tokens)\n" in requests
    assert "  started_at  TIMESTAMP WITH TIME ZONE  (UTC)\n" in requests


def test_a_script_of_several_statements_gets_every_view_and_runs_each_statement_once(
    warehouse: Path, tmp_path: Path
) -> None:
    warehouse.mkdir()
    db = tmp_path / "out.duckdb"
    script = (
        f"ATTACH '{db}' AS o; CREATE TABLE o.t (x INTEGER); INSERT INTO o.t VALUES (1); "
        "SELECT * FROM headlin"
    )
    with pytest.raises(QueryError, match='Did you mean "headline"'):
        sql.run_user_sql(Warehouse(warehouse), script)
    assert duckdb.connect(str(db)).execute("SELECT count(*) FROM t").fetchall() == [(1,)]
