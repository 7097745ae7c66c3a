"""Declarative usage mappings: which provider fields make each normalised usage column.

Every dialect (and the OTel span reader) declares a `USAGE_MAP: DialectMap`, and its
`normalise_usage` reads the provider's usage object THROUGH that map with `read_usage`. The same
objects render the table in docs/dialects.md (`python -m pipeline.dialects.mapping`), so the
documentation is the code's own data and cannot drift; a test checks the file equals the output.
(The renderer lives in `mapping.py`, apart from these types, so that running it with `-m` does
not import it twice.)

A column is either:
- `first`: the first source present (later sources are fallbacks for other providers/versions);
- `sum`: all sources added (Anthropic input = input + cache writes + cache reads);
- `none`: the dialect never reports it, so the column is always NULL (unknown).
Each source says what its absence means: `null` (the column is unknown) or `zero` (absent
counts as 0, e.g. proto3 JSON omits zero counts, or an optional addend of a sum).

Impossible values are not numbers: a negative count or cost makes its column NULL (a `sum` with
a negative addend too), and cache read + write above the (cache-inclusive) input makes the cache
counts NULL (`consistent`, usage_semantics `inconsistent`). Nothing is clamped or guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipeline.records import Usage

COLUMNS = (
    "input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cache_write_1h_tokens",
    "output_tokens",
    "reasoning_tokens",
    "reported_cost",
    "tool_prompt_tokens",
    "audio_input_tokens",
    "audio_cache_read_tokens",
    "audio_output_tokens",
    "web_search_requests",
)


@dataclass(frozen=True, slots=True)
class Src:
    path: tuple[str, ...]
    absent: str = "null"  # "null": missing makes the column unknown; "zero": missing counts as 0

    def label(self) -> str:
        text = "`" + ".".join(self.path) + "`"
        return text + " (absent = 0)" if self.absent == "zero" else text


def src(dotted: str, absent: str = "null") -> Src:
    """A nested JSON path written with dots: `prompt_tokens_details.cached_tokens`. A step
    `[key=VALUE]` picks, in a list, the first object whose `key` is VALUE (Gemini's per-modality
    counts: `promptTokensDetails.[modality=AUDIO].tokenCount`)."""
    return Src(tuple(dotted.split(".")), absent)


def attr(name: str, absent: str = "null") -> Src:
    """A flat key that itself contains dots (OTel attribute names)."""
    return Src((name,), absent)


@dataclass(frozen=True, slots=True)
class Column:
    op: str  # first, sum, none
    sources: tuple[Src, ...] = ()
    note: str = ""
    real: bool = False  # a decimal amount (cost), not a token count


def first(*sources: Src, note: str = "", real: bool = False) -> Column:
    return Column("first", sources, note, real)


def total(*sources: Src, note: str = "") -> Column:
    return Column("sum", sources, note)


def never(note: str) -> Column:
    return Column("none", (), note)


# The columns most dialects never have (server-side tool prompts, audio input, web searches)
# need not be listed in each map: a column a map leaves out is never reported there.
OPTIONAL_COLUMNS = (
    "tool_prompt_tokens",
    "audio_input_tokens",
    "audio_cache_read_tokens",
    "audio_output_tokens",
    "web_search_requests",
)
NOT_REPORTED = never("Not reported")


@dataclass(frozen=True, slots=True)
class DialectMap:
    api: str
    title: str
    usage_at: str  # where the usage object is found, streamed and not
    semantics: str  # value of the usage_semantics column
    columns: dict[str, Column]
    notes: tuple[str, ...] = field(default_factory=tuple)


def _lookup(obj: Any, path: tuple[str, ...]) -> Any:
    cur = obj
    for key in path:
        if key.startswith("[") and key.endswith("]"):
            field_name, _, wanted = key[1:-1].partition("=")
            items = cur if isinstance(cur, list) else ()
            cur = next(
                (i for i in items if isinstance(i, dict) and i.get(field_name) == wanted), None
            )
            if cur is None:
                return None
            continue
        if not isinstance(cur, dict) or key not in cur:
            return None
        cur = cur[key]
    return cur


def _number(value: Any, real: bool) -> int | float | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        # OTLP/JSON encodes int64 as a decimal string.
        try:
            value = float(value) if real else int(value)
        except ValueError:
            return None
    if real and isinstance(value, int | float):
        return float(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def read_column(raw: Any, column: Column) -> int | float | None:
    """The column's value; a negative one is not a count (nor a cost): NULL, with no fallback
    to a later source or to 0 (the provider did report the field, with an impossible value)."""
    if column.op == "none":
        return None
    if column.op == "first":
        for s in column.sources:
            value = _number(_lookup(raw, s.path), column.real)
            if value is not None:
                return value if value >= 0 else None
        if column.sources and column.sources[-1].absent == "zero":
            return 0
        return None
    acc: int | float = 0
    for s in column.sources:
        value = _number(_lookup(raw, s.path), column.real)
        if value is None:
            if s.absent != "zero":
                return None
            value = 0
        if value < 0:
            return None
        acc += value
    return acc


INCONSISTENT = "inconsistent"
OUT_OF_RANGE = "out_of_range"
# Counts are stored as 64-bit integers; no provider counts that many tokens in one call, so a
# larger number is a corrupt or hostile record, not a count.
COUNT_LIMIT = 2**63
_COUNTS = (
    "input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cache_write_1h_tokens",
    "output_tokens",
    "reasoning_tokens",
    "tool_prompt_tokens",
    "audio_input_tokens",
    "audio_cache_read_tokens",
    "web_search_requests",
)


def within_range(usage: Usage) -> Usage:
    """The usage with every count that does not fit the 64-bit column made unknown (NULL), and
    `usage_semantics` `out_of_range` saying so (raw_usage keeps the numbers as sent). A few
    comparisons per row: the write of a batch must never fail on one record's numbers."""
    bad = False
    for name in _COUNTS:
        value = getattr(usage, name)
        if value is not None and not -COUNT_LIMIT <= value < COUNT_LIMIT:
            setattr(usage, name, None)
            bad = True
    passes = usage.pass_prompt_tokens
    if passes and not all(-COUNT_LIMIT <= n < COUNT_LIMIT for n in passes):
        usage.pass_prompt_tokens = None
        bad = True
    if bad:
        usage.semantics = OUT_OF_RANGE
    return usage


def consistent(usage: Usage) -> Usage:
    """The usage with contradicting cache counts made unknown, applied once per row after the
    dialect (and the OTel exclusive fix) has read it. `input_tokens` includes the cache, so
    cache read + cache write above it cannot both be right and which one is wrong is unknown:
    the cache counts (and so `uncached_input_tokens`) become NULL, `input_tokens` is kept,
    `usage_semantics` says `inconsistent`, and raw_usage still holds the numbers as sent."""
    if usage.input_tokens is None:
        return usage
    cached = (usage.cache_read_tokens or 0) + (usage.cache_write_tokens or 0)
    if cached > usage.input_tokens:
        usage.cache_read_tokens = usage.cache_write_tokens = usage.cache_write_1h_tokens = None
        usage.audio_cache_read_tokens = None
        usage.semantics = INCONSISTENT
    return usage


def read_usage(raw: Any, dmap: DialectMap, semantics: str | None = None) -> Usage | None:
    """The normalised usage of one provider usage object, or None when there is none."""
    if not isinstance(raw, dict):
        return None
    values: dict[str, Any] = {
        name: read_column(raw, dmap.columns.get(name, NOT_REPORTED)) for name in COLUMNS
    }
    return Usage(**values, semantics=semantics or dmap.semantics, raw=raw)
