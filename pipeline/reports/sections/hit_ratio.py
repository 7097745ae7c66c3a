"""Hit ratio per day per provider/model (line chart)."""

from __future__ import annotations

import altair as alt

from pipeline.reports.data import Row, WeekData, missing_reason
from pipeline.reports.numbers import count
from pipeline.reports.section import (
    CHART_HEIGHT,
    CHART_WIDTH,
    Chart,
    Column,
    Section,
    spec,
    table,
    unavailable,
)
from pipeline.reports.weeks import labelled, week_days

VIEW = "report_daily_hit_ratio"
VIEWS = {VIEW: "requests"}
TITLE = "Cache hit ratio per day"
CAPTION = (
    "Share of input tokens served from the provider's cache, per UTC day, one line per provider"
    " and model. Token-weighted: cache-read tokens divided by input tokens, over requests that"
    " reported both. Hover a point for the exact token counts."
)


def with_gaps(rows: list[Row], days: list[str]) -> list[Row]:
    """The rows of each series, plus a row without a ratio on every day of the axis it has no
    data for: the line breaks there instead of joining the days around it."""
    rows = labelled(rows)
    seen = {(r["series"], r["day_label"]) for r in rows}
    series = sorted({str(r["series"]) for r in rows})
    gaps: list[Row] = [
        {"series": name, "day_label": day, "hit_ratio": None}
        for name in series
        for day in days
        if (name, day) not in seen
    ]
    return rows + gaps


def chart(rows: list[Row]) -> alt.Chart:
    # Every day of the week on the axis, and a line broken over the days a series has no data
    # on: joined across them it showed a trend (13% -> 97% -> 7%) no day measured.
    days = week_days(rows)
    base = alt.Chart(alt.InlineData(values=with_gaps(rows, days))).encode(
        x=alt.X(
            "day_label:O",
            title="Day (UTC)",
            sort=days,
            scale=alt.Scale(domain=days),
            axis=alt.Axis(labelAngle=0),
        ),
        y=alt.Y(
            "hit_ratio:Q",
            title="Hit ratio (cache-read / input tokens)",
            axis=alt.Axis(format="%"),
            scale=alt.Scale(domain=[0, 1]),
        ),
        # the whole name: cut at the default 160 px, two dated snapshots of one model read the
        # same ("anthropic · claude-3-5-sonnet-20…")
        color=alt.Color("series:N", title="Provider · model", legend=alt.Legend(labelLimit=0)),
        tooltip=[
            alt.Tooltip("utcyearmonthdate(day):T", title="Day (UTC)", format="%Y-%m-%d"),
            alt.Tooltip("series:N", title="Provider · model"),
            alt.Tooltip("hit_ratio:Q", title="Hit ratio", format=".2%"),
            alt.Tooltip("ratio_read_tokens:Q", title="Cache-read tokens", format=","),
            alt.Tooltip("ratio_input_tokens:Q", title="Input tokens", format=","),
            alt.Tooltip("requests:Q", title="Requests", format=","),
            alt.Tooltip(
                "requests_excluded_from_ratio:Q", title="Left out (input or cache read unknown)"
            ),
        ],
    )
    # break-paths: a row without a ratio ends the line segment (the default drops the row
    # and joins its neighbours); the days stay on the axis
    result: alt.Chart = base.mark_line(point=True, invalid="break-paths-show-domains").properties(
        title=TITLE, width=CHART_WIDTH, height=CHART_HEIGHT
    )
    return result


MODEL_COLUMNS = (
    Column("series", "Provider · model"),
    Column("requests", "Requests", "int"),
    Column("ratio_input_tokens", "Input tokens (input and cache read known)", "int"),
    Column("ratio_read_tokens", "Cache-read tokens", "int"),
    Column("hit_ratio", "Hit ratio", "ratio"),
    Column("requests_excluded_from_ratio", "Left out (input or cache read unknown)", "int"),
)
_SUMMED = ("requests", "ratio_input_tokens", "ratio_read_tokens", "requests_excluded_from_ratio")


def week_by_series(rows: list[Row]) -> list[Row]:
    """The week's totals per provider/model: sums of the view's daily sums, busiest first."""
    totals: dict[str, Row] = {}
    for row in rows:
        total = totals.setdefault(row["series"], {"series": row["series"]})
        for key in _SUMMED:
            if row[key] is not None:
                total[key] = total.get(key, 0) + row[key]
    for total in totals.values():
        known = total.get("ratio_input_tokens")
        total["hit_ratio"] = total.get("ratio_read_tokens", 0) / known if known else None
    return sorted(totals.values(), key=lambda t: (-t["requests"], t["series"]))


def build(data: WeekData) -> Section:
    if reason := missing_reason(VIEW, VIEWS[VIEW]):
        return unavailable("hit-ratio", TITLE, CAPTION, reason)
    rows = [r for r in data.get(VIEW) if r["hit_ratio"] is not None]
    models = table(MODEL_COLUMNS, week_by_series(data.get(VIEW)))
    section = Section("hit-ratio", TITLE, CAPTION, body_html=models)
    if not rows:
        section.note = "no request this week reported both input and cache-read tokens"
        return section
    section.charts.append(Chart("hit-ratio", spec(chart(rows))))
    excluded = sum(r["requests_excluded_from_ratio"] for r in data.get(VIEW))
    if excluded:
        section.caption += (
            f" {count(excluded, 'request')} with unknown input or cache-read tokens left out."
        )
    return section
