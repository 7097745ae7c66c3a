"""`cacheaudit experiment report`: one self-contained page for one experiment run.

The numbers come from the warehouse (the run's capture, ingested like any traffic), found by the
tags the experiment put on every request; the experiment directory adds what was sent. Page
parts (template, bundle, sections, tables) are the shared ones in `pipeline.reports`.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import altair as alt

from pipeline import sql
from pipeline.errors import NotFoundError
from pipeline.experiment import PLAN, load_results
from pipeline.reports import escape, footer, page
from pipeline.reports.section import CHART_HEIGHT, CHART_WIDTH, Chart, Column, Section, spec, table
from pipeline.warehouse import Warehouse

# The view `experiment_requests` (queries/experiment_requests.sql) parses the plan tags; the run
# is chosen with a bound parameter.
ROWS_SQL = "SELECT * FROM experiment_requests WHERE run_id = $run ORDER BY started_at"

PHASE_NAMES = {"question": "", "tool_call": "tool call", "tool_result": "tool result"}
KINDS = ("read from cache", "written to cache", "not read")
KIND_COLORS = ("#4c78a8", "#f2a541", "#c9ced6")

# What each provider's published rules (docs/providers.md) predict, per plan request;
# "tool_result" is the second request of a tool round.
EXPECTATIONS: dict[str, dict[str, str]] = {
    "deepseek": {
        "1": "Baseline. May already hit if this prefix was sent before: never assume a cold cache.",
        "2": "Hits the whole input: request 1 persisted a unit at the end of its input.",
        "3a": "Misses P: only P+Q units exist. P is persisted now, as the prefix P+Q and P+R"
        " share.",
        "3b": "Hits P (the common prefix found at 3a); misses only S.",
        "4": "Misses everything after the changed character, even though the rest of P is the"
        " same.",
        "tool_result": "Hits the tool call's input + output (a unit at the end of the answer).",
    },
    "openai": {
        "1": "Baseline. Prompts under 1024 tokens are never cached.",
        "2": "Hits the common prefix rounded down to 1024 + k x 128 tokens.",
        "3a": "Hits P already (any earlier prompt's prefix counts), rounded down to 128-token"
        " steps.",
        "3b": "Hits P, rounded down to 128-token steps.",
        "4": "Hits only what precedes the change: nothing, below 1024 tokens.",
        "tool_result": "Hits the tool call's prompt, rounded down to 128-token steps.",
    },
    "anthropic": {
        "1": "Baseline. Writes the system, document and question breakpoints.",
        "2": "Reads the whole prompt (the last breakpoint).",
        "3a": "Reads through P (the breakpoint on the document); writes the question.",
        "3b": "Reads through P; writes the question.",
        "4": "Reads only tools and system, which precede the changed document; writes the rest.",
        "tool_result": "Reads tools and system only: tool_choice changed, which drops the"
        " messages cache.",
    },
}
PROVIDER_NAMES = {"deepseek": "DeepSeek", "openai": "OpenAI", "anthropic": "Anthropic"}


def rules_for(manifest: dict[str, Any]) -> str | None:
    """Whose published rules to set the observations against: the simulator's, else by host."""
    server = str(manifest.get("server") or "")
    for name in EXPECTATIONS:
        if f"rules={name}" in server:
            return name
    if manifest.get("api") == "messages":
        return "anthropic"
    host = urlsplit(str(manifest.get("url") or "")).hostname or ""
    return next((name for name in EXPECTATIONS if name in host), None)


READING_RULES = (
    "A single fast answer can be network luck or a quiet queue: compare latency distributions"
    " over repeats, never one request.",
    "A single miss does not prove a prefix is not reusable: caches are best-effort, take"
    " seconds to build, and are spread over machines. Look at every repeat.",
    "Different output text does not mean the cache failed: a cache hit reuses the prompt's"
    " computed state, the answer is always generated afresh.",
    "Read the cache fields first (hit and miss tokens), then latency. For DeepSeek and OpenAI"
    " the input count includes the cached part; never add them. A miss is not a cache write.",
)


@dataclass(frozen=True, slots=True)
class RunRows:
    manifest: dict[str, Any]
    rows: list[dict[str, Any]]


