"""Prefix stability: which parts of the prompt change from one turn to the next, per agent."""

from __future__ import annotations

import altair as alt

from pipeline.reports.data import Row, WeekData, missing_reason
from pipeline.reports.section import Chart, Section, spec, unavailable

VIEW = "report_prefix_stability"
VIEWS = {VIEW: "prefix_stability"}
TITLE = "Prefix stability"
CAPTION = (
    "How often each part of the prompt changed from one turn to the next, per agent. Providers"
    " cache a prompt from its first byte, so a change in the tools or the system prompt (which"
    " come first) throws away the cached history behind it; history is expected to grow, and"
    " counts as changed only when earlier messages were edited, dropped or reordered."
)
PARTS = ["tools", "system", "history"]


def chart(rows: list[Row]) -> alt.LayerChart:
    base = alt.Chart(alt.InlineData(values=rows)).encode(
        x=alt.X(
            "part:N", title="Prompt part (in prompt order)", sort=PARTS, axis=alt.Axis(labelAngle=0)
        ),
        y=alt.Y("agent:N", title="Agent"),
    )
    cells = base.mark_rect().encode(
        color=alt.Color(
            "change_rate:Q",
            title="Turns changed",
            scale=alt.Scale(domain=[0, 1], scheme="orangered"),
            legend=alt.Legend(format="%"),
        ),
        tooltip=[
            alt.Tooltip("agent:N", title="Agent"),
            alt.Tooltip("part:N", title="Part"),
            alt.Tooltip("change_rate:Q", title="Turns changed", format=".1%"),
            alt.Tooltip("changed_turns:Q", title="Changed turns", format=","),
            alt.Tooltip("turns:Q", title="Turns compared", format=","),
        ],
    )
    text = base.mark_text(baseline="middle").encode(
        text=alt.Text("change_rate:Q", format=".0%"),
        color=alt.condition("datum.change_rate > 0.5", alt.value("white"), alt.value("#1f2933")),
    )
    agents = len({r["agent"] for r in rows})
    result: alt.LayerChart = alt.LayerChart(layer=[cells, text]).properties(
        title="Share of turns that changed each prompt part", width=360, height=32 * agents
    )
    return result


def build(data: WeekData) -> Section:
    if reason := missing_reason(VIEW, VIEWS[VIEW]):
        return unavailable("prefix-stability", TITLE, CAPTION, reason)
    rows = [r for r in data.get(VIEW) if r["turns"]]
    section = Section("prefix-stability", TITLE, CAPTION)
    if not rows:
        section.note = "no conversation this week had a second turn to compare"
        return section
    section.charts.append(Chart("prefix-stability", spec(chart(rows))))
    return section
