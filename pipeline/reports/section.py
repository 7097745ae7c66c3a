"""What a page is made of: sections, each with a title, a plain-language caption, charts (as
Vega-Lite specs) and/or an escaped HTML body, or a note saying why it is not available."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import altair as alt

from pipeline.reports import escape, numbers

# Every chart is drawn at this width so pages line up and golden specs are stable.
CHART_WIDTH = 640
CHART_HEIGHT = 260


@dataclass(frozen=True, slots=True)
class Chart:
    name: str  # stable id, also the DOM id suffix: chart-<name>
    spec: dict[str, Any]


@dataclass(slots=True)
class Section:
    key: str
    title: str
    caption: str
    charts: list[Chart] = field(default_factory=list)
    body_html: str = ""  # already escaped
    note: str | None = None  # "not available: ..." or "no data this week"


def spec(chart: alt.TopLevelMixin) -> dict[str, Any]:
    """The Vega-Lite spec of an Altair chart (the unit golden tests compare)."""
    result: dict[str, Any] = chart.to_dict()
    return result


def unavailable(key: str, title: str, caption: str, reason: str) -> Section:
    return Section(key=key, title=title, caption=caption, note=f"not available: {reason}")


@dataclass(frozen=True, slots=True)
class Column:
    key: str
    label: str
    kind: str = "text"  # text, int, ratio, ms, money, time, code
    # the row key of a conversation id: the cell links to that conversation's page
    link: str | None = None


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def conversation_page(conversation_id: str, week: str | None = None) -> str:
    """The file name of a conversation's page (`cacheaudit report conversation`), beside the
    weekly pages: one that cannot leave the out dir, unique per id (a hash of the exact id).
    A page a weekly page links to holds only the turns of the days that week read, so it is
    named by its week too: a conversation across Sunday midnight has one page per week, and the
    next week's page does not replace the one an earlier week's findings link to."""
    digest = hashlib.sha256(conversation_id.encode()).hexdigest()[:10]
    of_week = f"-{week}" if week else ""
    return f"conversation-{_UNSAFE.sub('_', conversation_id)[:60]}-{digest}{of_week}.html"


def fmt(value: Any, kind: str) -> str:
    """Format one cell as escaped HTML; unknown (None) stays visibly unknown."""
    if value is None:
        return escape.text(None)
    if kind == "int":
        return escape.text(f"{int(value):,}")
    if kind == "ratio":
        return escape.text(numbers.ratio(value))
    if kind == "ms":
        return escape.text(f"{float(value):,.0f} ms")
    if kind == "money":
        return escape.text(numbers.money(value))
    if kind == "time":  # ISO text from DuckDB, shown as "YYYY-MM-DD HH:MM:SS"
        return escape.text(str(value).replace("T", " ")[:19])
    if kind == "code":
        return f"<code>{escape.text(value)}</code>"
    return escape.text(value)


def _linked(column: Column, row: dict[str, Any], week: str | None) -> str:
    """The cell's HTML, inside a link to its conversation's page when the column has one (the
    page of `week`'s read, on a weekly page): a relative link, as the pages sit side by side
    and open offline."""
    inner = fmt(row.get(column.key), column.kind)
    target = row.get(column.link) if column.link else None
    if target is None:
        return inner
    return f'<a href="{escape.text(conversation_page(str(target), week))}">{inner}</a>'


def _cell(tag: str, numeric: bool, inner: str) -> str:
    return f'<{tag} class="num">{inner}</{tag}>' if numeric else f"<{tag}>{inner}</{tag}>"


def table(
    columns: Sequence[Column],
    rows: Sequence[dict[str, Any]],
    css: str = "",
    week: str | None = None,
) -> str:
    """An HTML table; on a weekly page, `week` (its label) names the conversation pages its
    links open (`conversation_page`)."""
    numeric = {"int", "ratio", "ms", "money"}
    head = "".join(_cell("th", c.kind in numeric, escape.text(c.label)) for c in columns)
    body = "".join(
        "<tr>"
        + "".join(_cell("td", c.kind in numeric, _linked(c, row, week)) for c in columns)
        + "</tr>"
        for row in rows
    )
    table_open = f'<table class="{escape.text(css)}">' if css else "<table>"
    return f"{table_open}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
