"""`cacheaudit report conversation ID`: one page for one conversation, turn by turn."""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime
from pathlib import Path

from pipeline import sql
from pipeline.errors import NotFoundError
from pipeline.reports import footer, page
from pipeline.reports.data import fetch, missing_reason
from pipeline.reports.sections import conversation_turns
from pipeline.reports.weekly import write_atomic
from pipeline.warehouse import Warehouse

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def page_name(conversation_id: str) -> str:
    """A file name that cannot leave the out dir, unique per id (a hash of the exact id)."""
    digest = hashlib.sha256(conversation_id.encode()).hexdigest()[:10]
    return f"conversation-{_UNSAFE.sub('_', conversation_id)[:60]}-{digest}.html"


def generate_conversation(
    wh: Warehouse,
    out_dir: Path,
    conversation_id: str,
    *,
    options: sql.SqlOptions | None = None,
    now: datetime | None = None,
) -> Path:
    view = conversation_turns.VIEW
    if reason := missing_reason(view, conversation_turns.VIEWS[view]):
        raise NotFoundError(f"conversation reports are not available: {reason}")
    con = sql.connect(wh, options=options or sql.SqlOptions())
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
    html = page.render(
        page.Page(
            title=f"cacheaudit conversation {conversation_id}",
            heading=f"Conversation {conversation_id}",
            subtitle=subtitle,
            sections=[conversation_turns.build(rows)],
            footer_html=footer.render(
                sources=footer.sources_html(con),
                warehouse=str(wh.root),
                price_digest=None,
                generated_at=now or datetime.now(UTC),
            ),
            nav_html='<nav><a href="index.html">All weeks</a></nav>',
        )
    )
    path = out_dir / page_name(conversation_id)
    write_atomic(path, html)
    return path