def _label(row: dict[str, Any]) -> str:
    phase = PHASE_NAMES.get(row["phase"], row["phase"])
    plan = next((p for p in PLAN if p.request == row["request"]), None)
    name = f"{row['request']} {plan.label if plan else ''}".strip()
    return f"{name} · {phase}" if phase else name


def load_run(exp_dir: Path, wh: Warehouse, options: sql.SqlOptions | None = None) -> RunRows:
    manifest, _results = load_results(exp_dir)
    run_id = manifest["run_id"]
    # the views the page reads and what they read, not all of queries/ (each is bound)
    con = sql.connect(wh, options=options, only=["experiment_requests"])
    rel = sql.run(con, ROWS_SQL, {"run": run_id})
    columns = rel.columns
    rows = []
    for values in rel.fetchall():
        row = dict(zip(columns, values, strict=True))
        row.update(
            repeat=row["repeat"] or 0,
            step=row["step"] or "?",
            request=row.pop("plan_request") or "?",
            order=row.pop("plan_order") or 0,
        )
        row["label"] = _label(row)
        rows.append(row)
    if not rows:
        raise NotFoundError(
            f"no requests of experiment run {run_id} in the warehouse {wh.root}",
            hint=f"ingest its capture first: cacheaudit ingest {exp_dir / 'capture'} -w {wh.root}",
        )
    rows.sort(key=lambda r: r["order"])
    return RunRows(manifest, rows)


def _split(row: dict[str, Any]) -> dict[str, int] | None:
    """Read / written / not read tokens, or None when usage is unknown (never drawn as 0)."""
    total, read = row["input_tokens"], row["cache_read_tokens"]
    if total is None or read is None:
        return None
    written = row["cache_write_tokens"] or 0
    return {KINDS[0]: read, KINDS[1]: written, KINDS[2]: total - read - written}


def _label_order(rows: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(r["label"] for r in rows))


def tokens_chart(rows: list[dict[str, Any]]) -> alt.LayerChart | alt.Chart:
    values = []
    for row in rows:
        split = _split(row)
        for kind, tokens in (split or {}).items():
            values.append(
                {
                    "label": row["label"],
                    "repeat": f"repeat {row['repeat']}",
                    "kind": kind,
                    "stack": KINDS.index(kind),
                    "tokens": tokens,
                    "input": row["input_tokens"],
                }
            )
    chart: alt.Chart = (
        alt.Chart(alt.InlineData(values=values))
        .mark_bar(stroke="white", strokeWidth=1)
        .encode(
            x=alt.X(
                "label:N",
                title="Request (plan order)",
                sort=_label_order(rows),
                axis=alt.Axis(labelAngle=-30),
            ),
            xOffset=alt.XOffset("repeat:N", title="Repeat"),
            y=alt.Y("tokens:Q", title="Input tokens", stack="zero"),
            color=alt.Color(
                "kind:N",
                title="Input tokens",
                scale=alt.Scale(domain=list(KINDS), range=list(KIND_COLORS)),
            ),
            order=alt.Order("stack:Q", sort="ascending"),
            tooltip=[
                alt.Tooltip("label:N", title="Request"),
                alt.Tooltip("repeat:N", title="Repeat"),
                alt.Tooltip("kind:N", title="Part"),
                alt.Tooltip("tokens:Q", title="Tokens", format=","),
                alt.Tooltip("input:Q", title="All input tokens", format=","),
            ],
        )
        .properties(
            title="Input tokens read from cache, per request and repeat",
            width=CHART_WIDTH,
            height=CHART_HEIGHT,
        )
    )
    return chart


