"""The page footer: where the numbers came from (warehouse sources, price table digest),
when the page was generated and by which cacheaudit version."""

from __future__ import annotations

from datetime import datetime

import duckdb

from pipeline import __version__, sql
from pipeline.reports import escape

MAX_SOURCES_LISTED = 12


def sources_html(con: duckdb.DuckDBPyConnection) -> str:
    rows = sql.run(
        con, "SELECT source, records, accepted, ingested_at FROM sources ORDER BY source"
    ).fetchall()
    if not rows:
        return "none recorded"
    listed = "".join(
        f"<li><code>{escape.text(src)}</code> ({escape.text(f'{acc or 0:,}')} requests)</li>"
        for src, _rec, acc, _at in rows[:MAX_SOURCES_LISTED]
    )
    more = len(rows) - MAX_SOURCES_LISTED
    extra = f"<li>and {more:,} more</li>" if more > 0 else ""
    return f"{len(rows):,} source files<ul>{listed}{extra}</ul>"


def render(
    *,
    sources: str,
    warehouse: str,
    price_digest: str | None,
    generated_at: datetime,
    no_digest: str = "not available: no cost on this page",
) -> str:
    digest = escape.text(price_digest or no_digest)
    return (
        "<dl>"
        f"<dt>Warehouse</dt><dd><code>{escape.text(warehouse)}</code>: {sources}</dd>"
        f"<dt>Price table digest</dt><dd><code>{digest}</code></dd>"
        f"<dt>Generated</dt><dd>{escape.text(generated_at.strftime('%Y-%m-%d %H:%M:%S UTC'))}"
        f" by cacheaudit {escape.text(__version__)}</dd>"
        "</dl>"
    )
