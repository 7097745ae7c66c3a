"""Register the price tables into a DuckDB session (called by `pipeline.sql.connect`).

Rows go in through Arrow, never as SQL text. Each carries `load_order` (file order, then line),
the last tie-break on both sides (resolve.py sorts the same lists). Registered relations (read
by queries/*.sql):
    price_rows_source        one row per price row, conditions parsed into columns
    price_windows_source     (row_id, start_second, end_second) UTC time-of-day windows
    model_aliases_source     alias rows
    gateway_prefixes_source  gateway model-name prefixes (openai/ on OpenRouter, models/)
    price_digest_source      one row: sha256 of all rows loaded, with counts
"""

from __future__ import annotations

import functools
from typing import Any

import duckdb
import pyarrow as pa

from pipeline.errors import DataError
from pipeline.file_state import files_state
from pipeline.prices import loader, validate
from pipeline.prices.loader import PriceTables
from pipeline.prices.resolve import currency_rank
from pipeline.prices.rows import ALL_PRICES, is_pattern

_TS = pa.timestamp("us", tz="UTC")


def _price_arrow(tables: PriceTables) -> pa.Table:
    rows = tables.prices
    columns: dict[str, Any] = {
        "row_id": [r.place.row_id for r in rows],
        "layer": [r.place.layer for r in rows],
        "layer_rank": [r.place.layer_rank for r in rows],
        "currency_rank": [currency_rank(r.currency) for r in rows],
        "provider": [r.provider for r in rows],
        "model": [r.model for r in rows],
        "model_is_pattern": [is_pattern(r.model) for r in rows],
        "effective_from": [r.effective_from for r in rows],
        "effective_to": [r.effective_to for r in rows],
        "currency": [r.currency for r in rows],
        "condition": [r.condition.text or None for r in rows],
        "specificity": [r.condition.specificity for r in rows],
        "min_prompt_tokens": [r.condition.min_prompt_tokens for r in rows],
        "weekdays": [list(r.condition.weekdays) or None for r in rows],
        "has_time_window": [bool(r.condition.windows) for r in rows],
    }
    for bucket in ALL_PRICES:
        columns[bucket] = [r.prices.get(bucket) for r in rows]
    columns["notes"] = [r.notes or None for r in rows]
    columns["source"] = [r.source or None for r in rows]
    columns["file"] = [r.place.file for r in rows]
    columns["line"] = [r.place.line for r in rows]
    # The last tie-break, as resolve.py's: rows are loaded file by file, line by line.
    columns["load_order"] = list(range(len(rows)))
    types = {
        "layer_rank": pa.int32(),
        "currency_rank": pa.int32(),
        "effective_from": _TS,
        "effective_to": _TS,
        "specificity": pa.int32(),
        "min_prompt_tokens": pa.int64(),
        "weekdays": pa.list_(pa.int32()),
        "model_is_pattern": pa.bool_(),
        "has_time_window": pa.bool_(),
        "line": pa.int64(),
        "load_order": pa.int64(),
        **{b: pa.float64() for b in ALL_PRICES},
    }
    schema = pa.schema([pa.field(n, types.get(n, pa.string())) for n in columns])
    return pa.Table.from_pydict(columns, schema=schema)


def _windows_arrow(tables: PriceTables) -> pa.Table:
    ids, starts, ends = [], [], []
    for r in tables.prices:
        for start, end in r.condition.windows:
            ids.append(r.place.row_id)
            starts.append(start)
            ends.append(end)
    return pa.table(
        {
            "row_id": pa.array(ids, pa.string()),
            "start_second": pa.array(starts, pa.int32()),
            "end_second": pa.array(ends, pa.int32()),
        }
    )


