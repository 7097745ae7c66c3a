"""The DuckDB -> Spark SQL rewrites, checked on the SQL text (no Java needed: sqlglot only).

Each expected string is the Spark form worked out by hand from Spark's SQL reference; the
conformance test (test_spark_conformance.py) checks that the numbers then agree.
"""

from __future__ import annotations

import pytest

pytest.importorskip("sqlglot")

from pipeline.engines import engine_from, master_from
from pipeline.engines.spark_session import is_local, session_conf
from pipeline.engines.spark_translate import spark_type, translate, translate_steps
from pipeline.errors import QueryError, UsageError


def test_exact_quantiles_become_spark_percentile_not_percentile_approx() -> None:
    sql = translate("SELECT quantile_cont(x, 0.9), quantile_disc(x, 0.5) FROM t")
    assert sql == (
        "SELECT PERCENTILE(x, 0.9), PERCENTILE_DISC(0.5) WITHIN GROUP (ORDER BY x ASC NULLS LAST)"
        " FROM t"
    )


def test_a_descending_continuous_quantile_reads_from_the_other_end() -> None:
    sql = translate("SELECT percentile_cont(0.25) WITHIN GROUP (ORDER BY x DESC) FROM t")
    assert sql == "SELECT PERCENTILE(x, 1 - 0.25) FROM t"


def test_glob_becomes_like_with_like_wildcards_escaped_first() -> None:
    sql = translate("SELECT m GLOB p FROM t")
    assert sql == (
        "SELECT m LIKE REPLACE(REPLACE(REPLACE(REPLACE(REPLACE(p, '\\\\', '\\\\\\\\'),"
        " '%', '\\\\%'), '_', '\\\\_'), '*', '%'), '?', '_') FROM t"
    )


def test_duckdb_only_functions_get_their_spark_names() -> None:
    sql = translate("SELECT epoch_us(ts), hash(a), strlen(s) FROM t")
    assert sql == "SELECT UNIX_MICROS(ts), XXHASH64(a), OCTET_LENGTH(s) FROM t"


def test_a_hash_of_several_values_also_hashes_which_are_null() -> None:
    # xxhash64 skips NULLs: without the markers hash(a, NULL) would equal hash(NULL, a)
    sql = translate("SELECT hash(a, b) FROM t")
    assert sql == "SELECT XXHASH64(a, a IS NULL, b, b IS NULL) FROM t"


def test_a_function_inside_a_rewritten_function_is_rewritten_too() -> None:
    sql = translate("SELECT hash(xor(hash(a), 1::UBIGINT)) FROM t")
    assert sql == "SELECT XXHASH64(XXHASH64(a) ^ CAST(1 AS BIGINT)) FROM t"


def test_iso_weekday_is_monday_one_to_sunday_seven_on_spark_too() -> None:
    # Spark's dayofweek counts from Sunday = 1; weekday() from Monday = 0
    assert translate("SELECT isodow(t) FROM x") == "SELECT (WEEKDAY(t) + 1) FROM x"
    assert translate("SELECT dayofweek(t) FROM x") == "SELECT (DAYOFWEEK(t) - 1) FROM x"


def test_a_json_path_with_a_wildcard_gives_a_list_on_spark_too() -> None:
    sql = translate("SELECT json_extract_string(j, '$.calls[*].id') FROM t")
    assert sql == (
        "SELECT TRANSFORM(FROM_JSON(GET_JSON_OBJECT(j, '$.calls'), 'array<string>'),"
        " json_element -> GET_JSON_OBJECT(json_element, '$.id')) FROM t"
    )
    assert "'$.id'" in translate("SELECT json_extract_string(j, '$.id') FROM t")


def test_json_valid_is_a_parse_that_does_not_fail() -> None:
    sql = translate("SELECT json_valid(j) FROM t")
    assert sql == "SELECT IF(j IS NULL, NULL, NOT TRY_PARSE_JSON(j) IS NULL) FROM t"


def test_length_of_a_filtered_list_is_size() -> None:
    sql = translate("SELECT len(list_filter(xs, lambda x: x > 1)) FROM t")
    assert sql == "SELECT SIZE(FILTER(xs, x -> x > 1)) FROM t"


def test_list_reduce_with_a_start_value_is_aggregate() -> None:
    sql = translate("SELECT list_reduce([1, 2], lambda acc, x: acc + x, 0)")
    assert sql == "SELECT AGGREGATE(ARRAY(1, 2), 0, (acc, x) -> acc + x)"


def test_unsigned_and_huge_integers_become_signed_spark_types() -> None:
    sql = translate("SELECT a::UBIGINT, b::UINTEGER, c::UTINYINT, d::HUGEINT FROM t")
    assert sql == (
        "SELECT CAST(a AS BIGINT), CAST(b AS BIGINT), CAST(c AS SMALLINT),"
        " CAST(d AS DECIMAL(38, 0)) FROM t"
    )


def test_a_materialized_cte_hint_is_dropped() -> None:
    sql = translate("WITH a AS MATERIALIZED (SELECT 1 AS x) SELECT x FROM a")
    assert sql == "WITH a AS (SELECT 1 AS x) SELECT x FROM a"


def test_row_number_without_order_becomes_a_unique_id() -> None:
    sql = translate("SELECT row_number() OVER () AS k FROM t")
    assert sql == "SELECT MONOTONICALLY_INCREASING_ID() AS k FROM t"


