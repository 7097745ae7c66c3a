"""Writing query results: a readable table for terminals, CSV, JSON or Parquet for programs.
Data goes to stdout (or --out); diagnostics never do."""

from __future__ import annotations

import csv
import sys
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, TextIO

import duckdb
import orjson

from pipeline.errors import UsageError

FORMATS = ("table", "csv", "json", "parquet")


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def _clip(text: str, max_width: int) -> str:
    return text if len(text) <= max_width else text[: max_width - 1] + "…"


def write_table(
    columns: list[str],
    rows: list[tuple[Any, ...]],
    out: TextIO,
    max_width: int = 48,
    right: frozenset[int] = frozenset(),
) -> int:
    """A padded text table; values longer than `max_width` are cut and end with `…`; the
    columns at the indexes in `right` (numbers) are right-aligned. Returns how many values were
    cut (the caller says so on stderr: the table is for reading, not data)."""
    full = [[_cell(v) for v in row] for row in rows]
    cut = sum(len(v) > max_width for row in full for v in row)
    cells = [[_clip(v, max_width) for v in row] for row in full]
    widths = [len(c) for c in columns]
    for row in cells:
        widths = [max(w, len(v)) for w, v in zip(widths, row, strict=True)]

    def line(values: list[str] | tuple[str, ...]) -> str:
        padded = (
            v.rjust(w) if i in right else v.ljust(w)
            for i, (v, w) in enumerate(zip(values, widths, strict=True))
        )
        return "  ".join(padded).rstrip() + "\n"

    out.write(line(columns))
    out.write("  ".join("-" * w for w in widths) + "\n")
    for row in cells:
        out.write(line(row))
    return cut


def _json_default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, date | datetime):
        return value.isoformat()
    raise TypeError


def check(fmt: str, out_path: Path | None) -> None:
    """Reject a format or format/--out pair `emit` cannot write, before any work is done."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown format {fmt!r}", hint=f"one of {', '.join(FORMATS)}")
    if fmt == "parquet" and out_path is None:
        raise UsageError("--format parquet needs --out FILE")


def emit(rel: duckdb.DuckDBPyRelation, fmt: str, out_path: Path | None) -> int:
    """Write a relation in `fmt`; returns the number of rows written."""
    check(fmt, out_path)
    if out_path is None:
        # stdout: a reader that stops early is handled once, for every command (cli._Group).
        return _emit(rel, fmt, None)
    try:
        out_path.parent.mkdir(parents=True, exist_ok=True)  # as `report --out` does
        return _emit(rel, fmt, out_path)
    except (OSError, duckdb.IOException) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(
            f"cannot write {out_path}: {reason}", hint="check --out: a file in a writable directory"
        ) from exc


def _emit(rel: duckdb.DuckDBPyRelation, fmt: str, out_path: Path | None) -> int:
    if fmt == "parquet":
        assert out_path is not None
        rel.write_parquet(str(out_path))
        return int(rel.aggregate("count(*)").fetchall()[0][0])
    columns = list(rel.columns)
    rows = rel.fetchall()
    handle: TextIO = out_path.open("w", encoding="utf-8", newline="") if out_path else sys.stdout
    try:
        if fmt == "table":
            cut = write_table(columns, rows, handle)
            if cut:
                print(
                    f"note: {cut} value(s) longer than 48 characters cut (…);"
                    " --format csv or json prints them whole",
                    file=sys.stderr,
                )
        elif fmt == "csv":
            writer = csv.writer(handle, lineterminator="\n")
            writer.writerow(columns)
            writer.writerows(["" if v is None else v for v in row] for row in rows)
        else:
            records = [dict(zip(columns, row, strict=True)) for row in rows]
            handle.write(
                orjson.dumps(
                    records, default=_json_default, option=orjson.OPT_NON_STR_KEYS
                ).decode()
                + "\n"
            )
    finally:
        if out_path:
            handle.close()
    return len(rows)
