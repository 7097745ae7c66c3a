"""What to fix, first: the week's findings (cache breaks grouped by cause and place) with the
money each lost and the fix in plain words, costliest first (a table: each row is read)."""

from __future__ import annotations

from pipeline.reports.data import Row, WeekData, missing_reason
from pipeline.reports.numbers import count
from pipeline.reports.section import Column, Section, table, unavailable

VIEW = "report_findings"
VIEWS = {VIEW: "finding_breaks"}
TITLE = "What to fix: money lost to prompt changes"
CAPTION = (
    "Cache breaks of the week grouped by what to fix: one row per agent (or conversation without"
    " an agent), cause and place in the prompt, costliest first. Money lost is what those turns"
    " paid to send the broken prefix uncached instead of reading it from the cache, at the"
    " day's prices, write premium included: money lost to prompt changes, not the provider"
    " serving below its own rules (a provider_miss row is that: listed, its money already counted"
    " there). The example opens the week's costliest break of the finding."
)
# appended when some of the week's breaks have no money: counted, never summed as 0
UNKNOWN_CAPTION = (
    " {breaks} had no known money (their loss or price is unknown): counted in Turns, not"
    " summed in Money lost."
)
COLUMNS = (
    Column("rank", "#", "int"),
    Column("scope", "Agent / conversation", link="scope_conversation"),
    Column("finding", "Finding"),
    Column("turns", "Turns", "int"),
    Column("tokens_lost", "Tokens lost", "int"),
    Column("money", "Money lost"),
    Column("fix", "Fix"),
    Column("example_request_id", "Example", link="example_conversation_id"),
    Column("change", "Before / after", "code"),
)


def _place(row: Row) -> str | None:
    """`system @3`, `message (user) @12`, `tool @0`: the changed segment and its position."""
    kind = row.get("changed_kind")
    if kind is None:
        return None
    role = row.get("changed_role")
    where = f"{kind} ({role})" if role and role != kind else str(kind)
    position = row.get("changed_position")
    return where if position is None else f"{where} @{position}"


def _money(row: Row) -> str | None:
    from pipeline.reports.numbers import money

    if row.get("lost_cost") is None:
        return None
    return f"{money(row['lost_cost'])} {row.get('currency') or ''}".rstrip()


def _change(row: Row) -> str | None:
    """The parent's excerpt over the example's, a line each (the cell keeps line breaks)."""
    before, after = row.get("example_parent_excerpt"), row.get("example_excerpt")
    if before is None and after is None:
        return None
    return f"{before or ''}\n{after or ''}"


def _finding(row: Row) -> str:
    """`system_changed · system @4 · timestamp`: the cause, where, and the kind of change."""
    parts = [row.get("cause"), _place(row), row.get("change_class"), _idle(row)]
    return " · ".join(str(p) for p in parts if p)


def _idle(row: Row) -> str | None:
    """For an expired cache: the longest idle gap before one of its breaks."""
    gap = row.get("max_gap_s")
    if row.get("cause") != "expired" or gap is None:
        return None
    minutes = round(float(gap) / 60)
    return (
        f"idle up to {minutes // 60} h {minutes % 60} min"
        if minutes >= 60
        else (f"idle up to {minutes} min")
    )


def displayed(row: Row) -> Row:
    """The row with the cells the table shows that the view leaves to the page."""
    scope = row["scope"] if row.get("scope_kind") == "conversation" else None
    return {
        **row,
        "scope_conversation": scope,
        "finding": _finding(row),
        "money": _money(row),
        "change": _change(row),
    }


def linked_conversations(rows: list[Row]) -> set[str]:
    """The conversations the section links to (the pages the weekly report writes)."""
    return {
        str(c)
        for r in rows
        for c in (r.get("example_conversation_id"), displayed(r)["scope_conversation"])
        if c
    }


def build(data: WeekData) -> Section:
    if reason := missing_reason(VIEW, VIEWS[VIEW]):
        return unavailable("findings", TITLE, CAPTION, reason)
    rows = data.get(VIEW)
    unknown = sum(int(r.get("lost_cost_unknown") or 0) for r in rows)
    caption = CAPTION + (UNKNOWN_CAPTION.format(breaks=count(unknown, "break")) if unknown else "")
    section = Section("findings", TITLE, caption)
    if rows:
        section.body_html = table(
            COLUMNS, [displayed(r) for r in rows], css="findings", week=data.week.label
        )
    else:
        section.note = "no cache break this week: nothing to fix"
    return section