def test_row_number_over_a_named_window_keeps_its_window() -> None:
    sql = translate(
        "SELECT row_number() OVER w AS k FROM t WINDOW w AS (PARTITION BY a ORDER BY b)"
    )
    assert sql == (
        "SELECT ROW_NUMBER() OVER w AS k FROM t WINDOW w AS (PARTITION BY a ORDER BY b NULLS LAST)"
    )


def test_a_cte_read_twice_becomes_a_step_computed_once_and_one_read_once_stays_inline() -> None:
    steps = translate_steps(
        "WITH a AS (SELECT x FROM t), b AS (SELECT x FROM a), c AS (SELECT x FROM u)"
        " SELECT * FROM a JOIN b USING (x) JOIN c USING (x)",
        prefix="v",
    )
    assert steps == (
        ("v__a", "SELECT x FROM t"),
        (
            None,
            "WITH b AS (SELECT x FROM v__a AS a), c AS (SELECT x FROM u)"
            " SELECT * FROM v__a AS a JOIN b USING (x) JOIN c USING (x)",
        ),
    )


def test_materialized_hints_decide_which_ctes_become_steps() -> None:
    steps = translate_steps(
        "WITH a AS MATERIALIZED (SELECT 1 AS x), b AS NOT MATERIALIZED (SELECT 2 AS x)"
        " SELECT * FROM a, b, b AS b2",
        prefix="v",
    )
    assert [name for name, _ in steps] == ["v__a", None]
    assert steps[1][1] == ("WITH b AS (SELECT 2 AS x) SELECT * FROM v__a AS a, b, b AS b2")


def test_a_query_without_shared_ctes_is_one_step() -> None:
    sql = "WITH a AS (SELECT 1 AS x) SELECT * FROM a"
    assert translate_steps(sql) == ((None, translate(sql)),)


def test_query_table_of_a_variable_names_the_table_it_holds() -> None:
    sql = translate(
        "SELECT e.x FROM query_table(getvariable('target')) AS e",
        (("target", "expected_cache"),),
    )
    assert sql == "SELECT e.x FROM expected_cache AS e"


def test_an_unset_variable_is_an_error_not_a_null() -> None:
    with pytest.raises(QueryError, match="no such variable"):
        translate("SELECT getvariable('nope')")


def test_asof_join_becomes_a_range_join_keeping_the_nearest_earlier_row() -> None:
    sql = translate("SELECT p.id, e.id AS parent FROM p ASOF JOIN e ON e.k = p.k AND p.t > e.t")
    assert sql == (
        "SELECT p.id, e.id AS parent FROM (SELECT p, e FROM (SELECT STRUCT(p.*) AS p,"
        " STRUCT(e.*) AS e, ROW_NUMBER() OVER (PARTITION BY STRUCT(p.*) ORDER BY e.t DESC)"
        " AS asof_rank FROM p JOIN e ON e.k = p.k AND p.t > e.t) AS asof_ranked"
        " WHERE asof_rank = 1) AS asof"
    )


def test_asof_left_join_on_a_later_key_keeps_the_nearest_later_row_and_unmatched_rows() -> None:
    sql = translate("SELECT l.*, r.v FROM l ASOF LEFT JOIN r ON l.t <= r.t")
    assert "LEFT JOIN r ON l.t <= r.t" in sql
    assert "ORDER BY r.t ASC NULLS LAST) AS asof_rank" in sql


def test_an_asof_join_with_a_where_clause_is_refused_with_the_rewrite_to_make() -> None:
    with pytest.raises(QueryError, match="range join"):
        translate("SELECT p.a FROM p ASOF JOIN e ON p.t >= e.t WHERE p.a > 1")


def test_schema_types_map_to_spark_types() -> None:
    assert spark_type("TIMESTAMPTZ") == "TIMESTAMP"
    assert spark_type("VARCHAR[]") == "ARRAY<STRING>"
    assert spark_type("INTEGER") == "INT"
    assert spark_type("DATE") == "DATE"


def test_engine_comes_from_the_option_then_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CACHEAUDIT_ENGINE", raising=False)
    assert engine_from(None) == "duckdb"
    monkeypatch.setenv("CACHEAUDIT_ENGINE", "Spark")
    assert engine_from(None) == "spark"
    assert engine_from("duckdb") == "duckdb"
    with pytest.raises(UsageError):
        engine_from("flink")


def test_any_master_url_passes_through_and_local_is_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CACHEAUDIT_SPARK_MASTER", raising=False)
    assert master_from(None) == "local[*]"
    assert master_from("k8s://https://api.example:443") == "k8s://https://api.example:443"


def test_only_local_masters_bind_to_loopback_and_all_sessions_use_utc(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SPARK_DRIVER_MEMORY", raising=False)
    local, cluster = session_conf("local[2]"), session_conf("yarn")
    assert is_local("local[2]") and not is_local("spark://h:7077")
    assert local["spark.driver.bindAddress"] == "127.0.0.1"
    assert "spark.driver.bindAddress" not in cluster
    assert local["spark.driver.memory"] == "2g" and "spark.driver.memory" not in cluster
    for conf in (local, cluster):
        assert conf["spark.sql.session.timeZone"] == "UTC"
        assert conf["spark.sql.parquet.outputTimestampType"] == "TIMESTAMP_MICROS"
        assert conf["spark.ui.enabled"] == "false"
