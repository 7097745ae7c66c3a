"""Typed price rows, alias rows and gateway prefixes, and the condition mini-language.

A condition narrows when a row applies, beyond its [effective_from, effective_to) interval:

    utc_time=16:30-00:30             time-of-day window(s) in UTC, end exclusive, may wrap midnight;
                                     several windows separated by commas
    weekday=mon-fri                  ISO weekdays in UTC (ranges or lists: mon,wed,sat-sun)
    prompt_tokens>200000             the WHOLE prompt (input incl. cache read and write) is over
                                     the threshold; also >=. Every token of the request is then
                                     priced at that row's rates (long-context tiers).

Clauses are joined with `;`. Among the rows that match a request, the one with more clauses wins,
so an unconditioned row is the default and conditioned rows override it where they apply.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from datetime import datetime

BUCKETS = (
    "input_cache_miss_per_mtok",
    "input_cache_hit_per_mtok",
    "cache_write_5m_per_mtok",
    "cache_write_1h_per_mtok",
    "output_per_mtok",
)
# Optional columns of a price table (a table without them is read as leaving them empty):
# audio input and output at their own rates (Gemini 2.5 Flash: 1.00 per million audio input
# against 0.30 for text; gpt-audio: 64.00 per million audio output against 10.00), and the fee
# per 1,000 server-side web searches (Anthropic: 10 USD), and a fee per 1,000 requests on top of
# the tokens (Perplexity's Sonar models). An empty audio price means audio costs what text does;
# an empty search fee leaves a request that searched unpriced; an empty request fee is none.
OPTIONAL_PRICES = (
    "input_audio_cache_miss_per_mtok",
    "input_audio_cache_hit_per_mtok",
    "output_audio_per_mtok",
    "web_search_per_1k",
    "request_fee_per_1k",
)
ALL_PRICES = (*BUCKETS, *OPTIONAL_PRICES)
PRICE_COLUMNS = (
    "provider",
    "model",
    "effective_from",
    "effective_to",
    "currency",
    "condition",
    *BUCKETS,
    "notes",
    "source",
)
ALIAS_COLUMNS = ("provider", "alias", "model", "effective_from", "effective_to", "note", "source")
PREFIX_COLUMNS = ("gateway", "prefix", "provider", "note", "source")

# ISO 4217 codes a price table may use. A typo such as "UDS" would silently split aggregates.
KNOWN_CURRENCIES = frozenset(
    "USD CNY EUR GBP JPY KRW INR CAD AUD CHF SGD HKD BRL SEK NOK DKK PLN MXN ZAR TWD".split()
)
# Shipped tables carry some prices in two currencies; a request is priced once, in the first of
# these that has a row (user rows always win first). Users paying in CNY add their own CNY rows.
CURRENCY_PREFERENCE = ("USD", "CNY")

_DAYS = {"mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6, "sun": 7}
_CLOCK = re.compile(r"^(\d{2}):(\d{2})$")
_PROMPT = re.compile(r"^prompt_tokens\s*(>=|>)\s*(\d+)$")
# One clause per kind; how to say several things with one clause.
_KINDS = {
    "utc_time": "several windows go in one clause: utc_time=00:00-08:00,16:30-24:00",
    "weekday": "several days go in one clause: weekday=mon,wed,sat-sun",
    "prompt_tokens": "one threshold per row; a tier above it is a row of its own",
}


class ConditionError(ValueError):
    """A condition that cannot be read; the message says why."""


@dataclass(frozen=True, slots=True)
class Condition:
    text: str = ""
    windows: tuple[tuple[int, int], ...] = ()  # [start, end) seconds of the UTC day, unwrapped
    weekdays: tuple[int, ...] = ()  # ISO 1 = Monday .. 7 = Sunday; empty = every day
    min_prompt_tokens: int | None = None  # inclusive lower bound on the whole prompt

    @property
    def specificity(self) -> int:
        return bool(self.windows) + bool(self.weekdays) + (self.min_prompt_tokens is not None)

    def holds(self, at: datetime, prompt_tokens: int | None) -> bool | None:
        """Whether the condition holds; None when it depends on an unknown prompt size."""
        if self.weekdays and at.isoweekday() not in self.weekdays:
            return False
        if self.windows:
            sec = at.hour * 3600 + at.minute * 60 + at.second
            if not any(start <= sec < end for start, end in self.windows):
                return False
        if self.min_prompt_tokens is not None:
            if prompt_tokens is None:
                return None
            return prompt_tokens >= self.min_prompt_tokens
        return True


def _clock(text: str) -> int:
    m = _CLOCK.match(text.strip())
    if not m or int(m[1]) > 24 or int(m[2]) > 59 or (int(m[1]) == 24 and int(m[2]) != 0):
        raise ConditionError(f"bad time {text.strip()!r}, expected HH:MM")
    return int(m[1]) * 3600 + int(m[2]) * 60


def _windows(spec: str) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for part in spec.split(","):
        if "-" not in part:
            raise ConditionError(f"bad window {part.strip()!r}, expected HH:MM-HH:MM")
        start_text, end_text = part.split("-", 1)
        start, end = _clock(start_text), _clock(end_text)
        if start == end:
            raise ConditionError(f"empty window {part.strip()!r}")
        if start < end:
            out.append((start, end))
        else:  # wraps midnight: 16:30-00:30 is [16:30, 24:00) and [00:00, 00:30)
            out.append((start, 86400))
            if end > 0:
                out.append((0, end))
    out.sort()
    for (_, end_a), (start_b, _) in itertools.pairwise(out):
        if start_b < end_a:
            raise ConditionError(f"overlapping windows in {spec!r}")
    return tuple(out)


def _weekdays(spec: str) -> tuple[int, ...]:
    days: set[int] = set()
    for part in spec.split(","):
        names = [p.strip().lower() for p in part.split("-")]
        if any(n not in _DAYS for n in names) or len(names) > 2:
            raise ConditionError(f"bad weekday {part.strip()!r}, expected mon..sun or mon-fri")
        lo, hi = _DAYS[names[0]], _DAYS[names[-1]]
        if hi < lo:
            raise ConditionError(f"weekday range {part.strip()!r} runs backwards")
        days.update(range(lo, hi + 1))
    return tuple(sorted(days))


def parse_condition(text: str) -> Condition:
    text = text.strip()
    if not text:
        return Condition()
    windows: tuple[tuple[int, int], ...] = ()
    weekdays: tuple[int, ...] = ()
    min_prompt: int | None = None
    seen: set[str] = set()
    for clause in (c.strip() for c in text.split(";")):
        if not clause:
            continue
        # A second clause of one kind would silently replace the first: refuse it.
        kind = re.split(r"[\s=<>]", clause, maxsplit=1)[0]
        if kind in seen and kind in _KINDS:
            raise ConditionError(
                f"condition {text!r} has two {kind} clauses; write one ({_KINDS[kind]})"
            )
        seen.add(kind)
        if clause.startswith("utc_time="):
            windows = _windows(clause.removeprefix("utc_time="))
        elif clause.startswith("weekday="):
            weekdays = _weekdays(clause.removeprefix("weekday="))
        elif m := _PROMPT.match(clause):
            min_prompt = int(m[2]) + (1 if m[1] == ">" else 0)
        else:
            raise ConditionError(
                f"unknown condition {clause!r}; use utc_time=HH:MM-HH:MM, weekday=mon-fri"
                " or prompt_tokens>N"
            )
    return Condition(text, windows, weekdays, min_prompt)


@dataclass(frozen=True, slots=True)
class Place:
    """Where a row came from, for messages and for tracing a cost to its row."""

    file: str
    line: int
    layer: str  # user, shipped (our researched rows) or library (genai-prices)
    # a library row of a model the provider resells, not of its own (Vertex AI's Claude rows are
    # Anthropic's): the library asks for them only when no model of the provider's own matches
    fallback: bool = False

    @property
    def row_id(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def layer_rank(self) -> int:
        """0 wins: the user's rows, then ours, then the price library's: the provider's own
        models, then the models it resells. A resold model's row with a long-context tier
        ranked before the provider's own row without one (by its more specific condition)
        priced a Vertex AI request at Anthropic's 2x tier the library does not give it."""
        return {"user": 0, "shipped": 1}.get(self.layer, 3 if self.fallback else 2)


