"""The three providers' prompt-cache rules as pure state machines over token sequences.

Time is passed in (seconds, any monotonic clock) so tests can step it by hand. A namespace is
whatever the caller says shares a cache (the server uses API key fingerprint + model). Every
constant comes from `pipeline.simulate.rules` (each with its public source there).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import xxhash

from pipeline.simulate import rules
from pipeline.simulate.tokens import BlockPrompt


def prefix_hashes(tokens: list[str]) -> list[int]:
    """h[i] identifies tokens[:i]; h[0] is the empty prefix."""
    hashes = [0]
    for token in tokens:
        hashes.append(xxhash.xxh3_64_intdigest(token.encode("utf-8"), seed=hashes[-1]))
    return hashes


def common_prefix(a: list[int], b: list[int]) -> int:
    """Longest common prefix length of two prefix-hash lists (binary search: equal is monotone)."""
    lo, hi = 0, min(len(a), len(b)) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[mid] == b[mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


# --- DeepSeek ------------------------------------------------------------------------------------


@dataclass(slots=True)
class Unit:
    length: int
    ready_at: float
    last_used: float
    kind: str  # input, output, common, interval


@dataclass(slots=True)
class DeepSeekSettings:
    build_delay_s: float = rules.DEEPSEEK_BUILD_DELAY_S
    ttl_s: float = rules.DEEPSEEK_UNIT_TTL_S
    min_unit_tokens: int = rules.DEEPSEEK_MIN_UNIT_TOKENS
    interval_tokens: int = rules.DEEPSEEK_INTERVAL_TOKENS  # 0: fixed-interval units off
    history: int = rules.DEEPSEEK_HISTORY


@dataclass(slots=True)
class _DeepSeekSpace:
    units: dict[int, Unit] = field(default_factory=dict)
    history: deque[list[int]] = field(default_factory=deque)


class DeepSeekCache:
    """Persisted prefix units (DeepSeek V4): the longest *ready* unit a request fully contains.

    Units are persisted at the end of each request's input (on arrival), at the end of its
    output (when the answer ends), at the common prefix with each earlier request (on arrival),
    and optionally every `interval_tokens`. Each becomes usable `build_delay_s` later.
    """

    def __init__(self, settings: DeepSeekSettings | None = None) -> None:
        self.settings = settings or DeepSeekSettings()
        self._spaces: dict[str, _DeepSeekSpace] = {}

    def _space(self, namespace: str, now: float) -> _DeepSeekSpace:
        space = self._spaces.setdefault(namespace, _DeepSeekSpace())
        ttl = self.settings.ttl_s
        for key in [k for k, u in space.units.items() if now - u.last_used > ttl]:
            del space.units[key]
        return space

    def _persist(
        self, space: _DeepSeekSpace, hashes: list[int], length: int, ready: float, kind: str
    ) -> None:
        if length < max(1, self.settings.min_unit_tokens):
            return
        unit = space.units.get(hashes[length])
        if unit is None:
            space.units[hashes[length]] = Unit(length, ready, ready, kind)
        else:
            unit.last_used = max(unit.last_used, ready)

    def _persist_intervals(self, space: _DeepSeekSpace, hashes: list[int], ready: float) -> None:
        step = self.settings.interval_tokens
        if step > 0:
            for length in range(step, len(hashes), step):
                self._persist(space, hashes, length, ready, "interval")

    def request(self, namespace: str, tokens: list[str], now: float) -> int:
        """Hit tokens for this input; then persist what its arrival creates."""
        space = self._space(namespace, now)
        hashes = prefix_hashes(tokens)
        hit = 0
        for length in range(len(tokens), 0, -1):
            unit = space.units.get(hashes[length])
            if unit is not None and unit.length == length and unit.ready_at <= now:
                unit.last_used = now
                hit = length
                break
        ready = now + self.settings.build_delay_s
        self._persist(space, hashes, len(tokens), ready, "input")
        for earlier in space.history:
            self._persist(space, hashes, common_prefix(hashes, earlier), ready, "common")
        self._persist_intervals(space, hashes, ready)
        space.history.append(hashes)
        while len(space.history) > self.settings.history:
            space.history.popleft()
        return hit

    def answered(self, namespace: str, tokens_with_output: list[str], now: float) -> None:
        """The answer ended: persist input + output (and its interval units)."""
        space = self._space(namespace, now)
        hashes = prefix_hashes(tokens_with_output)
        ready = now + self.settings.build_delay_s
        self._persist(space, hashes, len(tokens_with_output), ready, "output")
        self._persist_intervals(space, hashes, ready)


# --- OpenAI --------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Entry:
    hashes: list[int]
    last_used: float
    ttl_s: float


class OpenAICache:
    """Automatic prefix caching (OpenAI): cached = the common prefix with any live earlier prompt,
    0 below 1024 tokens, else rounded down to 1024 + k*128. Entries live `ttl_s` after last use
    (in_memory ~10 min, or 24 h with prompt_cache_retention="24h")."""

    def __init__(self, max_entries: int = 512) -> None:
        self._spaces: dict[str, list[_Entry]] = {}
        self._max = max_entries

    def request(self, namespace: str, tokens: list[str], now: float, ttl_s: float) -> int:
        entries = [e for e in self._spaces.get(namespace, []) if now - e.last_used <= e.ttl_s]
        hashes = prefix_hashes(tokens)
        best, best_entry = 0, None
        for entry in entries:
            length = common_prefix(hashes, entry.hashes)
            if length > best:
                best, best_entry = length, entry
        cached = rules.openai_cacheable(best)
        if cached and best_entry is not None:
            best_entry.last_used = now
        same = next((e for e in entries if e.hashes[-1] == hashes[-1]), None)
        if same is None:
            entries.append(_Entry(hashes, now, ttl_s))
        else:
            same.last_used, same.ttl_s = now, max(same.ttl_s, ttl_s)
        self._spaces[namespace] = entries[-self._max :]
        return cached


# --- Anthropic -----------------------------------------------------------------------------------


@dataclass(slots=True)
class CacheUse:
    read: int = 0
    write_5m: int = 0
    write_1h: int = 0

    @property
    def write(self) -> int:
        return self.write_5m + self.write_1h


@dataclass(slots=True)
class _Breakpoint:
    length: int
    last_used: float
    ttl_s: float


class AnthropicCache:
    """Explicit breakpoints (Anthropic). For each breakpoint (the last 4 kept), it looks for a
    live entry at that block boundary and the 19 before it (20 boundaries); the longest one found
    is read. Every breakpoint past the read, at least `min_tokens` long, is written; written
    tokens run from the read (or the previous write) to the breakpoint, billed at its TTL. A hit
    refreshes the entry's lifetime."""

    def __init__(self) -> None:
        self._spaces: dict[str, dict[int, _Breakpoint]] = {}

    def request(self, namespace: str, prompt: BlockPrompt, min_tokens: int, now: float) -> CacheUse:
        entries = self._spaces.setdefault(namespace, {})
        for key in [k for k, e in entries.items() if now - e.last_used > e.ttl_s]:
            del entries[key]
        hashes = prefix_hashes(prompt.tokens)
        marked = [i for i, b in enumerate(prompt.blocks) if b.ttl][
            -rules.ANTHROPIC_MAX_BREAKPOINTS :
        ]
        use = CacheUse()
        hit: _Breakpoint | None = None
        for index in marked:
            first = max(0, index - rules.ANTHROPIC_LOOKBACK_BLOCKS + 1)
            for j in range(index, first - 1, -1):
                end = prompt.blocks[j].end
                entry = entries.get(hashes[end])
                if entry is not None and entry.length == end:
                    if end > use.read:
                        use.read, hit = end, entry
                    break
        if hit is not None:
            hit.last_used = now
        written_to = use.read
        for index in marked:
            block = prompt.blocks[index]
            if block.end <= written_to or block.end < min_tokens:
                continue
            ttl = block.ttl if block.ttl in rules.ANTHROPIC_TTL_S else "5m"
            if ttl == "1h":
                use.write_1h += block.end - written_to
            else:
                use.write_5m += block.end - written_to
            entries[hashes[block.end]] = _Breakpoint(block.end, now, rules.ANTHROPIC_TTL_S[ttl])
            written_to = block.end
        return use
