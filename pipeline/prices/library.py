"""The lowest price layer: rows built from the installed `genai-prices` package.

genai-prices (pydantic's price library) knows some 2,300 models of ~47 providers, with start
dates, time-of-day prices and tiers by prompt size, and is kept current upstream; its data ships
inside the package, so nothing is fetched at run time. Its models become our price rows here,
once per process:

- a model's match rule becomes model names: `equals` an exact name, `starts_with` / `ends_with`
  / `contains` a GLOB pattern, `or` several rows; a rule we cannot say as a GLOB (`and`, a
  regular expression) gives no row, and within an `or` only its other clauses do;
- conditional prices become rows of their own: a start date opens a period (the rows before it
  end there), a time-of-day window becomes a `utc_time=` condition within its period, as the
  library applies "the last price whose constraint holds";
- tiered prices (a higher rate for every token once the prompt is over a threshold) become a
  `prompt_tokens>N` row per threshold;
- input, cache read, cache writes (5-minute and 1-hour) and output prices fill our buckets,
  audio input and audio cache reads our audio prices, and the fee per thousand web searches
  our `web_search_per_1k`;
- a provider that resells other providers' models (Azure OpenAI) also gets their rows, after
  its own, as the library's own lookup falls back to them.

Our researched rows (the shipped CSVs) and the user's `--prices` rows rank above these: a
request is priced here only where neither has a row. Rows the library holds twice for one name
are kept once (its first model wins, as its own lookup picks the first match).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime
from decimal import Decimal
from functools import lru_cache
from typing import Any

from pipeline.prices.rows import ALL_PRICES, Place, PriceRow, is_pattern, parse_condition

LAYER = "library"
# genai-prices provider ids that differ from the `provider` our ingest writes
PROVIDERS = {
    "azure": "azure_openai",
    "aws": "bedrock",
    "zhipuai": "zhipu",
    "zai": "zhipu",
    "moonshotai": "moonshot",
    "x-ai": "xai",
}
# our bucket -> the library's price field
FIELDS = {
    "input_cache_miss_per_mtok": "input_mtok",
    "input_cache_hit_per_mtok": "cache_read_mtok",
    "cache_write_5m_per_mtok": "cache_write_mtok",
    "cache_write_1h_per_mtok": "cache_write_1h_mtok",
    "output_per_mtok": "output_mtok",
    "input_audio_cache_miss_per_mtok": "input_audio_mtok",
    "input_audio_cache_hit_per_mtok": "cache_audio_read_mtok",
    "output_audio_per_mtok": "output_audio_mtok",
    # the library's price per thousand searches is our per-1k fee as it is
    "web_search_per_1k": "web_searches_kcount",
    # per thousand requests, on top of the tokens (Perplexity: the library gives the fee of the
    # largest search context, which the response does not report)
    "request_fee_per_1k": "requests_kcount",
}


def version() -> str | None:
    try:
        from importlib.metadata import version as installed

        return installed("genai-prices")
    except Exception:  # not installed: the layer is empty
        return None


def _names(match: Any) -> list[str]:
    """The GLOB patterns a match rule covers; [] when it cannot be said as GLOBs."""
    kind = type(match).__name__
    if kind == "ClauseOr":
        # the clauses we can say as GLOBs, without the ones we cannot (a regular expression
        # for dated snapshots): fewer names are matched, never a wrong one
        return [x for clause in match.or_ for x in _names(clause)]
    for attribute, pattern in (
        ("equals", "{}"),
        ("starts_with", "{}*"),
        ("ends_with", "*{}"),
        ("contains", "*{}*"),
    ):
        value = getattr(match, attribute, None)
        if isinstance(value, str) and value and not is_pattern(value):
            return [pattern.format(value.lower())]
    return []


def _value(price: Any, tier: int | None) -> float | None:
    """A bucket's price per million tokens at a tier threshold (None: the base rate)."""
    if price is None:
        return None
    if isinstance(price, Decimal | int | float):
        return float(price)
    rate = price.base
    for step in price.tiers:
        if tier is not None and step.start <= tier:
            rate = step.price
    return float(rate)


def _field(prices: Any, name: str) -> Any:
    """A price field as stored (its attribute lookup goes through the library's unit registry,
    ten times slower, for fields never set)."""
    return vars(prices).get(name)


def _tiers(prices: Any) -> list[int]:
    starts: set[int] = set()
    for field in FIELDS.values():
        price = _field(prices, field)
        for step in getattr(price, "tiers", None) or ():
            starts.add(int(step.start))
    return sorted(starts)


