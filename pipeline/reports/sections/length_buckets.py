"""Hit ratio by input-length bucket, with the raw counts in a table beside it."""

from __future__ import annotations

import altair as alt

from pipeline.reports.data import Row, WeekData, missing_reason
from pipeline.reports.section import (
    CHART_HEIGHT,
    Chart,
    Column,
    Section,
    spec,
    table,
    unavailable,
)

VIEW = "report_length_buckets"
VIEWS = {VIEW: "requests"}
TITLE = "Hit ratio by prompt length"
CAPTION = (
    "Long prompts usually hit the cache more than short ones (providers do not cache below a"
    " minimum length), so compare ratios only within a length bucket. The table gives the raw"
    " counts behind each bar."
)
COLUMNS = (
    Column("bucket", "Input length (tokens)"),
    Column("requests", "Requests", "int"),
    Column("requests_in_ratio", "Input and cache read known", "int"),
    Column("ratio_input_tokens", "Input tokens", "int"),
    Column("ratio_read_tokens", "Cache-read tokens", "int"),
    Column("hit_ratio", "Hit ratio", "ratio"),
)


def chart(rows: list[Row]) -> alt.Chart:
    order = [r["bucket"] for r in sorted(rows, key=lambda r: r["bucket_order"])]
    result: alt.Chart = (
        alt.Chart(alt.InlineData(values=rows))
        .mark_bar(color="#4c78a8")
        .encode(
            x=alt.X(
                "bucket:N",
                title="Input length (tokens)",
                sort=order,
                axis=alt.Axis(labelAngle=0),
            ),
            y=alt.Y(
                "hit_ratio:Q",
                title="Hit ratio (cache-read / input tokens)",
                axis=alt.Axis(format="%"),
                scale=alt.Scale(domain=[0, 1]),
            ),
            tooltip=[
                alt.Tooltip("bucket:N", title="Input length"),
                alt.Tooltip("hit_ratio:Q", title="Hit ratio", format=".2%"),
                alt.Tooltip("requests_in_ratio:Q", title="Requests", format=","),
                alt.Tooltip("ratio_read_tokens:Q", title="Cache-read tokens", format=","),
                alt.Tooltip("ratio_input_tokens:Q", title="Input tokens", format=","),
            ],
        )
        .properties(title=TITLE, width=360, height=CHART_HEIGHT)
    )
    return result


def build(data: WeekData) -> Section:
    if reason := missing_reason(VIEW, VIEWS[VIEW]):
        return unavailable("length-buckets", TITLE, CAPTION, reason)
    rows = data.get(VIEW)
    section = Section("length-buckets", TITLE, CAPTION, body_html=table(COLUMNS, rows, "side"))
    plotted = [r for r in rows if r["hit_ratio"] is not None]
    if plotted:
        section.charts.append(Chart("length-buckets", spec(chart(plotted))))
    else:
        section.note = "no request this week reported both input and cache-read tokens"
    return section
