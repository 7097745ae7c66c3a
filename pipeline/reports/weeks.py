"""ISO weeks: parsing `2026-W48`, and the Monday that names a week in the report views."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, timedelta

from pipeline.errors import UsageError

# ISO 8601's extended (2026-W53) and basic (2026W53) forms; `w` as well as `W`, as times take
# `z` as well as `Z`.
_WEEK = re.compile(r"^(\d{4})-?[Ww](\d{2})$")


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
            raise UsageError(f"{text!r} is not a week of {year}", hint=_weeks_of(year)) from None

    @classmethod
    def of(cls, day: date) -> IsoWeek:
        return cls(day - timedelta(days=day.weekday()))

    @property
    def sunday(self) -> date:
        return self.monday + timedelta(days=6)

    @property
    def label(self) -> str:
        year, week, _ = self.monday.isocalendar()
        return f"{year:04d}-W{week:02d}"

    def __str__(self) -> str:
        return self.label


def _weeks_of(year: int) -> str | None:
    """`2026 has weeks W01 to W53`: how many ISO weeks a year has (52, or 53 when it has a
    Thursday 53 weeks in; December 28 is always in the last week)."""
    try:
        last = date(year, 12, 28).isocalendar().week
    except ValueError:  # year 0
        return None
    return f"{year} has weeks W01 to W{last:02d}"


def weeks_between(since: date, until: date, among: Iterable[IsoWeek]) -> list[IsoWeek]:
    """The weeks of `among` overlapping [since, until], both days inclusive, in order. Filters
    the weeks that exist rather than walking the range: `--until 9999-12-31` ("everything")
    would step past the last representable date."""
    if until < since:
        raise UsageError(f"--until {until} is before --since {since}")
    return sorted(w for w in set(among) if w.monday <= until and since <= w.sunday)


_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def day_label(day: date) -> str:
    """How a day reads on a chart axis: `Mon 23 Nov` (English whatever the locale, as the
    axis of the charts that read dates themselves)."""
    return f"{_WEEKDAYS[day.weekday()]} {day.day:02d} {_MONTHS[day.month - 1]}"


def week_days(rows: Iterable[dict[str, object]]) -> list[str]:
    """The axis of a per-day chart: the seven days (`day_label`) of the week its rows are of
    (their `week` column), Monday first, whether or not each day has data; the days of the
    rows themselves when they span other weeks or name none."""
    mondays = {str(r["week"]) for r in rows if r.get("week")}
    if len(mondays) == 1:
        monday = date.fromisoformat(mondays.pop()[:10])
        return [day_label(monday + timedelta(days=i)) for i in range(7)]
    days = sorted({date.fromisoformat(str(r["day"])[:10]) for r in rows})
    return [day_label(d) for d in days]


def labelled(rows: Iterable[dict[str, object]]) -> list[dict[str, object]]:
    """Copies of per-day rows with their `day_label`, the field a per-day chart's axis reads."""
    return [{**r, "day_label": day_label(date.fromisoformat(str(r["day"])[:10]))} for r in rows]
