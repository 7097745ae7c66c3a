"""Shared by the tests of the views stored by day (request_prefix, conversation_links,
cache_breaks): the demo's traffic cut in two ingests, the stored rows, the files of each day,
and the comparison with a forced full build."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb

from pipeline import derived, materialise, sql
from pipeline.demo import write_demo
from pipeline.ingest import ingest
from pipeline.warehouse import Warehouse

SPLIT = "2026-11-27"  # the demo's last four days arrive in a later ingest


def demo_halves(root: Path) -> tuple[Path, Path]:
    """The demo's capture as two files: the days before SPLIT, and SPLIT on."""
    capture = root / "capture.jsonl"
    write_demo(capture, seed=7, sessions=24)
    lines = capture.read_bytes().splitlines(keepends=True)
    early, late = root / "early.jsonl", root / "late.jsonl"
    early.write_bytes(b"".join(x for x in lines if json.loads(x)["started_at"][:10] < SPLIT))
    late.write_bytes(b"".join(x for x in lines if json.loads(x)["started_at"][:10] >= SPLIT))
    return early, late


def computing(wh: Warehouse, view: str, **kw: Any) -> list[str]:
    """Build; the progress lines of `view` computing some of its days."""
    said: list[str] = []
    materialise.build(wh, progress=said.append, **kw)
    return [line for line in said if line.startswith(f"{view}: computing")]


def stored(wh: Warehouse, view: str) -> list[tuple[Any, ...]]:
    pattern = str(derived.derived_path(wh, view) / "**" / "*.parquet")
    return duckdb.sql(
        "SELECT * FROM read_parquet($p) ORDER BY request_id", params={"p": pattern}
    ).fetchall()


def inodes(wh: Warehouse, view: str) -> dict[str, set[int]]:
    """The files of each stored day, by inode: a day kept is the same files."""
    root = derived.derived_path(wh, view)
    return {d.name: {p.stat().st_ino for p in d.iterdir()} for d in root.iterdir()}


def same_as_full_build(
    wh: Warehouse, view: str, options: sql.SqlOptions | None = None
) -> list[tuple[Any, ...]]:
    """The stored rows, after checking they are those of a forced full build."""
    incremental = stored(wh, view)
    materialise.build(wh, force=True, options=options)
    assert incremental == stored(wh, view)
    assert len(incremental) > 0
    return incremental


def stored_by_request(wh: Warehouse, view: str) -> dict[str, dict[str, Any]]:
    """The stored rows by request id, each as a column -> value dict."""
    pattern = str(derived.derived_path(wh, view) / "**" / "*.parquet")
    rel = duckdb.sql("SELECT * FROM read_parquet($p)", params={"p": pattern})
    return {row[0]: dict(zip(rel.columns, row, strict=True)) for row in rel.fetchall()}


def built_then_more(
    tmp_path: Path, early: list[bytes], late: list[bytes], view: str
) -> tuple[Warehouse, list[str]]:
    """`early` ingested and built, then `late` ingested and built: the warehouse, and what the
    second build said of computing `view`."""
    first, second = tmp_path / "early.jsonl", tmp_path / "late.jsonl"
    first.write_bytes(b"".join(early))
    second.write_bytes(b"".join(late))
    wh = Warehouse(tmp_path / "wh")
    ingest([first], wh, workers=1)
    materialise.build(wh)
    ingest([second], wh, workers=1)
    return wh, computing(wh, view)
