"""Prefix hygiene findings, worst first (a table: each finding is read, not plotted)."""

from __future__ import annotations

from pipeline.reports.data import Row, WeekData, missing_reason
from pipeline.reports.section import Column, Section, table, unavailable

VIEW = "report_hygiene"
VIEWS = {VIEW: "prefix_hygiene"}
TITLE = "Prefix hygiene findings"
CAPTION = (
    "Things to fix before the next deploy, for the agents active this week, costliest first:"
    " volatile content (times, ids, counters) early in the prompt, parts that change every turn"
    " placed before parts that stay, rewritten histories, tool calls without results. Each names"
    " an example request, the segment position and an excerpt. Findings cover the traffic this"
    " page reads: the week and the days before it that a cache entry could outlive into it;"
    ' `cacheaudit sql "SELECT * FROM prefix_hygiene"` gives them over the whole history.'
)
COLUMNS = (
    Column("rank", "#", "int"),
    Column("subject", "Agent / conversation", link="subject_conversation"),
    Column("finding", "Finding"),
    Column("detail", "Detail"),
    Column("tokens_per_turn", "Tokens per turn", "int"),
    Column("turns_affected", "Turns", "int"),
    Column("example_request_id", "Example request", link="conversation_id"),
    Column("position", "Position", "int"),
    Column("excerpt", "Excerpt", "code"),
)


def with_links(row: Row) -> Row:
    """The row with the conversation its subject is, when it is one (not an agent): the subject
    links to that conversation's page, and the example request to its own conversation's."""
    subject = row["subject"] if row.get("subject_kind") == "conversation" else None
    return {**row, "subject_conversation": subject}


def linked_conversations(rows: list[Row]) -> set[str]:
    """The conversations the section links to (the pages the weekly report writes)."""
    links = (with_links(r) for r in rows)
    return {
        str(c) for r in links for c in (r["subject_conversation"], r.get("conversation_id")) if c
    }


def build(data: WeekData) -> Section:
    if reason := missing_reason(VIEW, VIEWS[VIEW]):
        return unavailable("hygiene", TITLE, CAPTION, reason)
    rows = data.get(VIEW)
    section = Section("hygiene", TITLE, CAPTION)
    if rows:
        section.body_html = table(COLUMNS, [with_links(r) for r in rows], week=data.week.label)
    else:
        section.note = "no finding for the agents active this week"
    return section
