"""Fetching report views: one query per view for all requested weeks, split by week in Python.

Report views (`queries/report_*.sql`) are aggregates whose first column is `week` (the ISO
week's Monday, UTC) and whose column order is their sort order, so `ORDER BY ALL` orders them.
A view that reads a view not written yet does not exist; sections ask `missing()` and show a
note instead of an empty chart.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import duckdb

from pipeline import sql, sql_catalog
from pipeline.reports import escape
from pipeline.reports.weeks import IsoWeek

Row = dict[str, Any]


def view_exists(name: str) -> bool:
    return name in sql_catalog.load_queries()


def missing_reason(view: str, upstream: str) -> str | None:
    """None when `view` can be read; else which view is missing (the upstream one first)."""
    if view_exists(view):
        return None
    if upstream != view and not view_exists(upstream):
        return f"view {upstream} missing"
    return f"view {view} missing"


def materialise(con: duckdb.DuckDBPyConnection, upstream: set[str]) -> None:
    """Compute the upstream views and everything they read once per session.

    Several report views read the same upstream (request_costs twice, cache_breaks twice), and
    the diagnosis views share heavy inputs (request_prefix, conversations); as plain views each
    read would recompute them. A temp table shadows the view of the same name, and views that
    read it bind to the table from then on. Views that only pass a Parquet table through
    (requests, segments) stay views: copying them would cost memory and save nothing.
    """
    queries = sql_catalog.load_queries()
    heavy = {
        name
        for name in sql_catalog.needed(upstream, stored=sql.stored_views(con))
        if not all(i.startswith("raw_") for i in queries[name].inputs)
    }
    for name in sql_catalog.creation_order(queries):
        if name in heavy:
            sql.run(con, f'CREATE OR REPLACE TEMP TABLE "{name}" AS SELECT * FROM main."{name}"')


def fetch(con: duckdb.DuckDBPyConnection, view: str, where: str, params: list[Any]) -> list[Row]:
    """Rows of a report view (its name comes from our own code, values are bound)."""
    rel = sql.run(con, f'SELECT * FROM "{view}" WHERE {where} ORDER BY ALL', params)
    cols = list(rel.columns)
    return [{c: escape.plain(v) for c, v in zip(cols, row, strict=True)} for row in rel.fetchall()]


def fetch_weeks(
    con: duckdb.DuckDBPyConnection, view: str, weeks: list[IsoWeek]
) -> dict[IsoWeek, list[Row]]:
    rows = fetch(con, view, "list_contains($1, week)", [[w.monday for w in weeks]])
    out: dict[IsoWeek, list[Row]] = defaultdict(list)
    by_label = {w.monday.isoformat(): w for w in weeks}
    for row in rows:
        out[by_label[row["week"]]].append(row)
    return out


@dataclass(slots=True)
class WeekData:
    """Everything the sections of one weekly page read: rows per report view."""

    week: IsoWeek
    rows: dict[str, list[Row]] = field(default_factory=dict)

    def get(self, view: str) -> list[Row]:
        return self.rows.get(view, [])