@dataclass(frozen=True, slots=True)
class PriceRow:
    place: Place
    provider: str
    model: str  # exact name or a GLOB pattern (*, ?), lower case
    effective_from: datetime | None  # None: since the model name existed (start not known)
    effective_to: datetime | None  # None: still in force
    currency: str
    condition: Condition
    prices: dict[str, float | None] = field(default_factory=dict)  # BUCKETS -> per million
    notes: str = ""
    source: str = ""

    def in_force(self, at: datetime) -> bool:
        return (self.effective_from is None or at >= self.effective_from) and (
            self.effective_to is None or at < self.effective_to
        )


@dataclass(frozen=True, slots=True)
class Alias:
    place: Place
    provider: str
    alias: str  # exact name or GLOB pattern, lower case
    model: str
    effective_from: datetime | None
    effective_to: datetime | None
    note: str = ""
    source: str = ""

    def in_force(self, at: datetime) -> bool:
        return (self.effective_from is None or at >= self.effective_from) and (
            self.effective_to is None or at < self.effective_to
        )


@dataclass(frozen=True, slots=True)
class GatewayPrefix:
    place: Place
    gateway: str  # request provider this applies to, or * for any
    prefix: str  # text before the first / of the model name
    provider: str | None  # provider whose prices apply; None keeps the request's provider
    note: str = ""
    source: str = ""


def is_pattern(name: str) -> bool:
    return any(ch in name for ch in "*?[")
