"""Cost per day split into uncached input / cache read / cache write / output / web search /
request fee (stacked bars), with the cost the same requests would have had without caching as a
reference line. A cost the provider reported is one unsplit part, so the bars add up to the
headline's cost."""

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
from pipeline.reports.weeks import labelled, week_days

VIEW = "report_cost_daily"
VIEWS = {VIEW: "request_costs"}
TITLE = "Cost per day, by kind of token"
CAPTION = (
    "What the priced requests cost each UTC day at the prices in force at their own time, split"
    " into uncached input, cache reads, cache writes, output, web-search and per-request fees;"
    " a cost the provider reported is shown whole, unsplit, as in the headline. The dashed line"
    " is what the same requests would have cost with no caching at all: the gap is what caching"
    " saved."
    " Requests without a price are not in the bars; they are counted below."
)
PARTS = [
    "uncached input", "cache read", "cache write", "output", "web search", "request fee",
    "reported by the provider",
]  # fmt: skip
COLOURS = ["#e45756", "#54a24b", "#f58518", "#4c78a8", "#72b7b2", "#eeca3b", "#b279a2"]


def chart(rows: list[Row], currency: str) -> alt.LayerChart:
    # One band per day of the week, data or not: a bar sits in its day's band, centred on the
    # day's tick, and the dashed line's point on the same day sits on the bar's centre. (On a
    # time scale a day's bar ran from its tick to the next day's, past the week's last day, and
    # a week of one day drew one bar across the whole chart.)
    days = week_days(rows)
    data = alt.InlineData(values=labelled(rows))
    day = alt.X(
        "day_label:O",
        title="Day (UTC)",
        sort=days,
        scale=alt.Scale(domain=days, paddingInner=0.2),
        axis=alt.Axis(labelAngle=0),
    )
    money = ",.4f"
    bars = (
        alt.Chart(data)
        .mark_bar()
        .encode(
            x=day,
            y=alt.Y("sum(cost):Q", title=f"Cost ({currency})", stack="zero"),
            color=alt.Color(
                "part:N",
                title="Part of the bill",
                sort=PARTS,
                scale=alt.Scale(domain=PARTS, range=COLOURS),
            ),
            order=alt.Order("part_order:Q"),
            tooltip=[
                alt.Tooltip("utcyearmonthdate(day):T", title="Day (UTC)", format="%Y-%m-%d"),
                alt.Tooltip("part:N", title="Part"),
                alt.Tooltip("sum(cost):Q", title=f"Cost ({currency})", format=money),
                alt.Tooltip("max(cost_day):Q", title=f"Day total ({currency})", format=money),
                alt.Tooltip("max(requests_priced):Q", title="Priced requests", format=","),
            ],
        )
    )
    reference = (
        alt.Chart(data)
        .mark_line(point=True, color="#333333", strokeDash=[6, 4])
        .encode(
            x=day,
            y=alt.Y("max(cost_without_cache_day):Q"),
            tooltip=[
                alt.Tooltip("utcyearmonthdate(day):T", title="Day (UTC)", format="%Y-%m-%d"),
                alt.Tooltip(
                    "max(cost_without_cache_day):Q",
                    title=f"Without caching ({currency})",
                    format=money,
                ),
                alt.Tooltip("max(cost_day):Q", title=f"Actual ({currency})", format=money),
            ],
        )
    )
    result: alt.LayerChart = alt.LayerChart(layer=[bars, reference]).properties(
        title=f"{TITLE} ({currency}); dashed: cost without caching",
        width=CHART_WIDTH,
        height=CHART_HEIGHT,
    )
    return result


def build(data: WeekData) -> Section:
    if reason := missing_reason(VIEW, VIEWS[VIEW]):
        return unavailable("cost-split", TITLE, CAPTION, reason)
    rows = data.get(VIEW)
    section = Section("cost-split", TITLE, CAPTION)
    # Every day with a request has a row; a day with no priced request has currency NULL.
    unpriced = {r["day"]: r["requests_unpriced_day"] for r in rows}
    if total := sum(unpriced.values()):
        section.caption += (
            f" {count(total, 'request')} on these days had no price and"
            f" {'is' if total == 1 else 'are'} left out."
        )
    currencies = sorted({str(r["currency"]) for r in rows if r["currency"] is not None})
    if not currencies:
        section.note = "no request this week could be priced"
        return section
    for currency in currencies:
        mine = [r for r in rows if r["currency"] == currency]
        name = "cost-split" if len(currencies) == 1 else f"cost-split-{currency.lower()}"
        section.charts.append(Chart(name, spec(chart(mine, currency))))
    no_reference = {
        (r["day"], r["currency"]): r["requests_without_cache_unknown"]
        for r in rows
        if r["currency"] is not None
    }
    if missing := sum(no_reference.values()):
        section.caption += (
            f" {count(missing, 'priced request')} with no cost without caching (a reported cost"
            f" and no price row in its currency) {'is' if missing == 1 else 'are'} in the bars"
            " but not in the dashed line."
        )
    return section