def _periods(model: Any) -> Iterator[tuple[datetime | None, datetime | None, str, Any]]:
    """(effective_from, effective_to, time-of-day condition, prices) of each price of a model."""
    prices = model.prices
    if not isinstance(prices, list):
        yield None, None, "", prices
        return
    periods: list[tuple[datetime | None, list[tuple[str, Any]]]] = [(None, [])]
    for conditional in prices:
        constraint = conditional.constraint
        kind = type(constraint).__name__
        if constraint is None:
            periods[-1][1].append(("", conditional.prices))
        elif kind == "StartDateConstraint":
            start = constraint.start_date
            at = datetime(start.year, start.month, start.day, tzinfo=UTC)
            if isinstance(start, datetime):
                at = start.astimezone(UTC)
            periods.append((at, [("", conditional.prices)]))
        elif kind == "TimeOfDateConstraint":
            window = f"utc_time={_clock(constraint.start_time)}-{_clock(constraint.end_time)}"
            periods[-1][1].append((window, conditional.prices))
    for i, (start, entries) in enumerate(periods):
        end = periods[i + 1][0] if i + 1 < len(periods) else None
        for condition, price in entries:
            yield start, end, condition, price


def _clock(value: Any) -> str:
    if value.tzinfo is not None and value.utcoffset():
        moment = datetime.combine(date(2000, 1, 1), value).astimezone(UTC)
        value = moment.timetz()
    return f"{value.hour:02d}:{value.minute:02d}"


@lru_cache(maxsize=1)
def rows() -> tuple[PriceRow, ...]:
    """Every price row the installed genai-prices gives (empty when it is not installed).

    Importing the library and converting its ~2,300 models takes ~0.5 s, paid by every command
    that prices anything; the rows are kept in a cache file (pipeline/prices/library_cache.py)
    named by the library's version and this converter's code, so later processes read them."""
    from pipeline.prices import library_cache

    release = version()
    if release is None:
        return ()
    cached = library_cache.load(release)
    if cached is not None:
        return cached
    built = _convert(release)
    library_cache.store(release, built)
    return built


def _convert(release: str) -> tuple[PriceRow, ...]:
    from genai_prices import data

    label = f"genai-prices {release}"
    out: list[PriceRow] = []
    seen: set[tuple[str, str, datetime | None, str]] = set()
    line = 0
    by_id = {p.id: p for p in data.providers}
    for provider in data.providers:
        ours = PROVIDERS.get(provider.id, provider.id)
        source = " ; ".join(provider.pricing_urls or [])
        # a provider that resells others' models (Azure OpenAI, Vertex AI's Claude) is priced
        # with their rows after its own, as the library's lookup falls back to them
        fallbacks = [by_id[f] for f in provider.fallback_model_providers or () if f in by_id]
        models = [(m, p is not provider) for p in (provider, *fallbacks) for m in p.models]
        for model, resold in models:
            names = _names(model.match)
            for start, end, window, prices in _periods(model):
                if _field(prices, "input_mtok") is None:
                    continue  # priced per request or per character only: not a token price
                for tier in [None, *_tiers(prices)]:
                    condition = ";".join(
                        c for c in (window, f"prompt_tokens>{tier}" if tier else "") if c
                    )
                    for name in names:
                        key = (ours, name, start, condition)
                        if key in seen:
                            continue
                        seen.add(key)
                        line += 1
                        out.append(
                            PriceRow(
                                place=Place(label, line, LAYER, fallback=resold),
                                provider=ours,
                                model=name,
                                effective_from=start,
                                effective_to=end,
                                currency="USD",
                                condition=parse_condition(condition),
                                prices={
                                    b: _value(_field(prices, FIELDS[b]), tier)
                                    if b in FIELDS
                                    else None
                                    for b in ALL_PRICES
                                },
                                notes=f"{provider.id}: {model.id} in {label}",
                                source=source,
                            )
                        )
    return tuple(_without_conflicts(out))


def _without_conflicts(built: list[PriceRow]) -> list[PriceRow]:
    """The rows, less every row of a model whose rows `prices check` would refuse (a model
    with several tier thresholds: our conditions give each tier a lower bound only, so two
    tiers would both apply above the higher one). Such a model is unpriced by this layer, never
    priced at the wrong tier."""
    from pipeline.prices.loader import PriceTables
    from pipeline.prices.validate import check

    lines = {p.line for p in check(PriceTables(prices=built))}
    refused = {(r.provider, r.model) for r in built if r.place.line in lines}
    return [r for r in built if (r.provider, r.model) not in refused]
