"""Schemas in schemas/ drive the Parquet writes and the docs: they must match what the views
really return, column for column and type for type."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline import schema, sql_catalog
from pipeline import sql as sqlmod
from pipeline.warehouse import Warehouse

QUERY_NAMES = sorted(sql_catalog.load_queries())


def _norm(type_name: str) -> str:
    aliases = {"TIMESTAMPTZ": "TIMESTAMP WITH TIME ZONE"}
    return aliases.get(type_name, type_name)


@pytest.fixture(scope="module")
def connection(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("empty") / "warehouse"
    return sqlmod.connect(Warehouse(root))


@pytest.mark.parametrize("name", QUERY_NAMES)
def test_every_view_has_a_schema_file_with_the_same_columns_and_types(
    connection, name: str
) -> None:
    spec = schema.load(name)
    actual = sqlmod.views(connection)[name]
    assert [c for c, _ in actual] == spec.names, f"columns of view {name} differ from its schema"
    expected_types = [_norm(c.type) for c in spec.columns]
    assert [t for _, t in actual] == expected_types, f"types of view {name} differ"


@pytest.mark.parametrize("name", QUERY_NAMES)
def test_every_query_file_names_its_inputs_and_output_in_its_header(name: str) -> None:
    text = sql_catalog.load_queries()[name].sql
    assert f"-- name: {name}" in text
    assert "-- inputs:" in text
    assert "-- output:" in text
    assert "final" in text


def test_every_schema_column_is_documented_with_a_description() -> None:
    for spec in schema.all_schemas():
        assert spec.description.strip(), spec.name
        for col in spec.columns:
            assert col.description.strip(), f"{spec.name}.{col.name} has no description"


def test_every_table_schema_builds_an_arrow_schema(tmp_path: Path) -> None:
    for name in ("requests", "segments", "segment_content", "rejects", "sources"):
        arrow = schema.load(name).arrow(with_partition=True)
        assert arrow.names == schema.load(name).names