def latency_chart(rows: list[dict[str, Any]]) -> alt.LayerChart:
    values = [
        {
            "label": r["label"],
            "repeat": f"repeat {r['repeat']}",
            "ttft_ms": r["ttft_ms"],
            "read": r["cache_read_tokens"],
            "input": r["input_tokens"],
        }
        for r in rows
        if r["ttft_ms"] is not None
    ]
    base = alt.Chart(alt.InlineData(values=values)).encode(
        x=alt.X(
            "label:N",
            title="Request (plan order)",
            sort=_label_order(rows),
            axis=alt.Axis(labelAngle=-30),
        ),
    )
    points = base.mark_circle(size=60, opacity=0.75).encode(
        y=alt.Y("ttft_ms:Q", title="Time to first answer text (ms)"),
        color=alt.Color("repeat:N", title="Repeat"),
        tooltip=[
            alt.Tooltip("label:N", title="Request"),
            alt.Tooltip("repeat:N", title="Repeat"),
            alt.Tooltip("ttft_ms:Q", title="First text (ms)", format=",.1f"),
            alt.Tooltip("read:Q", title="Read from cache", format=","),
            alt.Tooltip("input:Q", title="Input tokens", format=","),
        ],
    )
    median = base.mark_tick(thickness=2, size=28, color="#1f2933").encode(
        y=alt.Y("median(ttft_ms):Q"),
        tooltip=[alt.Tooltip("median(ttft_ms):Q", title="Median (ms)", format=",.1f")],
    )
    layered = alt.layer(points, median).properties(
        title="Time to first answer text: every repeat (dots) and the median (bar)",
        width=CHART_WIDTH,
        height=CHART_HEIGHT,
    )
    assert isinstance(layered, alt.LayerChart)
    return layered


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _summary_rows(rows: list[dict[str, Any]], rules: str | None) -> list[dict[str, Any]]:
    out = []
    for label in _label_order(rows):
        group = [r for r in rows if r["label"] == label]
        known = [r for r in group if _split(r) is not None]
        reads = [r["cache_read_tokens"] for r in known]
        shares = [r["cache_read_tokens"] / r["input_tokens"] for r in known if r["input_tokens"]]
        ttfts = [r["ttft_ms"] for r in group if r["ttft_ms"] is not None]
        first = group[0]
        key = "tool_result" if first["phase"] == "tool_result" else first["request"]
        expects = EXPECTATIONS.get(rules or "", {}).get(key)
        out.append(
            {
                "label": label,
                "expects": expects,
                "repeats": len(group),
                "unknown": len(group) - len(known),
                "hit_any": f"{sum(1 for x in reads if x > 0)} of {len(known)}",
                "read_median": _median([float(x) for x in reads]),
                "share_median": _median(shares),
                "ttft_median": _median(ttfts),
                "ttft_range": f"{min(ttfts):,.0f}–{max(ttfts):,.0f} ms" if ttfts else None,
            }
        )
    return out


SUMMARY_COLUMNS = (
    Column("label", "Request"),
    Column("expects", "Published rules predict"),
    Column("repeats", "Repeats", "int"),
    Column("unknown", "Usage unknown", "int"),
    Column("hit_any", "Repeats with any hit"),
    Column("read_median", "Median tokens read", "int"),
    Column("share_median", "Median read share", "ratio"),
    Column("ttft_median", "Median first text", "ms"),
    Column("ttft_range", "First text range"),
)
DETAIL_COLUMNS = (
    Column("order", "#", "int"),
    Column("repeat", "Repeat", "int"),
    Column("label", "Request"),
    Column("started_at", "Started (UTC)"),
    Column("outcome", "End state"),
    Column("input_tokens", "Input tokens", "int"),
    Column("cache_read_tokens", "Read from cache", "int"),
    Column("miss_tokens", "Not read", "int"),
    Column("cache_write_tokens", "Written", "int"),
    Column("output_tokens", "Output tokens", "int"),
    Column("ttft_ms", "First text", "ms"),
    Column("duration_ms", "Total", "ms"),
    Column("finish_reason", "Finish"),
)


def _settings_html(manifest: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    # A hand-edited or older manifest may lack a field or hold another type: show "?".
    change = manifest.get("step4_change")
    change = change if isinstance(change, dict) else {}
    chars = manifest.get("document_chars")
    chars_text = f"{chars:,}" if isinstance(chars, int) else "?"
    items = [
        (
            "Endpoint",
            f"<code>{escape.text(manifest.get('url'))}</code> ({escape.text(manifest.get('api'))})",
        ),
        (
            "Model requested / returned",
            escape.text(
                f"{manifest.get('model')} / {', '.join(sorted({str(r['model']) for r in rows}))}"
            ),
        ),
        (
            "Repeats, wait between requests",
            escape.text(f"{manifest.get('repeats')}, {manifest.get('wait_s')} s"),
        ),
        (
            "Document",
            escape.text(
                f"{manifest.get('document')} ({chars_text} characters;"
                f" a fresh run marker line per repeat: {manifest.get('fresh_document')})"
            ),
        ),
        (
            "Step 4 change",
            escape.text(
                f"character {change.get('offset')} of the document:"
                f" {change.get('from')!r} -> {change.get('to')!r}"
            ),
        ),
        (
            "Tool round",
            escape.text(
                "every request is a forced tool call, then its tool result"
                if manifest.get("with_tool_round")
                else "no"
            ),
        ),
        (
            "Key",
            escape.text(
                f"from ${manifest.get('api_key_env')}"
                if manifest.get("api_key_env")
                else "none sent"
            ),
        ),
        ("Server said", escape.text(manifest.get("server") or "nothing identifying")),
    ]
    return "<dl>" + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in items) + "</dl>"


