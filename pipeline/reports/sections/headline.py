"""Headline numbers: requests, tokens, hit ratio, cost, savings, the provider below its own
caching rules, and how many requests had unknown usage or no price (counted, never hidden)."""

from __future__ import annotations

from pipeline.reports import escape, numbers
from pipeline.reports.data import Row, WeekData, missing_reason
from pipeline.reports.numbers import count
from pipeline.reports.section import Section, fmt

VIEW = "report_weekly_headline"
COST_VIEW = "report_weekly_cost"
VIEWS = {VIEW: "requests", COST_VIEW: "request_costs"}
TITLE = "This week in numbers"
CAPTION = (
    "Hit ratio is token-weighted: cache-read tokens divided by input tokens, over requests that"
    " reported both. Cost uses the price in force at each request's own time; savings compare it"
    " with the same requests priced without caching; provider below its own rules is what the"
    " provider would have saved you on top had it read every prefix its own caching rules allow"
    " for the prompts as sent (never negative: a request that read more counts 0). Money lost"
    " to prompt changes is another figure: see What to fix. A dash means unknown, never zero."
)


def _card(label: str, value_html: str, detail: str = "") -> str:
    detail_html = f'<div class="detail">{escape.text(detail)}</div>' if detail else ""
    return (
        f'<div class="card"><div class="label">{escape.text(label)}</div>'
        f'<div class="value">{value_html}</div>{detail_html}</div>'
    )


def _ratio_detail(read: int | None, input_tokens: int | None) -> str:
    """The tokens the hit ratio is over; none when no request reported input and read both
    (their sums are then unknown, not 0)."""
    if read is None or input_tokens is None:
        return "no request reported both input and cache read"
    return f"{read:,} of {input_tokens:,} tokens"


def _token_cards(row: Row) -> list[str]:
    excluded = row["requests_excluded_from_ratio"]
    return [
        _card(
            "Requests",
            fmt(row["requests"], "int"),
            f"{count(row['days_with_data'], 'day')} with traffic",
        ),
        _card(
            "Input tokens",
            fmt(row["input_tokens"], "int"),
            f"all prompt tokens, cached included; {count(row['requests_input_unknown'], 'request')}"
            " with unknown input left out",
        ),
        _card(
            "Hit ratio",
            fmt(row["hit_ratio"], "ratio"),
            _ratio_detail(row["ratio_read_tokens"], row["ratio_input_tokens"])
            + f"; {count(excluded, 'request')} left out",
        ),
        _card(
            "Output tokens",
            fmt(row["output_tokens"], "int"),
            f"reasoning included; {count(row['requests_output_unknown'], 'request')}"
            " with unknown output left out",
        ),
        _card(
            "Usage unknown",
            fmt(row["requests_usage_unknown"], "int"),
            "requests whose provider reported no usage",
        ),
    ]


def _money(value: object, currency: str) -> str:
    if value is None:
        return escape.text(None)
    return escape.text(f"{numbers.money(float(str(value)))} {currency}")


def _cost_cards(rows: list[Row]) -> list[str]:
    cards = []
    for row in rows:
        if row["currency"] is None:
            continue  # the row of a week with no priced request
        cur = str(row["currency"])
        cards += [
            _card(
                f"Cost ({cur})",
                _money(row["cost_total"], cur),
                f"{count(row['requests_priced'], 'priced request')}",
            ),
            _card(
                "Saved by caching",
                _money(row["savings"], cur),
                "vs. the same requests uncached; unknown for "
                + count(row["requests_savings_unknown"], "request"),
            ),
            _card(
                "Provider below its own rules",
                _money(row["left_on_table"], cur),
                "cacheable by its rules but not read; unknown for "
                + count(row["requests_left_unknown"], "request"),
            ),
        ]
    unpriced = rows[0]["requests_unpriced_week"] if rows else None
    cards.append(
        _card("No price", fmt(unpriced, "int"), "requests without a cost: no price or no usage")
    )
    return cards


SIMULATED = (
    "answered by the cacheaudit simulator (`simulate serve`), not a provider: their cost is what"
    " the provider would charge, not a bill"
)


def _simulated_card(row: Row) -> list[str]:
    simulated = row.get("requests_simulated")
    if not simulated:
        return []
    return [_card("Simulated", fmt(simulated, "int"), f"requests {SIMULATED}")]


def build(data: WeekData) -> Section:
    rows = data.get(VIEW)
    section = Section("headline", TITLE, CAPTION)
    if reason := missing_reason(VIEW, VIEWS[VIEW]):
        section.note = f"not available: {reason}"
        return section
    cards = _token_cards(rows[0]) if rows else []
    if rows and rows[0].get("requests_simulated"):
        # Money from simulated traffic must not read as a bill: say so beside the cost cards.
        section.note = (
            f"{count(rows[0]['requests_simulated'], 'request')} of this week {SIMULATED}."
        )
        cards += _simulated_card(rows[0])
    if cost_reason := missing_reason(COST_VIEW, VIEWS[COST_VIEW]):
        cards.append(
            _card("Cost, savings, provider shortfall", "", f"not available: {cost_reason}")
        )
    else:
        cards += _cost_cards(data.get(COST_VIEW))
    section.body_html = f'<div class="cards">{"".join(cards)}</div>'
    return section
