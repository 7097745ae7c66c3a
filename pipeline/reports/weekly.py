"""`cacheaudit report weekly`: one self-contained page per ISO week, plus index.html.

Which weeks: one (`week`), every week overlapping a date range (`since`/`until`), every week with
data (`all_weeks`, skipping weeks whose input stamp is unchanged), or by default the latest week
with data. A week with no requests is a NotFoundError, never an empty page.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import duckdb

from pipeline import dead_work, sql
from pipeline.errors import NotFoundError, UsageError
from pipeline.period import Period, day_of, days_with_requests
from pipeline.reports import footer, page
from pipeline.reports.data import (
    Row,
    WeekData,
    fetch,
    fetch_weeks,
    materialise,
    view_exists,
)
from pipeline.reports.index import render_index
from pipeline.reports.numbers import count
from pipeline.reports.sections import findings, hygiene, weekly_modules, weekly_views
from pipeline.reports.stamp import stored_views, week_stamp
from pipeline.reports.weeks import IsoWeek, weeks_between
from pipeline.warehouse import Warehouse

MANIFEST = "weeks.json"


def default_out_dir() -> Path:
    return Path(os.environ.get("CACHEAUDIT_REPORTS_DIR", "reports/out"))


@dataclass(frozen=True, slots=True)
class WeekSelection:
    week: str | None = None
    since: date | None = None
    until: date | None = None
    all_weeks: bool = False

    def check(self) -> None:
        ranged = self.since is not None or self.until is not None
        if sum([self.week is not None, ranged, self.all_weeks]) > 1:
            raise UsageError("use one of --week, --since/--until, --all")
        if ranged and (self.since is None or self.until is None):
            raise UsageError("--since and --until go together")
        if self.week is not None:
            IsoWeek.parse(self.week)  # a misspelt week is said before anything else


@dataclass(slots=True)
class WeeklyResult:
    written: list[Path] = field(default_factory=list)
    unchanged: list[Path] = field(default_factory=list)
    conversations: list[Path] = field(default_factory=list)  # pages the weeks link to
    index: Path | None = None


def week_file(week: IsoWeek) -> str:
    return f"{week.label}.html"


def _headlines(con: duckdb.DuckDBPyConnection) -> dict[IsoWeek, Row]:
    rows = fetch(con, "report_weekly_headline", "requests > 0", [])
    return {IsoWeek(date.fromisoformat(r["week"])): r for r in rows}


def _select(
    selection: WeekSelection, available: set[IsoWeek], *, undated: bool = False
) -> list[IsoWeek]:
    known = ", ".join(w.label for w in sorted(available)) or "none (run `cacheaudit ingest`)"
    hint = f"weeks with data: {known}"
    if selection.week is not None:
        week = IsoWeek.parse(selection.week)
        if week not in available:
            raise NotFoundError(f"no requests in week {week.label}", hint=hint)
        return [week]
    if selection.since is not None and selection.until is not None:
        weeks = weeks_between(selection.since, selection.until, available)
        if not weeks:
            raise NotFoundError(
                f"no requests between {selection.since} and {selection.until}", hint=hint
            )
        return weeks
    if not available and undated:  # rows there are, but none has a day: not "no requests"
        raise NotFoundError(
            "no request in the warehouse has a start time, so none belongs to a week",
            hint="a cassette without Date headers records none; `cacheaudit summary` and"
            " `cacheaudit findings` count such requests",
        )
    if not available:
        raise NotFoundError("the warehouse has no requests", hint=hint)
    return sorted(available) if selection.all_weeks else [max(available)]


def _load_manifest(out_dir: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads((out_dir / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # A report killed while it wrote a page (SIGKILL: no clean-up runs) left its temporary file
    # beside the pages for good; the next report writing into the folder removes those of
    # processes that are gone, once per folder.
    dead_work.remove_dead_work_once(path.parent, dead_work.REPORT_PAGE, files_only=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def _subtitle(week: IsoWeek, headline: Row) -> str:
    span = f"{week.monday:%a %d %b %Y} to {week.sunday:%a %d %b %Y} (UTC)"
    return f"{span} · {count(int(headline['requests']), 'request')}"


def _price_digest(data: WeekData) -> str | None:
    digests = sorted(
        {str(r["price_digest"]) for r in data.get("report_weekly_cost") if r.get("price_digest")}
    )
    return ", ".join(digests) or None


def build_week_page(
    data: WeekData, *, sources_html: str, warehouse: str, now: datetime, stamp: str = ""
) -> str:
    sections = [module.build(data) for module in weekly_modules()]
    headline = data.get("report_weekly_headline")[0]
    return page.render(
        page.Page(
            title=f"cacheaudit weekly report {data.week.label}",
            heading=f"Prompt cache report, week {data.week.label}",
            subtitle=_subtitle(data.week, headline),
            sections=sections,
            footer_html=footer.render(
                sources=sources_html,
                warehouse=warehouse,
                price_digest=_price_digest(data),
                generated_at=now,
            ),
            nav_html='<nav><a href="index.html">All weeks</a></nav>',
            stamp=stamp,
        )
    )


def _linked_conversations(
    wh: Warehouse,
    out_dir: Path,
    data: WeekData,
    con: duckdb.DuckDBPyConnection,
    now: datetime,
    sources: str,
) -> list[Path]:
    """The pages of the conversations the week's page links to (its findings' examples, its
    top breaks, its hygiene findings' subjects and examples), so that its links open offline."""
    from pipeline.reports.conversation import generate_conversation  # it imports this module

    top = {str(r["conversation_id"]) for r in data.get("report_top_breaks")}
    ids = sorted(
        top
        | hygiene.linked_conversations(data.get(hygiene.VIEW))
        | findings.linked_conversations(data.get(findings.VIEW))
    )
    # the pages come from the week's read: turns outside its days are not in them, so they are
    # the week's own pages (named by it), never another week's
    week = data.week.label
    return [
        generate_conversation(wh, out_dir, cid, now=now, con=con, week=week, sources=sources)
        for cid in ids
    ]