def build_page(run: RunRows, footer_html: str) -> page.Page:
    manifest, rows = run.manifest, run.rows
    for row in rows:
        split = _split(row)
        row["miss_tokens"] = None if split is None else split[KINDS[1]] + split[KINDS[2]]
        row["started_at"] = row["started_at"].astimezone(UTC).strftime("%H:%M:%S.%f")[:-3]
    simulated = "cacheaudit-simulator" in str(manifest.get("server") or "")
    rules = rules_for(manifest)
    provider = PROVIDER_NAMES.get(rules or "", "the provider")
    unknown = sum(1 for r in rows if _split(r) is None)
    no_text = sum(1 for r in rows if r["ttft_ms"] is None)
    sections = [
        Section(
            "sent",
            "What was sent",
            "One factor changes at a time; everything else is"
            " fixed: model, endpoint, key, system prompt, tools and settings.",
            body_html=_settings_html(manifest, rows),
            note=(
                "These numbers come from the cacheaudit simulator, which applies published"
                " caching rules and does no inference: not a real provider."
            )
            if simulated
            else None,
        ),
        Section(
            "reading",
            "How to read this page",
            "",
            body_html="<ul>"
            + "".join(f"<li>{escape.text(t)}</li>" for t in READING_RULES)
            + "</ul>",
        ),
        Section(
            "tokens",
            "Hit and miss tokens of every repeat",
            "Each bar is one request of one repeat: the part of its input read from cache, the"
            " part written to cache (Anthropic reports writes; DeepSeek and OpenAI do not), and"
            " the rest.",
            charts=[Chart("experiment-tokens", spec(tokens_chart(rows)))],
            note=f"{unknown} request(s) with unknown usage are not drawn (unknown is not zero)."
            if unknown
            else None,
        ),
        Section(
            "latency",
            "Latency distribution",
            "Time from sending the request to the first non-empty answer text, as the capture"
            " recorded it. A cache hit shortens prefill, so hits tend to answer sooner, but"
            " network and queueing add noise: read the spread, not one dot.",
            charts=[Chart("experiment-latency", spec(latency_chart(rows)))],
            note=f"{no_text} request(s) had no answer text (a tool call, an error or a cut"
            " stream) and are not drawn."
            if no_text
            else None,
        ),
        Section(
            "summary",
            f"Observed against {provider}'s published rules",
            f"What {provider}'s published caching rules predict for each request, next to what"
            " every repeat showed. A prediction is a reading aid, not a pass mark: caches are"
            " best-effort.",
            body_html=table(SUMMARY_COLUMNS, _summary_rows(rows, rules)),
            note=None
            if rules
            else "no prediction: the endpoint is not DeepSeek, OpenAI, Anthropic or the simulator",
        ),
        Section(
            "requests",
            "Every request",
            "In the order sent. — means not reported.",
            body_html=table(DETAIL_COLUMNS, rows),
        ),
    ]
    return page.Page(
        title=f"cacheaudit experiment {manifest['run_id']}",
        heading="Prefix-cache experiment",
        subtitle=f"Run {manifest['run_id']}: {manifest.get('model')} at {manifest.get('url')},"
        f" {len(rows)} requests",
        sections=sections,
        footer_html=footer_html,
        stamp=str(manifest["run_id"]),
    )


def generate(
    exp_dir: Path, wh: Warehouse, out: Path, options: sql.SqlOptions | None = None
) -> Path:
    run = load_run(exp_dir, wh, options)
    con = sql.connect(wh, options=options, only=["sources"])
    foot = footer.render(
        sources=footer.sources_html(con),
        warehouse=str(wh.root),
        price_digest=None,
        generated_at=datetime.now(UTC),
    )
    html = page.render(build_page(run, foot))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(html, encoding="utf-8")
    return out