def _aliases_arrow(tables: PriceTables) -> pa.Table:
    rows = tables.aliases
    return pa.table(
        {
            "row_id": pa.array([a.place.row_id for a in rows], pa.string()),
            "layer": pa.array([a.place.layer for a in rows], pa.string()),
            "layer_rank": pa.array([a.place.layer_rank for a in rows], pa.int32()),
            "provider": pa.array([a.provider for a in rows], pa.string()),
            "alias": pa.array([a.alias for a in rows], pa.string()),
            "alias_is_pattern": pa.array([is_pattern(a.alias) for a in rows], pa.bool_()),
            "model": pa.array([a.model for a in rows], pa.string()),
            "effective_from": pa.array([a.effective_from for a in rows], _TS),
            "effective_to": pa.array([a.effective_to for a in rows], _TS),
            "note": pa.array([a.note or None for a in rows], pa.string()),
            "source": pa.array([a.source or None for a in rows], pa.string()),
            "load_order": pa.array(range(len(rows)), pa.int64()),
        }
    )


def _prefixes_arrow(tables: PriceTables) -> pa.Table:
    rows = tables.prefixes
    return pa.table(
        {
            "row_id": pa.array([g.place.row_id for g in rows], pa.string()),
            "layer_rank": pa.array([g.place.layer_rank for g in rows], pa.int32()),
            "gateway": pa.array([g.gateway for g in rows], pa.string()),
            "prefix": pa.array([g.prefix for g in rows], pa.string()),
            "provider": pa.array([g.provider for g in rows], pa.string()),
            "load_order": pa.array(range(len(rows)), pa.int64()),
        }
    )


def _digest_arrow(tables: PriceTables) -> pa.Table:
    places = [r.place for r in tables.prices]
    places += [a.place for a in tables.aliases] + [g.place for g in tables.prefixes]
    user_rows = sum(1 for p in places if p.layer == "user")
    return pa.table(
        {
            "price_digest": pa.array([tables.digest()], pa.string()),
            "price_rows": pa.array([len(tables.prices)], pa.int64()),
            "alias_rows": pa.array([len(tables.aliases)], pa.int64()),
            "gateway_prefix_rows": pa.array([len(tables.prefixes)], pa.int64()),
            "user_rows": pa.array([user_rows], pa.int64()),
            "files": pa.array([tables.files], pa.list_(pa.string())),
        }
    )


def load_checked(paths: tuple[Any, ...]) -> PriceTables:
    """Load shipped + user tables; refuse to price anything with a table that fails the check."""
    tables = loader.load(paths)
    problems = validate.check(tables)
    if problems:
        shown = validate.format_problems(problems[:5])
        more = f"\n... and {len(problems) - 5} more" if len(problems) > 5 else ""
        raise DataError(
            f"price tables have {len(problems)} problem(s):\n{shown}{more}",
            hint="run `cacheaudit prices check` (with the same --prices) for the full list",
        )
    return tables


def register(con: duckdb.DuckDBPyConnection, options: Any) -> None:
    paths = tuple(options.prices_paths)
    for name, table in zip(_SOURCES, _arrow_tables(paths, _files_state(paths)), strict=True):
        con.register(name, table)


_SOURCES = (
    "price_rows_source",
    "price_windows_source",
    "model_aliases_source",
    "gateway_prefixes_source",
    "price_digest_source",
)


def _files_state(paths: tuple[Any, ...]) -> tuple[tuple[str, int, int, int], ...]:
    """The price files read, with their stamps (pipeline/file_state.py): a changed file is
    read again."""
    return files_state([*loader.shipped_files(), *loader.expand(paths)])


@functools.lru_cache(maxsize=4)
def _arrow_tables(paths: tuple[Any, ...], state: tuple[Any, ...]) -> tuple[pa.Table, ...]:
    """The registered relations of `paths`, loaded and checked once per state of the files:
    a build opens a session per view and per run of days, and loading, checking and
    converting the tables took 0.15 s each time."""
    del state  # the cache key only
    tables = load_checked(paths)
    return (
        _price_arrow(tables),
        _windows_arrow(tables),
        _aliases_arrow(tables),
        _prefixes_arrow(tables),
        _digest_arrow(tables),
    )