def _write_week(
    wh: Warehouse,
    out_dir: Path,
    week: IsoWeek,
    stamp: str,
    options: sql.SqlOptions,
    now: datetime,
    result: WeeklyResult,
) -> dict[str, Any]:
    """One week's page and the conversation pages it links to; its manifest entry.

    The page reads its week's days and the margin before them, whatever else is selected: a
    page is the same whether written alone or with --all, and a report's time and memory follow
    the week's size, not the warehouse's."""
    con = sql.connect(wh, options=options, period=Period(week.monday, week.sunday))
    headline = _headlines(con).get(week)
    if headline is None:  # a partition of that week holds no request row
        raise NotFoundError(f"no requests in week {week.label}")
    wanted = weekly_views()
    views = [v for v in wanted if view_exists(v)]
    materialise(con, {wanted[v] for v in views})
    data = WeekData(week, {v: fetch_weeks(con, v, [week]).get(week, []) for v in views})
    # every page of the week has the same footer: its sources are read once (one manifest
    # file per source: 0.07 s a page on a warehouse of 707 hourly sources)
    sources = footer.sources_html(con)
    html = build_week_page(data, sources_html=sources, warehouse=str(wh.root), now=now, stamp=stamp)
    path = out_dir / week_file(week)
    write_atomic(path, html)
    result.written.append(path)
    result.conversations += _linked_conversations(wh, out_dir, data, con, now, sources)
    return {
        "stamp": stamp,
        "file": week_file(week),
        "generated_at": now.isoformat(),
        "headline": headline,
        "cost": data.get("report_weekly_cost"),
    }


def generate_weekly(
    wh: Warehouse,
    out_dir: Path,
    selection: WeekSelection,
    *,
    options: sql.SqlOptions | None = None,
    now: datetime | None = None,
    progress: Callable[[str], None] | None = None,
) -> WeeklyResult:
    """Write the selected weeks' pages (each computed from its own days and the margin before
    them: pipeline/period.py), the manifest and the index. `progress` hears of each week when
    there are several."""
    selection.check()
    options = options or sql.SqlOptions()
    now = now or datetime.now(UTC)
    # which weeks have requests, from the names of the day partitions: nothing is read
    days = days_with_requests(wh)
    undated = not days and any(day_of(p) is None for p in wh.snapshot(["requests"])["requests"])
    weeks = _select(selection, {IsoWeek.of(d) for d in days}, undated=undated)
    manifest = _load_manifest(out_dir)
    result = WeeklyResult()
    stored = stored_views(wh, options)
    stamps = {w: week_stamp(wh, w, options, stored) for w in weeks}
    todo = []
    for week in weeks:
        entry = manifest.get(week.label, {})
        path = out_dir / week_file(week)
        if selection.all_weeks and entry.get("stamp") == stamps[week] and path.exists():
            result.unchanged.append(path)
        else:
            todo.append(week)
    for n, week in enumerate(todo, 1):
        if progress is not None and len(todo) > 1:
            progress(f"week {week.label} ({n} of {len(todo)})")
        manifest[week.label] = _write_week(wh, out_dir, week, stamps[week], options, now, result)
    write_atomic(out_dir / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    result.index = out_dir / "index.html"
    write_atomic(result.index, render_index(manifest, out_dir, now, str(wh.root)))
    return result
