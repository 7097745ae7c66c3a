"""Which price rows are in force for a model at an instant, in Python (for `prices show`).

The SQL view `request_costs` applies the same rules per request; tests check they agree:
1. a gateway prefix (`openai/` on OpenRouter, `models/` anywhere) picks the provider and is cut;
2. an alias in force maps the name to the priced model (dated snapshots, `deepseek-chat`),
   unless a price row for that exact name (not a pattern) is in force at the instant, from the
   alias's layer or a preferred one: that row's name is priced as itself. So a user row for
   claude-sonnet-4-5-20250929 wins over the shipped alias to claude-sonnet-4-5, and a user alias
   still wins over a shipped row;
3. price rows of that provider whose model pattern matches and whose interval holds the instant;
   the price library's rows only for a name no other layer knows at any time (`known_above`).
Ranking among matching rows: user before shipped before the price library, preferred currency,
more condition clauses, exact name before pattern, later effective_from, then load order (file
order, then line number; `prices check` refuses equal-rank rows that can both apply, so this
last step decides only between different model patterns). Aliases and gateway prefixes end on
load order too. The SQL side reads the same order from the `load_order` column.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from fnmatch import fnmatchcase

from pipeline.prices.loader import PriceTables
from pipeline.prices.rows import CURRENCY_PREFERENCE, Alias, PriceRow, is_pattern


@dataclass(frozen=True, slots=True)
class Resolution:
    provider: str
    requested: str
    model: str  # the name price rows are looked up by
    alias: Alias | None
    # The best price row for the requested name itself in force at the instant, when an alias
    # is in force too. With `alias` None it won and `skipped_alias` is the alias it beat; with
    # `alias` set, that alias is of a preferred layer (a user alias over a shipped row).
    skipped_alias: Alias | None = None
    exact_row: PriceRow | None = None


def currency_rank(currency: str) -> int:
    try:
        return CURRENCY_PREFERENCE.index(currency)
    except ValueError:
        return len(CURRENCY_PREFERENCE)


def resolve(tables: PriceTables, provider: str, model: str, at: datetime) -> Resolution:
    provider, model = provider.lower(), model.lower()
    if "/" in model:
        head, rest = model.split("/", 1)
        matches = [p for p in tables.prefixes if p.prefix == head and p.gateway in (provider, "*")]
        if matches:
            best = min(matches, key=lambda p: (p.place.layer_rank, p.gateway == "*"))
            provider, model = best.provider or provider, rest
    aliases = [
        a
        for a in tables.aliases
        if a.provider == provider and fnmatchcase(model, a.alias) and a.in_force(at)
    ]
    if not aliases:
        return Resolution(provider, model, model, None)
    # min() keeps the first of equals, so ties end on load order, as the SQL's load_order.
    best_alias = min(
        aliases, key=lambda a: (a.place.layer_rank, is_pattern(a.alias), -len(a.alias))
    )
    exact = [
        r
        for r in tables.prices
        if r.provider == provider
        and r.model == model
        and not is_pattern(r.model)
        and r.in_force(at)
    ]
    exact_row = min(exact, key=lambda r: r.place.layer_rank) if exact else None
    # The best alias is of the most preferred layer among them, so an exact row of its layer or
    # a preferred one shadows every alias in force.
    if exact_row and exact_row.place.layer_rank <= best_alias.place.layer_rank:
        return Resolution(provider, model, model, None, best_alias, exact_row)
    return Resolution(provider, model, best_alias.model, best_alias, None, exact_row)


def rank_key(row: PriceRow) -> tuple[int, int, int, bool, float]:
    start = row.effective_from.timestamp() if row.effective_from else float("-inf")
    return (
        row.place.layer_rank,
        currency_rank(row.currency),
        -row.condition.specificity,
        is_pattern(row.model),
        -start,
    )


LIBRARY_RANK = 2  # the price library's layer (pipeline/prices/library.py)


def known_above(tables: PriceTables, res: Resolution) -> bool:
    """Whether our researched rows or the user's name the model at any time (a price row's
    pattern, an alias): then the price library is not asked for it, as request_costs."""
    names = (res.model, res.requested)
    return any(
        r.provider == res.provider
        and r.place.layer_rank < LIBRARY_RANK
        and any(fnmatchcase(n, r.model) for n in names)
        for r in tables.prices
    ) or any(
        a.provider == res.provider
        and a.place.layer_rank < LIBRARY_RANK
        and fnmatchcase(res.requested, a.alias)
        for a in tables.aliases
    )


def rows_in_force(tables: PriceTables, res: Resolution, at: datetime) -> list[PriceRow]:
    """Every row for the model in force at `at` (all currencies and conditions), best first;
    rows of equal rank in load order (file order, then line number), as request_costs. The
    price library's rows only for a model no other layer names."""
    library = not known_above(tables, res)
    rows = [
        (rank_key(r), order, r)
        for order, r in enumerate(tables.prices)
        if r.provider == res.provider
        and fnmatchcase(res.model, r.model)
        and r.in_force(at)
        and (library or r.place.layer_rank < LIBRARY_RANK)
    ]
    return [r for _, _, r in sorted(rows, key=lambda item: item[:2])]


def pick(
    tables: PriceTables, res: Resolution, at: datetime, prompt_tokens: int | None
) -> PriceRow | None:
    """The row that prices a request (what request_costs picks), or None."""
    for row in rows_in_force(tables, res, at):
        if row.condition.holds(at, prompt_tokens):
            return row
    return None
