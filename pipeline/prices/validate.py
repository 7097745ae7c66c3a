"""The checks behind `cacheaudit prices check`. Each problem names its file and line.

- every cell readable, every price a finite number >= 0 (collected by the loader);
- effective_from < effective_to;
- a known currency;
- no two rows of one layer, provider, model and currency with as many condition clauses can apply
  at one instant: the same condition with overlapping intervals, or different conditions that
  both hold at some instant both rows are in force (utc_time=00:00-12:00 next to 06:00-18:00,
  weekday=sat-sun next to utc_time=..., prompt_tokens>200000 next to >=200001). Such rows rank
  equally, so which one prices a request would hang on their order in the files;
- no two aliases of one layer overlap in time for one (provider, alias);
- an alias points at a model that has price rows;
- an alias is not shadowed by a price row for the alias name itself, of its own layer, in force
  at the same time (an exact row wins over an alias, so that alias could never apply).

Rows of different layers may overlap: that is how a user row overrides a shipped one.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from typing import Protocol

from pipeline.prices.loader import MAX_PRICE_PER_MTOK, PriceTables, Problem
from pipeline.prices.rows import (
    ALL_PRICES,
    KNOWN_CURRENCIES,
    Condition,
    Place,
    PriceRow,
    is_pattern,
)


class _Dated(Protocol):
    @property
    def place(self) -> Place: ...
    @property
    def effective_from(self) -> datetime | None: ...
    @property
    def effective_to(self) -> datetime | None: ...


def _fmt(value: datetime | None, open_word: str) -> str:
    return value.strftime("%Y-%m-%dT%H:%MZ") if value else open_word


def _fmt_ts(value: float, open_word: str) -> str:
    if math.isinf(value):
        return open_word
    return _fmt(datetime.fromtimestamp(value, UTC), open_word)


def _span(row: _Dated) -> tuple[float, float]:
    start = row.effective_from.timestamp() if row.effective_from else float("-inf")
    end = row.effective_to.timestamp() if row.effective_to else float("inf")
    return start, end


def _overlaps(a: _Dated, b: _Dated) -> bool:
    (a_from, a_to), (b_from, b_to) = _span(a), _span(b)
    return a_from < b_to and b_from < a_to


def _interval(row: _Dated) -> str:
    return f"[{_fmt(row.effective_from, 'open')}, {_fmt(row.effective_to, 'open')})"


def _check_overlaps(
    groups: dict[tuple[str, ...], list[_Dated]], what: str, problems: list[Problem]
) -> None:
    """Rows in each group are in load order (file order, then line)."""
    for key, rows in groups.items():
        for i, a in enumerate(rows):
            for b in rows[i + 1 :]:
                if _overlaps(a, b):
                    problems.append(
                        Problem(
                            b.place.file,
                            b.place.line,
                            f"{what} {'/'.join(k for k in key[1:] if k)} {_interval(b)} overlaps"
                            f" {a.place.row_id} {_interval(a)}",
                        )
                    )


_DAY = 86400
_DAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


def _both(
    a: Condition, b: Condition
) -> tuple[tuple[tuple[int, int], ...] | None, tuple[int, ...] | None, int | None] | None:
    """Where both conditions hold: (windows, weekdays, min prompt tokens), None in a part for
    "no limit"; None when they never hold together (disjoint windows or weekdays)."""
    if a.windows and b.windows:
        windows: tuple[tuple[int, int], ...] | None = tuple(
            (max(s1, s2), min(e1, e2))
            for s1, e1 in a.windows
            for s2, e2 in b.windows
            if max(s1, s2) < min(e1, e2)
        )
        if not windows:
            return None
    else:
        windows = a.windows or b.windows or None
    if a.weekdays and b.weekdays:
        days: tuple[int, ...] | None = tuple(sorted(set(a.weekdays) & set(b.weekdays)))
        if not days:
            return None
    else:
        days = a.weekdays or b.weekdays or None
    # prompt_tokens only sets lower bounds: two of them always hold together above the larger.
    bounds = [t for t in (a.min_prompt_tokens, b.min_prompt_tokens) if t is not None]
    return windows, days, max(bounds) if bounds else None


def _holds_within(
    windows: tuple[tuple[int, int], ...] | None,
    days: tuple[int, ...] | None,
    start: float,
    end: float,
) -> bool:
    """Whether some instant of [start, end) falls on one of `days` inside one of `windows`."""
    if end - start >= 8 * _DAY:  # every weekday at every second of the day occurs
        return True
    first = int(start // _DAY) * _DAY
    for day_start in range(first, int(end) + 1, _DAY):
        weekday = datetime.fromtimestamp(day_start, UTC).isoweekday()
        if days is not None and weekday not in days:
            continue
        for w_start, w_end in windows or ((0, _DAY),):
            if day_start + w_start < end and start < day_start + w_end:
                return True
    return False


def _clock(second: int) -> str:
    return f"{second // 3600:02d}:{second % 3600 // 60:02d}"


def _days_text(days: tuple[int, ...]) -> str:
    runs: list[list[int]] = []
    for d in days:
        if runs and runs[-1][-1] == d - 1:
            runs[-1].append(d)
        else:
            runs.append([d])
    return ",".join(
        _DAY_NAMES[r[0] - 1] if len(r) == 1 else f"{_DAY_NAMES[r[0] - 1]}-{_DAY_NAMES[r[-1] - 1]}"
        for r in runs
    )


def _condition_text(
    windows: tuple[tuple[int, int], ...] | None, days: tuple[int, ...] | None, prompt: int | None
) -> str:
    """A condition in the table's own language, e.g. utc_time=06:00-12:00; weekday=sat-sun."""
    parts = []
    if windows:
        parts.append("utc_time=" + ",".join(f"{_clock(s)}-{_clock(e)}" for s, e in windows))
    if days:
        parts.append("weekday=" + _days_text(days))
    if prompt is not None:
        parts.append(f"prompt_tokens>={prompt}")
    return "; ".join(parts)


