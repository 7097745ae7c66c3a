"""Latency: time to first answer text against cache-read share, split by delivery."""

from __future__ import annotations

import altair as alt

from pipeline.reports.data import Row, WeekData, missing_reason
from pipeline.reports.numbers import count
from pipeline.reports.section import (
    CHART_HEIGHT,
    CHART_WIDTH,
    Chart,
    Section,
    spec,
    unavailable,
)

VIEW = "report_latency"
VIEWS = {VIEW: "requests"}
TITLE = "Time to first answer vs cache-read share"
CAPTION = (
    "Median time from sending the request to the first answer text, for requests grouped by how"
    " much of their input was read from cache (in tenths). Streamed and non-streamed requests are"
    " separate lines: without streaming the first text arrives with the whole answer. Only"
    " requests whose timing was recorded are included; hover for the count, 90th percentile and"
    " mean prompt size behind each point."
)


def chart(rows: list[Row]) -> alt.Chart:
    result: alt.Chart = (
        alt.Chart(alt.InlineData(values=rows))
        .mark_line(point=True)
        .encode(
            x=alt.X(
                "read_share_from:Q",
                title="Cache-read share of input (bin start)",
                axis=alt.Axis(format="%"),
                scale=alt.Scale(domain=[0, 1]),
            ),
            y=alt.Y("ttft_p50_ms:Q", title="Median time to first answer text (ms)"),
            color=alt.Color("delivery:N", title="Delivery"),
            tooltip=[
                alt.Tooltip("delivery:N", title="Delivery"),
                alt.Tooltip("read_share_from:Q", title="Read share from", format=".0%"),
                alt.Tooltip("read_share_to:Q", title="Read share to", format=".0%"),
                alt.Tooltip("requests:Q", title="Requests", format=","),
                alt.Tooltip("ttft_p50_ms:Q", title="Median (ms)", format=",.0f"),
                alt.Tooltip("ttft_p90_ms:Q", title="90th percentile (ms)", format=",.0f"),
                alt.Tooltip("mean_input_tokens:Q", title="Mean input tokens", format=",.0f"),
            ],
        )
        .properties(title=TITLE, width=CHART_WIDTH, height=CHART_HEIGHT)
    )
    return result


def build(data: WeekData) -> Section:
    if reason := missing_reason(VIEW, VIEWS[VIEW]):
        return unavailable("latency", TITLE, CAPTION, reason)
    rows = data.get(VIEW)
    section = Section("latency", TITLE, CAPTION)
    if left_out := max((r["requests_left_out"] or 0 for r in rows), default=0):
        section.caption += (
            f" {count(left_out, 'request')} of the week without a recorded time to first text"
            f" or usage {'is' if left_out == 1 else 'are'} left out."
        )
    if not rows:
        section.note = "no request this week has both timing and usage recorded"
        return section
    section.charts.append(Chart("latency", spec(chart(rows))))
    return section
