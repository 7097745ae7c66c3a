"""index.html: every generated week with its headline numbers, newest first."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from pipeline.reports import escape, footer, numbers, page
from pipeline.reports.numbers import count
from pipeline.reports.section import Section, fmt

CAPTION = (
    "One page per ISO week (Monday to Sunday, UTC). Hit ratio is token-weighted over requests"
    " that reported both input and cache-read tokens; a dash means unknown. Input tokens and cost"
    " count the requests they leave out (input unknown, no price)."
)


def _left_out(n: Any, what: str) -> str:
    """`<br>3 requests ... left out` under a sum, when it left any out (an entry written by an
    older version may not have the count: nothing is claimed then)."""
    return f"<br>{escape.text(count(int(n), 'request') + ' ' + what)}" if n else ""


def _cost(entry: dict[str, Any]) -> str:
    cost_rows = entry.get("cost") or []
    rows = [r for r in cost_rows if r.get("currency")]
    unpriced = _left_out(
        cost_rows[0].get("requests_unpriced_week") if cost_rows else None, "without a price"
    )
    if not rows:
        return escape.text(None) + unpriced
    amounts = "<br>".join(
        escape.text(
            f"{numbers.money(r['cost_total'])} {r['currency']}"
            if r.get("cost_total") is not None
            else None
        )
        for r in rows
    )
    return amounts + unpriced


def _row(label: str, entry: dict[str, Any]) -> str:
    h = entry.get("headline", {})
    link = f'<a href="{escape.text(entry["file"])}">{escape.text(label)}</a>'
    cells = [
        link,
        escape.text(f"{h.get('first_day')} to {h.get('last_day')}"),
        fmt(h.get("requests"), "int"),
        fmt(h.get("input_tokens"), "int")
        + _left_out(h.get("requests_input_unknown"), "with input unknown"),
        fmt(h.get("hit_ratio"), "ratio"),
        fmt(h.get("requests_usage_unknown"), "int"),
        _cost(entry),
        escape.text(entry.get("generated_at", "")[:19].replace("T", " ")),
    ]
    nums = {2, 3, 4, 5, 6}
    return (
        "<tr>"
        + "".join(f'<td class="{"num" if i in nums else ""}">{c}</td>' for i, c in enumerate(cells))
        + "</tr>"
    )


def render_index(
    manifest: dict[str, dict[str, Any]], out_dir: Path, now: datetime, warehouse: str
) -> str:
    heads = [
        "Week",
        "Days with traffic",
        "Requests",
        "Input tokens",
        "Hit ratio",
        "Usage unknown",
        "Cost",
        "Generated (UTC)",
    ]
    head = "".join(f"<th>{escape.text(h)}</th>" for h in heads)
    rows = "".join(
        _row(label, manifest[label])
        for label in sorted(manifest, reverse=True)
        if (out_dir / str(manifest[label].get("file", ""))).exists()
    )
    table = f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
    section = Section("weeks", "Weekly reports", CAPTION, body_html=table)
    return page.render(
        page.Page(
            title="cacheaudit weekly reports",
            heading="Prompt cache reports",
            subtitle=f"{len(manifest)} weeks",
            sections=[section],
            footer_html=footer.render(
                sources="sources and prices of each week on its page",
                warehouse=warehouse,
                price_digest=None,
                generated_at=now,
                no_digest="see each week's page",
            ),
        )
    )
