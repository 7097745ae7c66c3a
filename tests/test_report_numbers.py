"""One rule prints money and ratios on every surface (summary, weekly cards and tables, index):
a non-zero amount never reads as 0, a ratio short of 0 or 1 never reads as 0% or 100%."""

from __future__ import annotations

import pytest

from pipeline.reports.numbers import money, ratio


@pytest.mark.parametrize(
    ("amount", "text"),
    [
        (0.0, "0.0000"),
        (0.0031, "0.0031"),
        (0.004013, "0.0040"),
        (1234.56789, "1,234.5679"),
        # would be 0.0000 at 4 decimals: two significant digits instead
        (0.000025, "0.000025"),
        (-0.000025, "-0.000025"),
        (0.0000000012, "0.0000000012"),
        # float noise of a difference that is really zero stays zero, never "-0.0000"
        (-4e-19, "0.0000"),
        (-0.0, "0.0000"),
    ],
)
def test_money_shows_four_decimals_and_more_only_for_a_non_zero_amount_that_needs_them(
    amount: float, text: str
) -> None:
    assert money(amount) == text


def test_money_without_grouping_has_no_thousands_separator() -> None:
    assert money(1234.5, grouping=False) == "1234.5000"


@pytest.mark.parametrize(
    ("share", "text"),
    [
        (0.0, "0.0%"),
        (1.0, "100.0%"),
        (0.3667, "36.7%"),
        (9_996 / 10_000, ">99.9%"),
        (40 / 100_000, "<0.1%"),
        (0.9994, "99.9%"),
    ],
)
def test_a_ratio_short_of_0_or_1_never_prints_as_0_or_100_percent(share: float, text: str) -> None:
    assert ratio(share) == text
