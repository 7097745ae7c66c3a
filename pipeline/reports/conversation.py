"""`cacheaudit report conversation ID`: one page for one conversation, turn by turn."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import duckdb

from pipeline import sql
from pipeline.errors import NotFoundError
from pipeline.reports import footer, page
from pipeline.reports.data import fetch, missing_reason
from pipeline.reports.section import conversation_page
from pipeline.reports.sections import conversation_turns
from pipeline.reports.weekly import write_atomic
from pipeline.warehouse import Warehouse

page_name = conversation_page  # the weekly page links to it by this name


def generate_conversation(
    wh: Warehouse,
    out_dir: Path,
    conversation_id: str,
    *,
    options: sql.SqlOptions | None = None,
    now: datetime | None = None,
    con: duckdb.DuckDBPyConnection | None = None,
    week: str | None = None,
    sources: str | None = None,
) -> Path:
    """Write the page of one conversation; `con`: a connection to `wh` already open (the weekly
    report writes the pages it links to), `week`: the label of the week whose days `con`
    reads, when not all of them (the page is then that week's: `conversation_page`),
    `sources`: the footer's list of sources, when the caller has it."""
    view = conversation_turns.VIEW
    if reason := missing_reason(view, conversation_turns.VIEWS[view]):
        raise NotFoundError(f"conversation reports are not available: {reason}")
    if con is None:
        # the views the page reads and what they read: a heavy view that cannot be read from
        # storage (`--rules`) is then computed once for the session (`sql.compute_once`)
        con = sql.connect(
            wh, options=options or sql.SqlOptions(), only=[view, "sources", "price_digest"]
        )
    rows = fetch(con, view, "conversation_id = $1", [conversation_id])
    if not rows:
        raise NotFoundError(
            f"no conversation {conversation_id!r}",
            hint='list them: cacheaudit sql "select conversation_id, count(*) from conversations'
            ' group by 1 order by 2 desc limit 20"',
        )
    first, last = rows[0], rows[-1]
    subtitle = (
        f"{first['agent'] or 'unknown agent'} · {first['model'] or 'unknown model'} ·"
        f" {len(rows)} turns from {first['started_at'][:19]} to {last['started_at'][:19]} UTC"
    )
    if week is not None:
        # A week's read can cut the conversation at either end: before its first day (the
        # stored turn numbers then start above 1) or after its Sunday, which nothing here can
        # see (a conversation from Sunday 23:50 to Monday 00:20 shows its Sunday turns only).
        # So a page written from a week's read always says which turns it holds.
        subtitle += (
            f" (turns {first['turn']} to {last['turn']}: those in the days read for week {week};"
            " `cacheaudit report conversation` shows every turn)"
        )
    html = page.render(
        page.Page(
            title=f"cacheaudit conversation {conversation_id}",
            heading=f"Conversation {conversation_id}",
            subtitle=subtitle,
            sections=[conversation_turns.build(rows)],
            footer_html=footer.render(
                sources=sources if sources is not None else footer.sources_html(con),
                warehouse=str(wh.root),
                price_digest=_price_digest(con),
                generated_at=now or datetime.now(UTC),
            ),
            nav_html='<nav><a href="index.html">All weeks</a></nav>',
        )
    )
    path = out_dir / page_name(conversation_id, week)
    write_atomic(path, html)
    return path


def _price_digest(con: duckdb.DuckDBPyConnection) -> str | None:
    """The digest of the prices behind the page's money lost (the weekly pages give theirs)."""
    try:
        rows = con.execute("SELECT price_digest FROM price_digest").fetchall()
    except duckdb.Error:
        return None
    return str(rows[0][0]) if rows and rows[0][0] else None
