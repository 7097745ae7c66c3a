"""Why did the cache miss? Turn-by-turn timelines over the prefix views.

The derivation is SQL (`queries/cache_breaks.sql` and what it reads); this module picks the
conversations to show, runs one query for their turns, and renders them. It builds the
materialised views first when they are missing or stale, so a second run on a large warehouse
only reads `derived/`.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline import build_first, sql
from pipeline.errors import InputError, NotFoundError, UsageError
from pipeline.warehouse import Warehouse

TIMELINE_VIEWS = ("conversations", "expected_cache", "cache_breaks", "finding_breaks")

_TIMELINE_SQL = """
WITH chosen AS (
    SELECT unnest($conversations::VARCHAR[]) AS conversation_id
),
turns AS (
    SELECT c.* FROM conversations AS c SEMI JOIN chosen USING (conversation_id)
)
SELECT
    t.conversation_id, t.turn, t.request_id, t.started_at, t.agent, t.model,
    e.input_tokens, e.cache_read_tokens, e.expected_read_tokens,
    b.cause, b.tokens_lost, b.changed_kind, b.change_offset, b.change_class, b.excerpt,
    b.parent_excerpt, b.idle_s, b.lifetime_s, f.lost_cost, f.currency, f.fix
FROM turns AS t
JOIN expected_cache AS e USING (request_id)
LEFT JOIN cache_breaks AS b USING (request_id)
LEFT JOIN finding_breaks AS f USING (request_id)
ORDER BY t.conversation_id, t.turn
"""

# A request named by a unique prefix of its id, as a short id is typed from a listing.
_PREFIX_SQL = """
SELECT request_id FROM conversations
WHERE starts_with(request_id, $prefix)
ORDER BY request_id
LIMIT 6
"""

_WORST_SQL = """
SELECT conversation_id
FROM cache_breaks
WHERE cause <> 'cold_start'
GROUP BY conversation_id
ORDER BY sum(tokens_lost) DESC NULLS LAST, conversation_id
LIMIT $n
"""


@dataclass(frozen=True, slots=True)
class Turn:
    conversation_id: str
    turn: int
    request_id: str
    started_at: Any
    agent: str | None
    model: str | None
    input_tokens: int | None
    cache_read_tokens: int | None
    expected_read_tokens: int | None
    cause: str | None
    tokens_lost: int | None
    changed_kind: str | None
    change_offset: int | None
    change_class: str | None
    excerpt: str | None
    parent_excerpt: str | None = None
    idle_s: float | None = None  # expired: how long the parent's entry sat unused
    lifetime_s: float | None = None  # expired: the lifetime it exceeded
    lost_cost: float | None = None  # money the break cost, at the day's price (finding_breaks)
    currency: str | None = None
    fix: str | None = None


def timeline(
    wh: Warehouse,
    *,
    conversations: Iterable[str] = (),
    requests: Iterable[str] = (),
    worst: int = 3,
    options: sql.SqlOptions | None = None,
) -> list[Turn]:
    """Turns of the chosen conversations: the given ones, those of the given requests, or the
    `worst` conversations by tokens lost to cache breaks."""
    if not wh.exists():
        raise NotFoundError(f"no warehouse at {wh.root}", hint="run `cacheaudit ingest` first")
    build_first.store_stale_views(wh, TIMELINE_VIEWS, options)
    con = sql.connect(wh, options=options, only=TIMELINE_VIEWS)
    chosen = list(conversations)
    wanted_requests = list(requests)
    if wanted_requests:
        wanted_requests = [_full_id(con, rid) for rid in wanted_requests]
        rows = sql.run(
            con,
            "SELECT conversation_id, request_id FROM conversations "
            "WHERE request_id IN (SELECT unnest($r::VARCHAR[]))",
            {"r": wanted_requests},
        ).fetchall()
        order = {rid: i for i, rid in enumerate(wanted_requests)}
        rows.sort(key=lambda r: order[r[1]])
        if not rows:
            raise NotFoundError(
                f"no request {', '.join(wanted_requests)}",
                hint='list some with `cacheaudit sql "select request_id from requests limit 5"`',
            )
        chosen += [str(r[0]) for r in rows]
    if not chosen and not wanted_requests:
        rows = sql.run(con, _WORST_SQL, {"n": worst}).fetchall()
        chosen = [str(r[0]) for r in rows]
    if not chosen:
        return []
    result = sql.run(con, _TIMELINE_SQL, {"conversations": chosen}).fetchall()
    # Shown in the order chosen: worst first, or as given on the command line.
    rank = {cid: i for i, cid in enumerate(dict.fromkeys(chosen))}
    result.sort(key=lambda row: (rank[row[0]], row[1]))
    if conversations and not result:
        raise NotFoundError(
            f"no conversation {', '.join(conversations)}",
            hint='list some with `cacheaudit sql "select distinct conversation_id from '
            'conversations limit 5"`',
        )
    return [Turn(*row) for row in result]


def _full_id(con: Any, given: str) -> str:
    """The request id `given` names: itself, else the one id it is a prefix of."""
    ids = [str(r[0]) for r in sql.run(con, _PREFIX_SQL, {"prefix": given}).fetchall()]
    if given in ids or not ids:
        return given  # an exact id, or none: the caller says it was not found
    if len(ids) > 1:
        shown = ", ".join(ids[:5]) + (", ..." if len(ids) > 5 else "")
        raise UsageError(
            f"-r {given} is ambiguous: {'more than 5' if len(ids) > 5 else len(ids)}"
            f" requests start with it ({shown})",
            hint="give more of the id",
        )
    return ids[0]


def _num(value: int | None) -> str:
    return "?" if value is None else f"{value:,}"


def _lost(breaks: list[Turn]) -> str:
    """A conversation's tokens lost: the sum of the known losses, and how many breaks had an
    unknown one (counted, never summed as 0); `?` when none is known."""
    known = [b.tokens_lost for b in breaks if b.tokens_lost is not None]
    unknown = len(breaks) - len(known)
    total = f"{sum(known):,}" if known or not unknown else "?"
    if unknown:
        total += f" ({unknown:,} {'break' if unknown == 1 else 'breaks'} with unknown loss)"
    return total


def render(turns: list[Turn], *, only_breaks: bool = False) -> str:
    """Plain-text timelines, one block per conversation."""
    lines: list[str] = []
    current = None
    for t in turns:
        if t.conversation_id != current:
            current = t.conversation_id
            lost = _lost([x for x in turns if x.conversation_id == current and x.cause])
            agent = f" agent={t.agent}" if t.agent else ""
            lines.append("")
            lines.append(f"conversation {current}{agent} model={t.model} tokens lost={lost}")
            lines.append(
                f"{'turn':>5} {'request':<24} {'input':>9} {'read':>9} {'expected':>9} "
                f"{'lost':>9}  cause / change"
            )
        if only_breaks and t.cause is None:
            continue
        change = t.cause or ""
        if t.changed_kind:
            change += f" {t.changed_kind}"
        if t.change_class:
            change += f" [{t.change_class}]"
        if t.change_offset is not None:
            change += f" @byte {t.change_offset}"
        if t.excerpt:
            change += f"  …{' '.join(t.excerpt.split())}…"
        lines.append(
            f"{t.turn:>5} {t.request_id[:24]:<24} {_num(t.input_tokens):>9} "
            f"{_num(t.cache_read_tokens):>9} {_num(t.expected_read_tokens):>9} "
            f"{_num(t.tokens_lost) if t.cause else '':>9}  {change}"
        )
    return "\n".join(lines).lstrip("\n")


def _money(breaks: list[Turn]) -> str:
    """The money the breaks lost per currency (`0.1900 USD`), and how many had none known."""
    from pipeline.reports.numbers import money

    sums: dict[str, float] = {}
    for b in breaks:
        if b.lost_cost is not None and b.currency:
            sums[b.currency] = sums.get(b.currency, 0.0) + b.lost_cost
    unknown = sum(1 for b in breaks if b.lost_cost is None and b.cause != "cold_start")
    nothing = any(b.lost_cost == 0 for b in breaks)  # a break that lost no token costs 0
    text = ", ".join(f"{money(v)} {c}" for c, v in sorted(sums.items()))
    text = text or ("0" if nothing or not unknown else "?")
    if unknown:
        text += f" ({unknown:,} {'break' if unknown == 1 else 'breaks'} unpriced)"
    return text


def _signature(t: Turn) -> tuple[Any, ...]:
    """Breaks with the same signature in a row are one line: the same cause, in the same kind
    of segment, the same kind of change (a timestamp's changed digit moves its byte a little
    from turn to turn: the line gives the range)."""
    return (t.cause, t.changed_kind, t.change_class)


def _minutes(seconds: float) -> str:
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def _what(run: list[Turn]) -> str:
    """`system_changed system [timestamp] @byte 56–59`, `expired after 28 min idle (lifetime
    10 min)`: the cause and where, as the turn-by-turn listing names them."""
    t = run[0]
    text = str(t.cause)
    if t.changed_kind:
        text += f" {t.changed_kind}"
    if t.change_class:
        text += f" [{t.change_class}]"
    offsets = sorted({x.change_offset for x in run if x.change_offset is not None})
    if offsets:
        text += f" @byte {offsets[0]}" + (f"–{offsets[-1]}" if len(offsets) > 1 else "")
    idle = [x.idle_s for x in run if x.idle_s is not None]
    if idle and t.lifetime_s is not None:
        longest = "" if len(idle) == 1 else "up to "
        text += f" after {longest}{_minutes(max(idle))} idle (lifetime {_minutes(t.lifetime_s)})"
    return text


def _excerpt(text: str | None) -> str:
    return f"…{' '.join(text.split())}…" if text else "(not kept)"


def render_grouped(turns: list[Turn]) -> str:
    """One block per conversation: each run of identical breaks on one line, with how many
    turns it hit, the tokens and money it lost, both sides of the change and the fix."""
    lines: list[str] = []
    by_conversation: dict[str, list[Turn]] = {}
    for t in turns:
        by_conversation.setdefault(t.conversation_id, []).append(t)
    for cid, conv in by_conversation.items():
        breaks = [t for t in conv if t.cause]
        agent = f" agent={conv[0].agent}" if conv[0].agent else ""
        lines.append("")
        lines.append(
            f"conversation {cid}{agent} model={conv[0].model} turns={len(conv)}"
            f" tokens lost={_lost(breaks)} money lost={_money(breaks)}"
        )
        runs: list[list[Turn]] = []
        for b in breaks:
            if runs and _signature(runs[-1][-1]) == _signature(b):
                runs[-1].append(b)
            else:
                runs.append([b])
        for run in runs:
            first, last = run[0], run[-1]
            turns_text = (
                f"turn {first.turn}" if len(run) == 1 else (f"turns {first.turn}–{last.turn}")
            )
            times = "" if len(run) == 1 else f", {len(run)} times"
            if first.cause == "cold_start":
                lines.append(f"  {turns_text}: cold start (nothing earlier to reuse)")
                continue
            lines.append(f"  {turns_text}: {_what(run)}{times}, {_lost(run)} tokens, {_money(run)}")
            if first.fix:
                lines.append(f"      fix:    {first.fix}")
            if first.change_class or first.excerpt or first.parent_excerpt:
                lines.append(f"      before: {_excerpt(first.parent_excerpt)}")
                lines.append(f"      after:  {_excerpt(first.excerpt)}")
            lines.append(f"      first:  {first.request_id} (turn {first.turn})")
    return "\n".join(lines).lstrip("\n")


def planted_precision_recall(
    wh: Warehouse, planted: Path, options: sql.SqlOptions | None = None
) -> dict[str, float]:
    """Precision and recall of cache_breaks (request, cause) over a demo's planted breakers."""
    if not planted.is_file():
        raise InputError(f"planted file {planted} does not exist")
    with planted.open(encoding="utf-8", newline="") as fh:
        truth = {(row["request_id"], row["cause"]) for row in csv.DictReader(fh)}
    con = sql.connect(wh, options=options, only=("cache_breaks",))
    rows = con.execute("SELECT request_id, cause FROM cache_breaks").fetchall()
    found = {(str(r), str(c)) for r, c in rows}
    hits = len(truth & found)
    return {
        "precision": hits / len(found) if found else 1.0,
        "recall": hits / len(truth) if truth else 1.0,
    }
