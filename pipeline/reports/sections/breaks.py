"""Cache breaks by cause (bars), and the conversations that lost the most tokens, each with its
cause and the diff excerpt that explains it (table)."""

from __future__ import annotations

import altair as alt

from pipeline.reports.data import Row, WeekData, missing_reason
from pipeline.reports.numbers import count
from pipeline.reports.section import (
    CHART_HEIGHT,
    Chart,
    Column,
    Section,
    spec,
    table,
    unavailable,
)

VIEW = "report_break_causes"
TOP_VIEW = "report_top_breaks"
VIEWS = {VIEW: "cache_breaks", TOP_VIEW: "cache_breaks"}
TITLE = "Cache breaks by cause"
CAPTION = (
    "A cache break is a request that could have reused an earlier request's cached prefix but"
    " did not. Each break has one primary cause; the bars show the input tokens each cause cost"
    " (sent uncached instead of read from cache) and the label how many requests it hit. A cold"
    " start (first turn of a conversation) costs nothing: there was nothing to reuse."
)
# appended to the caption when some losses are unknown (usage not reported, e.g. an
# interrupted stream): those breaks are counted, never summed as 0
UNKNOWN_CAPTION = (
    " {breaks} had an unknown loss (a token count it needs was not reported, e.g. after an"
    " interrupted stream): counted in the labels, not summed in the bars."
)
X_TITLE = "Tokens lost (sent uncached instead of read)"
TOP_CAPTION = (
    "The conversations that lost the most tokens this week, with the cause that cost them most"
    " and the excerpt of the change behind their costliest break. Tokens lost sums the breaks"
    " whose loss is known; Loss unknown counts the others. Each conversation links to its own"
    " page, turn by turn, written beside this one."
)
TOP_COLUMNS = (
    Column("rank", "#", "int"),
    Column("conversation_id", "Conversation", link="conversation_id"),
    Column("agent", "Agent"),
    Column("tokens_lost", "Tokens lost", "int"),
    Column("breaks", "Breaks", "int"),
    Column("breaks_tokens_unknown", "Loss unknown", "int"),
    Column("main_cause", "Main cause"),
    Column("change_class", "Change"),
    Column("costliest_turn", "Turn", "int"),
    Column("excerpt", "Diff excerpt (costliest break)", "code"),
)


def chart(rows: list[Row]) -> alt.LayerChart:
    order = [r["cause"] for r in sorted(rows, key=lambda r: (-(r["tokens_lost"] or 0), r["cause"]))]
    y = alt.Y("cause:N", title="Primary cause", sort=order)
    base = alt.Chart(alt.InlineData(values=rows))
    bars = base.mark_bar(color="#e45756").encode(
        x=alt.X("tokens_lost:Q", title=X_TITLE),
        y=y,
        tooltip=[
            alt.Tooltip("cause:N", title="Cause"),
            alt.Tooltip("tokens_lost:Q", title="Tokens lost", format=","),
            alt.Tooltip("breaks:Q", title="Requests", format=","),
            alt.Tooltip("breaks_tokens_unknown:Q", title="Loss unknown (requests)", format=","),
            alt.Tooltip("conversations:Q", title="Conversations", format=","),
        ],
    )
    # a cause whose every loss is unknown has no bar: its label still shows, at 0
    labels = base.mark_text(align="left", dx=4, color="#333333").encode(
        x=alt.X("label_x:Q", title=X_TITLE),  # the same title: the layers share one axis
        y=y,
        text=alt.Text("breaks_label:N"),
    )
    result: alt.LayerChart = (
        alt.LayerChart(layer=[bars, labels])
        .transform_calculate(
            breaks_label="format(datum.breaks, ',')"
            " + (datum.breaks == 1 ? ' request' : ' requests')"
            " + (datum.breaks_tokens_unknown > 0"
            " ? ', ' + format(datum.breaks_tokens_unknown, ',') + ' with unknown loss' : '')",
            label_x="datum.tokens_lost == null ? 0 : datum.tokens_lost",
        )
        .properties(title=TITLE, width=520, height=max(CHART_HEIGHT // 2, 28 * len(rows)))
    )
    return result


def build(data: WeekData) -> Section:
    if reason := missing_reason(VIEW, VIEWS[VIEW]):
        return unavailable("breaks", TITLE, CAPTION, reason)
    rows = data.get(VIEW)
    section = Section("breaks", TITLE, CAPTION)
    if not rows:
        section.note = "no cache break this week"
        return section
    section.charts.append(Chart("breaks", spec(chart(rows))))
    unknown = sum(r["breaks_tokens_unknown"] for r in rows)
    if unknown:
        section.caption += UNKNOWN_CAPTION.format(breaks=count(unknown, "break"))
    if reason := missing_reason(TOP_VIEW, VIEWS[TOP_VIEW]):
        section.body_html = f'<p class="note">not available: {reason}</p>'
    elif top := data.get(TOP_VIEW):
        section.body_html = (
            f'<h3>Top conversations by tokens lost</h3><p class="caption">{TOP_CAPTION}</p>'
            + table(TOP_COLUMNS, top, week=data.week.label)
        )
    return section
