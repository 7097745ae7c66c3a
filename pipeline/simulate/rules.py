"""Every number the simulator's cache models use, in one place.

Sources: DeepSeek https://api-docs.deepseek.com/guides/kv_cache, OpenAI
https://platform.openai.com/docs/guides/prompt-caching, Anthropic
https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching.
Where the shared rule table `pipeline/rules/cache_rules.csv` has the same number (current rows:
no `valid_to`), that table wins, so the simulator and the diagnosis views never disagree; the
constants below are the fallback when the table is missing or a cell is empty.
"""

from __future__ import annotations

import csv
import fnmatch
from functools import cache
from pathlib import Path

RULES_CSV = Path(__file__).resolve().parent.parent / "rules" / "cache_rules.csv"

# --- DeepSeek ----------------------------------------------------------------------------------
# "Cache construction takes seconds": a persisted unit is usable only after this delay.
DEEPSEEK_BUILD_DELAY_S = 2.0
# "usually cleared within a few hours to a few days": we keep units for 6 h after last use.
DEEPSEEK_UNIT_TTL_S = 6 * 3600.0
# Units shorter than this are not persisted. 64 is the storage unit DeepSeek published at launch
# (2024-08-02); the current guide does not repeat it, so it is an assumption, settable per run.
DEEPSEEK_MIN_UNIT_TOKENS = 64
# "At fixed token intervals for long inputs or outputs. The interval is not published": off (0).
DEEPSEEK_INTERVAL_TOKENS = 0
# How many earlier requests per namespace are kept for common-prefix detection.
DEEPSEEK_HISTORY = 256

# --- OpenAI ------------------------------------------------------------------------------------
OPENAI_MIN_TOKENS = 1024  # "automatic for prompts of 1024 tokens or more"
OPENAI_STEP_TOKENS = 128  # "cached length grows in 128-token steps: 1024, 1152, 1280, ..."
OPENAI_TTL_IN_MEMORY_S = 10 * 60.0  # "usually 5-10 minutes of inactivity"; we take the upper end
OPENAI_TTL_24H_S = 24 * 3600.0  # prompt_cache_retention = "24h"

# --- Anthropic ---------------------------------------------------------------------------------
ANTHROPIC_MAX_BREAKPOINTS = 4  # "up to 4 breakpoints; extra ones keep only the last 4"
ANTHROPIC_LOOKBACK_BLOCKS = 20  # "up to approximately 20 blocks before your explicit breakpoint"
ANTHROPIC_TTL_S = {"5m": 5 * 60.0, "1h": 3600.0}
ANTHROPIC_DEFAULT_MIN_TOKENS = 1024
# Minimum cacheable prefix by model-name fragment, first match wins (Anthropic's
# prompt-caching page lists the minimum per model).
ANTHROPIC_MIN_TOKENS: tuple[tuple[str, int], ...] = (
    ("opus-4-5", 4096),
    ("haiku-4-5", 4096),
    ("3-5-haiku", 2048),
    ("haiku-3-5", 2048),
    ("3-haiku", 2048),
    ("haiku-3", 2048),
    ("sonnet-4-6", 2048),
    ("opus-5", 512),
)


@cache
def _current_rows(provider: str) -> tuple[dict[str, str], ...]:
    try:
        with RULES_CSV.open(encoding="utf-8", newline="") as fh:
            rows = [r for r in csv.DictReader(fh) if r.get("provider") == provider]
    except OSError:
        return ()
    return tuple(r for r in rows if not r.get("valid_to"))


def table_number(provider: str, model: str, column: str) -> float | None:
    """The number in `column` of the current row for this provider whose `model_glob` matches
    the model most specifically (longest glob), or None."""
    matches = [
        r
        for r in _current_rows(provider)
        if fnmatch.fnmatch(model.lower(), (r.get("model_glob") or "*").lower())
    ]
    for row in sorted(matches, key=lambda r: len(r.get("model_glob") or ""), reverse=True):
        try:
            return float(row[column]) if row.get(column) else None
        except ValueError:
            return None
    return None


def anthropic_min_tokens(model: str) -> int:
    from_table = table_number("anthropic", model, "min_tokens")
    if from_table is not None:
        return int(from_table)
    name = model.lower()
    for fragment, minimum in ANTHROPIC_MIN_TOKENS:
        if fragment in name:
            return minimum
    return ANTHROPIC_DEFAULT_MIN_TOKENS


def openai_cacheable(common_prefix: int, model: str = "*") -> int:
    """OpenAI's cached length: 0 below 1024, else 1024 + 128 * floor((LCP - 1024) / 128)."""
    minimum = int(table_number("openai", model, "min_tokens") or OPENAI_MIN_TOKENS)
    step = int(table_number("openai", model, "granularity_tokens") or OPENAI_STEP_TOKENS)
    if common_prefix < minimum:
        return 0
    return minimum + step * ((common_prefix - minimum) // step)
