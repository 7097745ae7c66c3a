"""Input stamps: `report weekly --all` skips a week whose inputs have not changed.

A week's inputs are the warehouse partitions of its days and of the week before (a cache break
on Monday depends on Sunday's requests), the stored views the page reads for those days (a build
after an ingest of older traffic rewrites them: a conversation that began weeks before gets its
earlier turns, and the week's page its numbering) or, when they are not current, the fact that
the page computes them itself, the price and rule files, the SQL views, the templates and the
report code, and the cacheaudit version. Files are identified by path, size and mtime, which
change on every (atomic) rewrite, so no data is read to decide.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import timedelta
from pathlib import Path

from pipeline import __version__, schema
from pipeline.derived import MATERIALISED, fresh_derived, warehouse_state
from pipeline.period import Period, stored_files
from pipeline.reports.page import TEMPLATE_DIR
from pipeline.reports.weeks import IsoWeek
from pipeline.sql_catalog import QUERY_DIR, SqlOptions
from pipeline.warehouse import TABLES, Warehouse

_PIPELINE = Path(__file__).resolve().parent.parent
_CODE_DIRS = (QUERY_DIR, TEMPLATE_DIR / "templates", _PIPELINE / "reports")
_DATA_DIRS = (_PIPELINE / "prices" / "data", _PIPELINE / "rules")


def _files_under(paths: Iterable[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out.extend(
                f for f in sorted(p.rglob("*")) if f.is_file() and "__pycache__" not in str(f)
            )
        elif p.is_file():
            out.append(p)
    return out


def _add_stat(h: hashlib._Hash, path: Path, root: Path) -> None:
    st = path.stat()
    h.update(f"{path.relative_to(root) if path.is_relative_to(root) else path}\0".encode())
    h.update(f"{st.st_size}:{st.st_mtime_ns}\n".encode())


def _days(week: IsoWeek) -> Period:
    """The days whose files a week's stamp covers: the week and the week before."""
    return Period(week.monday - timedelta(days=7), week.sunday)


def stored_views(wh: Warehouse, options: SqlOptions) -> dict[str, Path | None]:
    """The stored view each weekly page of this run reads (`derived/<view>.parquet`), or None
    where it is not current and the pages compute it: once per run, it reads every manifest."""
    state = warehouse_state(wh)
    return {name: fresh_derived(wh, name, options, state=state) for name in MATERIALISED}


def _partition_files(wh: Warehouse, week: IsoWeek) -> list[Path]:
    files: list[Path] = []
    first = _days(week).first
    for table in TABLES:
        column = schema.load(table).partition_by
        if column is None:
            continue
        for offset in range(14):
            day = first + timedelta(days=offset)
            files.extend(
                sorted((wh.root / table / f"{column}={day.isoformat()}").glob("*.parquet"))
            )
    return files


def week_stamp(
    wh: Warehouse,
    week: IsoWeek,
    options: SqlOptions,
    stored: dict[str, Path | None] | None = None,
) -> str:
    """`stored`: `stored_views(wh, options)`, when the caller stamps several weeks."""
    h = hashlib.sha256(f"cacheaudit {__version__} week {week.label}\n".encode())
    for path in _partition_files(wh, week):
        _add_stat(h, path, wh.root)
    stored = stored if stored is not None else stored_views(wh, options)
    for name, folder in sorted(stored.items()):
        if folder is None:
            h.update(f"{name} computed\n".encode())
            continue
        h.update(f"{name} stored\n".encode())
        for path in sorted(stored_files(folder, _days(week))):
            _add_stat(h, path, wh.root)
    user_files = _files_under([*options.prices_paths, *options.rules_paths])
    for path in [*_files_under(_CODE_DIRS), _asset_css(), *_files_under(_DATA_DIRS), *user_files]:
        h.update(path.name.encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()[:32]


def _asset_css() -> Path:
    return TEMPLATE_DIR / "report.css"
