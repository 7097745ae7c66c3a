"""The page footer: where the numbers came from (warehouse sources, price table digest),
when the page was generated and by which cacheaudit version."""

from __future__ import annotations

from datetime import datetime

import duckdb

from pipeline import __version__, sql
from pipeline.reports import escape

MAX_SOURCES_LISTED = 12


def sources_html(con: duckdb.DuckDBPyConnection) -> str:
    """The sources the numbers come from, with what each gave: requests, and the records that
    could not be read (rejected: in no figure of the page, so said here)."""
    rows = sql.run(
        con, "SELECT source, records, accepted, rejected FROM sources ORDER BY source"
    ).fetchall()
    if not rows:
        return "none recorded"

    def gave(accepted: int | None, rejected: int | None) -> str:
        text = f"{accepted or 0:,} requests"
        return text + (f", {rejected:,} records rejected" if rejected else "")

    listed = "".join(
        f"<li><code>{escape.text(src)}</code> ({escape.text(gave(acc, rej))})</li>"
        for src, _rec, acc, rej in rows[:MAX_SOURCES_LISTED]
    )
    more = len(rows) - MAX_SOURCES_LISTED
    extra = f"<li>and {more:,} more</li>" if more > 0 else ""
    rejected = sum(rej or 0 for *_, rej in rows)
    note = (
        f", {rejected:,} records rejected (in no figure here: see the <code>rejects</code> table)"
        if rejected
        else ""
    )
    return f"{len(rows):,} source files{note}<ul>{listed}{extra}</ul>"


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
