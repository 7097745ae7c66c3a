"""ISO weeks: parsing `2026-W48`, and the Monday that names a week in the report views."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, timedelta

from pipeline.errors import UsageError

_WEEK = re.compile(r"^(\d{4})-W(\d{2})$")


@dataclass(frozen=True, slots=True, order=True)
class IsoWeek:
    monday: date

    @classmethod
    def parse(cls, text: str) -> IsoWeek:
        match = _WEEK.match(text.strip())
        if not match:
            raise UsageError(f"bad week {text!r}", hint="write an ISO week like 2026-W48")
        year, week = int(match.group(1)), int(match.group(2))
        try:
            return cls(date.fromisocalendar(year, week, 1))
        except ValueError:
            raise UsageError(f"{text!r} is not a week of {year}") from None

    @classmethod
    def of(cls, day: date) -> IsoWeek:
        return cls(day - timedelta(days=day.weekday()))

    @property
    def sunday(self) -> date:
        return self.monday + timedelta(days=6)

    @property
    def label(self) -> str:
        year, week, _ = self.monday.isocalendar()
        return f"{year}-W{week:02d}"

    def __str__(self) -> str:
        return self.label


def weeks_between(since: date, until: date, among: Iterable[IsoWeek]) -> list[IsoWeek]:
    """The weeks of `among` overlapping [since, until], both days inclusive, in order. Filters
    the weeks that exist rather than walking the range: `--until 9999-12-31` ("everything")
    would step past the last representable date."""
    if until < since:
        raise UsageError(f"--until {until} is before --since {since}")
    return sorted(w for w in set(among) if w.monday <= until and since <= w.sunday)
