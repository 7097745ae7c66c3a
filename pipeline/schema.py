"""Table schemas as data: `schemas/*.json` drives Parquet writes, empty views and the docs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pyarrow as pa

from pipeline import resources
from pipeline.errors import NotFoundError

SCHEMA_DIR = resources.folder("schemas")

_ARROW: dict[str, pa.DataType] = {
    "VARCHAR": pa.string(),
    "BIGINT": pa.int64(),
    "INTEGER": pa.int32(),
    "DOUBLE": pa.float64(),
    "BOOLEAN": pa.bool_(),
    "DATE": pa.date32(),
    "TIMESTAMPTZ": pa.timestamp("us", tz="UTC"),
    "VARCHAR[]": pa.list_(pa.string()),
    "INTEGER[]": pa.list_(pa.int32()),
}


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: str
    unit: str | None
    description: str


@dataclass(frozen=True, slots=True)
class TableSchema:
    name: str
    kind: str
    description: str
    partition_by: str | None
    columns: tuple[Column, ...]

    def arrow(self, *, with_partition: bool = False) -> pa.Schema:
        """Arrow schema of a table's rows without the partition column (its folder names it;
        `Warehouse.with_day` adds it to each part as written), or with it."""
        return pa.schema(
            [
                pa.field(c.name, _ARROW[c.type])
                for c in self.columns
                if with_partition or c.name != self.partition_by
            ]
        )

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]


def schema_dir() -> Path:
    return SCHEMA_DIR


@cache
def load(name: str) -> TableSchema:
    path = SCHEMA_DIR / f"{name}.json"
    if not path.exists():
        raise NotFoundError(f"no schema named {name!r}", hint=f"see {SCHEMA_DIR}")
    data = json.loads(path.read_text(encoding="utf-8"))
    return TableSchema(
        name=data["name"],
        kind=data.get("kind", "table"),
        description=data["description"],
        partition_by=data.get("partition_by"),
        columns=tuple(
            Column(c["name"], c["type"], c.get("unit"), c["description"]) for c in data["columns"]
        ),
    )


def all_schemas() -> list[TableSchema]:
    return [load(p.stem) for p in sorted(SCHEMA_DIR.glob("*.json")) if "." not in p.stem]


def arrow_type(type_name: str) -> pa.DataType:
    return _ARROW[type_name]
