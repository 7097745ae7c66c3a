"""The conversation page's chart and table: each turn's input stacked read / miss, the read the
provider's rules allowed (expected), and the cause of every cache break with its diff excerpt."""

from __future__ import annotations

import altair as alt

from pipeline.reports.data import Row
from pipeline.reports.numbers import count
from pipeline.reports.section import CHART_HEIGHT, CHART_WIDTH, Column, Section, spec, table
from pipeline.reports.section import Chart as PageChart

VIEW = "report_conversation_turns"
VIEWS = {VIEW: "conversations"}
TITLE = "Turn by turn"
CAPTION = (
    "Each bar is one request of the conversation: its input tokens split into those read from"
    " the provider's cache (green) and those sent uncached (red). The black tick is the read the"
    " provider's own caching rules would have allowed; a marker above a bar names the cause when"
    " the cached prefix broke. The table lists every turn with the change that broke the prefix"
    " and the money that break lost at the day's price."
)
# Why a turn can show a small expected read beside a large loss: two baselines, both true
EXPECTED_VS_LOST = (
    " Expected read and tokens lost measure against different baselines: expected read is what"
    " the provider's rules allow to be read from the prompt as it was sent, and tokens lost is"
    " what the turn would have read had it kept the prefix the previous turn had built, so a turn"
    " that changed its early prompt expects little and loses much."
)
PARTS = ["cache read", "uncached"]
COLUMNS = (
    Column("turn", "Turn", "int"),
    Column("started_at", "Started (UTC)", "time"),
    Column("input_tokens", "Input tokens", "int"),
    Column("cache_read_tokens", "Cache read", "int"),
    Column("expected_read_tokens", "Expected read", "int"),
    Column("cause", "Cause"),
    Column("change_class", "Change"),
    Column("tokens_lost", "Tokens lost", "int"),
    Column("money", "Money lost"),
    Column("excerpt", "Diff excerpt", "code"),
)


def chart(rows: list[Row]) -> alt.LayerChart:
    data = alt.InlineData(values=rows)
    turn = alt.X("turn:O", title="Turn", axis=alt.Axis(labelAngle=0))
    bars = (
        alt.Chart(data)
        .transform_fold(["read_tokens", "miss_tokens"], as_=["kind", "tokens"])
        .transform_calculate(part="datum.kind == 'read_tokens' ? 'cache read' : 'uncached'")
        .mark_bar()
        .encode(
            x=turn,
            y=alt.Y("tokens:Q", title="Input tokens", stack="zero"),
            color=alt.Color(
                "part:N",
                title="Input tokens",
                sort=PARTS,
                scale=alt.Scale(domain=PARTS, range=["#54a24b", "#e45756"]),
            ),
            order=alt.Order("kind:N"),
            tooltip=[
                alt.Tooltip("turn:O", title="Turn"),
                alt.Tooltip("part:N", title="Part"),
                alt.Tooltip("tokens:Q", title="Tokens", format=","),
                alt.Tooltip("input_tokens:Q", title="Input tokens", format=","),
                alt.Tooltip("expected_read_tokens:Q", title="Expected read", format=","),
            ],
        )
    )
    expected = (
        alt.Chart(data)
        .mark_tick(color="#222222", thickness=2)
        .encode(
            x=turn,
            y=alt.Y("expected_read_tokens:Q"),
            tooltip=[
                alt.Tooltip("turn:O", title="Turn"),
                alt.Tooltip("expected_read_tokens:Q", title="Expected read", format=","),
                alt.Tooltip("cache_read_tokens:Q", title="Reported read", format=","),
            ],
        )
    )
    causes = (
        alt.Chart(data)
        .transform_filter("datum.cause != null")
        .mark_point(shape="triangle-down", size=90, filled=True, yOffset=-8)
        .encode(
            x=turn,
            y=alt.Y("input_tokens:Q"),
            shape=alt.Shape("cause:N", title="Cache break cause"),
            tooltip=[
                alt.Tooltip("turn:O", title="Turn"),
                alt.Tooltip("cause:N", title="Cause"),
                alt.Tooltip("change_class:N", title="Change"),
                alt.Tooltip("tokens_lost:Q", title="Tokens lost", format=","),
                alt.Tooltip("excerpt:N", title="Diff excerpt"),
            ],
        )
    )
    result: alt.LayerChart = alt.LayerChart(layer=[bars, expected, causes]).properties(
        title="Input per turn: read from cache vs uncached, with the expected read",
        width=CHART_WIDTH,
        height=CHART_HEIGHT,
    )
    return result


def _with_money(row: Row) -> Row:
    """The money a break lost (`0.0012 USD`; 0 for a break that lost no token), blank for a
    turn without a break, unknown (—) when its loss or price is unknown."""
    from pipeline.reports.numbers import money

    cost = row.get("lost_cost")
    text = None if cost is None else f"{money(cost)} {row.get('currency') or ''}".rstrip()
    return {**row, "money": "" if row.get("cause") is None else text}


def build(rows: list[Row]) -> Section:
    breaks = sum(1 for r in rows if r["cause"] not in (None, "cold_start"))
    caption = (
        CAPTION
        + EXPECTED_VS_LOST
        + f" {count(len(rows), 'turn')}, {count(breaks, 'cache break')} after the first."
    )
    # counted, never shown as 0: a break whose loss needs a token count that was not reported
    unknown = sum(1 for r in rows if r["cause"] is not None and r.get("tokens_lost") is None)
    if unknown:
        caption += (
            f" Tokens lost is unknown (\u2014) for {count(unknown, 'break')}: a token count it"
            " needs was not reported."
        )
    plotted = [r for r in rows if r["input_tokens"] is not None]
    if len(plotted) < len(rows):
        left = [str(r["turn"]) for r in rows if r["input_tokens"] is None]
        caption += (
            f" The chart leaves out {count(len(left), 'turn')} whose input was not reported"
            f" (turn {', '.join(left[:5])}{', ...' if len(left) > 5 else ''}); the table lists"
            " them."
        )
    section = Section(
        "turns", TITLE, caption, body_html=table(COLUMNS, [_with_money(r) for r in rows])
    )
    if plotted:
        section.charts.append(PageChart("conversation-turns", spec(chart(plotted))))
    return section