def _check_price_conflicts(
    groups: dict[tuple[str, ...], list[PriceRow]], problems: list[Problem]
) -> None:
    """Rows of one layer, provider, model and currency with as many clauses rank equally: two
    of them must never both apply at one instant (rows in each group are in load order)."""
    for rows in groups.values():
        for i, a in enumerate(rows):
            for b in rows[i + 1 :]:
                if not _overlaps(a, b):
                    continue
                (a_from, a_to), (b_from, b_to) = _span(a), _span(b)
                start, end = max(a_from, b_from), min(a_to, b_to)
                what = f"price row {b.provider}/{b.model}"
                if b.condition == a.condition:
                    cond = f" {b.condition.text}" if b.condition.text else ""
                    problems.append(
                        Problem(
                            b.place.file,
                            b.place.line,
                            f"{what}{cond} {_interval(b)} overlaps {a.place.row_id} {_interval(a)}",
                        )
                    )
                    continue
                both = _both(a.condition, b.condition)
                if both is None or not _holds_within(both[0], both[1], start, end):
                    continue
                when = _condition_text(*both)
                problems.append(
                    Problem(
                        b.place.file,
                        b.place.line,
                        f"{what} ({b.condition.text}) {_interval(b)} and {a.place.row_id}"
                        f" ({a.condition.text}) {_interval(a)} both apply at equal rank"
                        f" when {when!r} in [{_fmt_ts(start, 'open')}, {_fmt_ts(end, 'open')}),"
                        " so which one prices a request there hangs on their order; make"
                        " their conditions disjoint, or give the row that should win more"
                        " clauses",
                    )
                )


def check(tables: PriceTables) -> list[Problem]:
    problems = list(tables.problems)
    price_groups: dict[tuple[str, ...], list[PriceRow]] = defaultdict(list)
    for row in tables.prices:
        where = row.place
        if row.effective_from and row.effective_to and row.effective_from >= row.effective_to:
            problems.append(
                Problem(
                    where.file,
                    where.line,
                    f"effective_from is not before effective_to {_interval(row)}",
                )
            )
        if row.currency not in KNOWN_CURRENCIES:
            problems.append(
                Problem(
                    where.file,
                    where.line,
                    f"unknown currency {row.currency!r}"
                    f" (known: {', '.join(sorted(KNOWN_CURRENCIES))})",
                )
            )
        for bucket in ALL_PRICES:
            value = row.prices.get(bucket)
            # The loader refuses these already; rows built another way are checked again.
            if value is not None and not 0 <= value <= MAX_PRICE_PER_MTOK:  # also NaN, inf
                problems.append(
                    Problem(
                        where.file,
                        where.line,
                        f"{bucket} is negative, not a finite number or absurd: {value}",
                    )
                )
        key = (
            where.layer,
            row.provider,
            row.model,
            row.currency,
            str(row.condition.specificity),
        )
        price_groups[key].append(row)
    _check_price_conflicts(price_groups, problems)

    alias_groups: dict[tuple[str, ...], list[_Dated]] = defaultdict(list)
    for alias in tables.aliases:
        where = alias.place
        if (
            alias.effective_from
            and alias.effective_to
            and (alias.effective_from >= alias.effective_to)
        ):
            problems.append(
                Problem(where.file, where.line, "effective_from is not before effective_to")
            )
        if not _has_prices(tables, alias.provider, alias.model):
            problems.append(
                Problem(
                    where.file,
                    where.line,
                    f"alias {alias.alias} points at"
                    f" {alias.provider}/{alias.model}, which has no price rows",
                )
            )
        for row in tables.prices:
            if (
                row.place.layer == where.layer
                and row.provider == alias.provider
                and row.model == alias.alias
                and not is_pattern(row.model)
                and _overlaps(row, alias)
            ):
                problems.append(
                    Problem(
                        where.file,
                        where.line,
                        f"alias {alias.provider}/{alias.alias} -> {alias.model}"
                        f" {_interval(alias)} is not used while price row {row.place.row_id}"
                        f" {_interval(row)} for {alias.alias} itself is in force (a row for"
                        " the exact name wins over an alias of its layer); end one of them",
                    )
                )
                break
        alias_groups[(where.layer, alias.provider, alias.alias)].append(alias)
    _check_overlaps(alias_groups, "alias", problems)

    seen: dict[tuple[str, str, str], Place] = {}
    for prefix in tables.prefixes:
        prefix_key = (prefix.place.layer, prefix.gateway, prefix.prefix)
        if prefix_key in seen:
            problems.append(
                Problem(
                    prefix.place.file,
                    prefix.place.line,
                    f"gateway prefix {prefix.gateway}"
                    f" {prefix.prefix}/ repeats line {seen[prefix_key].line}",
                )
            )
        seen[prefix_key] = prefix.place
    return sorted(problems, key=lambda p: (p.file, p.line))


def _has_prices(tables: PriceTables, provider: str, model: str) -> bool:
    return any(r.provider == provider and fnmatchcase(model, r.model) for r in tables.prices)


def format_problems(problems: Sequence[Problem]) -> str:
    return "\n".join(str(p) for p in problems)
