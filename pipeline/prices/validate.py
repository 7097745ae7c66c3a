"""The checks behind `cacheaudit prices check`. Each problem names its file and line.

- every cell readable (collected by the loader);
- effective_from < effective_to;
- a known currency, non-negative prices;
- no two rows of one layer overlap in time for one key (provider, model, currency, condition);
- no two aliases of one layer overlap in time for one (provider, alias);
- an alias points at a model that has price rows.

Rows of different layers may overlap: that is how a user row overrides a shipped one.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from fnmatch import fnmatchcase
from typing import Protocol

from pipeline.prices.loader import PriceTables, Problem
from pipeline.prices.rows import BUCKETS, KNOWN_CURRENCIES, Place


class _Dated(Protocol):
    @property
    def place(self) -> Place: ...
    @property
    def effective_from(self) -> datetime | None: ...
    @property
    def effective_to(self) -> datetime | None: ...


def _fmt(value: datetime | None, open_word: str) -> str:
    return value.strftime("%Y-%m-%dT%H:%MZ") if value else open_word


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
    for key, rows in groups.items():
        rows.sort(key=lambda r: r.place.line)
        for i, a in enumerate(rows):
            for b in rows[i + 1 :]:
                if _overlaps(a, b):
                    problems.append(
                        Problem(
                            b.place.file,
                            b.place.line,
                            f"{what} {'/'.join(k for k in key[1:] if k)} {_interval(b)} overlaps"
                            f" line {a.place.line} {_interval(a)}",
                        )
                    )


def check(tables: PriceTables) -> list[Problem]:
    problems = list(tables.problems)
    price_groups: dict[tuple[str, ...], list[_Dated]] = defaultdict(list)
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
        for bucket in BUCKETS:
            value = row.prices.get(bucket)
            if value is not None and not value >= 0:  # also catches NaN
                problems.append(
                    Problem(
                        where.file, where.line, f"{bucket} is negative or not a number: {value}"
                    )
                )
        key = (where.layer, row.provider, row.model, row.currency, row.condition.text)
        price_groups[key].append(row)
    _check_overlaps(price_groups, "price row", problems)

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
