"""Expected vs reported cache reads per provider/model: the provider gap."""

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

VIEW = "report_provider_gap"
VIEWS = {VIEW: "expected_cache"}
TITLE = "Expected vs reported cache reads"
CAPTION = (
    "How many input tokens the provider's own caching rules would have served from cache (an"
    " estimate from the reusable prefix of each request) next to what the provider reported"
    " reading. A reported read well below the expected one is the provider's gap, not a change"
    " in your prompts. Only requests where both numbers are known are compared."
)
MEASURES = ["expected read", "reported read"]
COLUMNS = (
    Column("series", "Provider · model"),
    Column("requests", "Requests", "int"),
    Column("expected_read_tokens", "Expected read", "int"),
    Column("reported_read_tokens", "Reported read", "int"),
    Column("gap_tokens", "Gap (tokens)", "int"),
    Column("delivered_ratio", "Delivered", "ratio"),
    Column("requests_short", "Requests short", "int"),
    Column("requests_unknown", "Left out (unknown)", "int"),
)


def chart(rows: list[Row]) -> alt.Chart:
    result: alt.Chart = (
        alt.Chart(alt.InlineData(values=rows))
        .transform_fold(["expected_read_tokens", "reported_read_tokens"], as_=["key", "tokens"])
        .transform_calculate(
            measure="datum.key == 'expected_read_tokens' ? 'expected read' : 'reported read'"
        )
        .mark_bar()
        .encode(
            y=alt.Y("series:N", title="Provider · model", axis=alt.Axis(labelLimit=0)),
            yOffset=alt.YOffset("measure:N", sort=MEASURES),
            x=alt.X("tokens:Q", title="Cache-read tokens"),
            color=alt.Color(
                "measure:N",
                title="Cache read",
                sort=MEASURES,
                scale=alt.Scale(domain=MEASURES, range=["#9d9d9d", "#54a24b"]),
            ),
            tooltip=[
                alt.Tooltip("series:N", title="Provider · model"),
                alt.Tooltip("measure:N", title="Measure"),
                alt.Tooltip("tokens:Q", title="Tokens", format=","),
                alt.Tooltip("gap_tokens:Q", title="Gap (tokens)", format=","),
                alt.Tooltip("delivered_ratio:Q", title="Delivered", format=".1%"),
            ],
        )
        .properties(title=TITLE, width=520, height=max(CHART_HEIGHT // 2, 44 * len(rows)))
    )
    return result


def build(data: WeekData) -> Section:
    if reason := missing_reason(VIEW, VIEWS[VIEW]):
        return unavailable("provider-gap", TITLE, CAPTION, reason)
    rows = data.get(VIEW)
    section = Section("provider-gap", TITLE, CAPTION, body_html=table(COLUMNS, rows))
    plotted = [r for r in rows if r["expected_read_tokens"] is not None]
    if plotted:
        section.charts.append(Chart("provider-gap", spec(chart(plotted))))
    else:
        section.note = "no request this week has both an expected and a reported read"
    return section
