"""The cache-rule table: each provider's prompt-cache rules as data, with dates.

Built-in rules ship as `pipeline/rules/*.csv`; a user adds or overrides rows with their own CSV
files of the same columns (`--rules FILE`, or `CACHEAUDIT_RULES` = paths joined by the OS path
separator). A user row always wins over a built-in one that matches the same request; among rows
of the same origin, an exact provider beats `*`, a longer model glob beats a shorter one, and a
later `valid_from` beats an earlier one. `queries/cache_rule_match.sql` applies that order.

Columns (one rule per row):
- rule_id: a name for the rule, shown in `expected_cache.rule_id`.
- provider: the `requests.provider` value it applies to, or `*`.
- model_glob: a glob over `requests.model` (`*` any text, `?` one character).
- valid_from / valid_to: UTC dates, from inclusive, to exclusive; empty = open.
- unit_model: how a reusable prefix becomes a cache read:
  none (no caching), prefix (round down to granularity, nothing under min_tokens),
  prefix_minus_last (prefix capped at input - 1, vLLM), breakpoint (Anthropic cache_control
  with lookback), persisted_units (DeepSeek V4 whole units).
- min_tokens: prompts (or prefixes) shorter than this are not cached; empty = no minimum.
- granularity_tokens: the read is a multiple of this; empty = 1.
- lifetime_s: seconds a cached prefix lives without use; empty = unpublished: an entry is kept
  until evicted (vLLM and SGLang evict only when they need the room), so a later miss is a
  provider_miss, never expired.
- extended_lifetime_s: the lifetime when the request asked for a long one (Anthropic 1h,
  OpenAI prompt_cache_retention 24h).
- lookback_s: how far back to look for a shared prefix at all.
- breakpoint_lookback: blocks before a breakpoint where a hit is still found (Anthropic ~20).
- note: where the rule comes from.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Any

import duckdb

from pipeline.errors import InputError

UNIT_MODELS = ("none", "prefix", "prefix_minus_last", "breakpoint", "persisted_units")
COLUMNS = (
    "rule_id",
    "provider",
    "model_glob",
    "valid_from",
    "valid_to",
    "unit_model",
    "min_tokens",
    "granularity_tokens",
    "lifetime_s",
    "extended_lifetime_s",
    "lookback_s",
    "breakpoint_lookback",
    "note",
)
_TYPED_SELECT = """
SELECT
    rule_id,
    coalesce(nullif(trim(provider), ''), '*')            AS provider,
    coalesce(nullif(trim(model_glob), ''), '*')          AS model_glob,
    CAST(nullif(trim(valid_from), '') AS DATE)           AS valid_from,
    CAST(nullif(trim(valid_to), '') AS DATE)             AS valid_to,
    trim(unit_model)                                     AS unit_model,
    CAST(nullif(trim(min_tokens), '') AS BIGINT)         AS min_tokens,
    CAST(nullif(trim(granularity_tokens), '') AS BIGINT) AS granularity_tokens,
    CAST(nullif(trim(lifetime_s), '') AS BIGINT)         AS lifetime_s,
    CAST(nullif(trim(extended_lifetime_s), '') AS BIGINT) AS extended_lifetime_s,
    CAST(nullif(trim(lookback_s), '') AS BIGINT)         AS lookback_s,
    CAST(nullif(trim(breakpoint_lookback), '') AS INTEGER) AS breakpoint_lookback,
    note,
    $origin                                              AS origin,
    $origin_rank                                         AS origin_rank
FROM read_csv($files, header = true, all_varchar = true, union_by_name = true)
"""


def builtin_paths() -> list[Path]:
    folder = resources.files("pipeline") / "rules"
    return sorted(Path(str(p)) for p in folder.iterdir() if p.name.endswith(".csv"))


def user_paths(options: Any) -> list[Path]:
    paths = [Path(p) for p in getattr(options, "rules_paths", ()) or ()]
    if not paths and os.environ.get("CACHEAUDIT_RULES"):
        paths = [Path(p) for p in os.environ["CACHEAUDIT_RULES"].split(os.pathsep) if p]
    expanded: list[Path] = []
    for path in paths:
        if path.is_dir():
            expanded.extend(sorted(path.glob("*.csv")))
            continue
        if not path.is_file():
            raise InputError(
                f"cache-rule file {path} does not exist",
                hint="--rules / CACHEAUDIT_RULES take CSV files with the columns of "
                "pipeline/rules/cache_rules.csv",
            )
        expanded.append(path)
    return expanded


def all_paths(options: Any) -> list[Path]:
    """Every rule file a session reads, built-in first (used in the materialisation stamp)."""
    return [*builtin_paths(), *user_paths(options)]


def _check_columns(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    rel = con.sql(
        "SELECT * FROM read_csv($f, header = true, all_varchar = true) LIMIT 0",
        params={"f": str(path)},
    )
    missing = [c for c in COLUMNS if c not in rel.columns]
    if missing:
        raise InputError(
            f"cache-rule file {path} lacks columns: {', '.join(missing)}",
            hint="copy the header of pipeline/rules/cache_rules.csv",
        )


def register(con: duckdb.DuckDBPyConnection, options: Any) -> None:
    """Create table `cache_rules` from the built-in and user rule files."""
    con.execute(
        "CREATE OR REPLACE TEMP TABLE cache_rules ("
        "rule_id VARCHAR, provider VARCHAR, model_glob VARCHAR, valid_from DATE, "
        "valid_to DATE, unit_model VARCHAR, min_tokens BIGINT, granularity_tokens BIGINT, "
        "lifetime_s BIGINT, extended_lifetime_s BIGINT, lookback_s BIGINT, "
        "breakpoint_lookback INTEGER, note VARCHAR, origin VARCHAR, origin_rank INTEGER)"
    )
    sets = (("builtin", 1, builtin_paths()), ("user", 0, user_paths(options)))
    for origin, rank, paths in sets:
        if not paths:
            continue
        for path in paths:
            _check_columns(con, path)
        try:
            con.execute(
                f"INSERT INTO cache_rules {_TYPED_SELECT}",
                {"files": [str(p) for p in paths], "origin": origin, "origin_rank": rank},
            )
        except duckdb.Error as exc:
            raise InputError(
                f"cache-rule files {', '.join(map(str, paths))}: {' '.join(str(exc).split())}",
                hint="dates are YYYY-MM-DD, numbers are whole numbers, empty means unknown",
            ) from exc
    bad = con.execute(
        "SELECT rule_id, unit_model FROM cache_rules WHERE unit_model NOT IN "
        "(SELECT unnest($models))",
        {"models": list(UNIT_MODELS)},
    ).fetchall()
    if bad:
        raise InputError(
            f"cache rule {bad[0][0]!r} has unknown unit_model {bad[0][1]!r}",
            hint=f"unit_model is one of {', '.join(UNIT_MODELS)}",
        )
