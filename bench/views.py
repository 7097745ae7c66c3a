"""Benchmark: build the prefix/cache-break views on a synthetic warehouse of N requests.

    .venv/bin/python bench/views.py                 # 1,000,000 requests (the target: < 60 s)
    .venv/bin/python bench/views.py --requests 100000 --keep /tmp/wh

The warehouse is written directly as Parquet by DuckDB (no capture, no ingest): agent
conversations of 5-35 turns with growing histories, tool lists, KB-sized system prompts, and the
same breakers the demo plants (a timestamp in the system prompt, reordered tools, an idle gap, a
summarised history), half with session ids and half linked only by their message history.
Then it times `cacheaudit build` (every materialised view, each in seconds), the other prefix
views, and one `diagnose` timeline; prints the peak resident memory of the measuring process
(the warehouse is generated in a child process, so its memory is not counted) and the
precision/recall of cache_breaks against the demo generator's planted breakers.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipeline import schema  # noqa: E402

KEY = "0" * 16  # the synthetic source's key: part files are named <key>-<n>.parquet
OTHER_VIEWS = ("prefix_reuse", "expected_cache", "prefix_stability", "prefix_hygiene")
# Measured apart so its share of the build is reported: it must add under 20% to the rest.
ADDED_VIEWS = ("findings",)
AGENTS = 10  # agent a: provider/model and breaker below
TURNS_MIN, TURNS_SPREAD = 5, 31  # 5..35 turns, 20 on average

# One row per agent: provider, model, tool count, breaker.
AGENT_SQL = """
CREATE TEMP TABLE agents AS SELECT * FROM (VALUES
    (0, 'openai', 'gpt-4.1-2025-04-14', 6, 'none'),
    (1, 'deepseek', 'deepseek-chat', 4, 'timestamp'),
    (2, 'openai', 'gpt-4.1-mini-2025-04-14', 6, 'tools_reordered'),
    (3, 'openai', 'gpt-4.1-2025-04-14', 8, 'idle_gap'),
    (4, 'deepseek', 'deepseek-chat', 3, 'none'),
    (5, 'deepseek', 'deepseek-reasoner', 2, 'history_rewritten'),
    (6, 'anthropic', 'claude-sonnet-4-5', 5, 'none'),
    (7, 'anthropic', 'claude-sonnet-4-5', 7, 'none'),
    (8, 'openai', 'gpt-4.1-2025-04-14', 4, 'none'),
    (9, 'deepseek', 'deepseek-chat', 5, 'none')
) AS t(agent, provider, model, tools, breaker)
"""

TURNS_SQL = """
CREATE TEMP TABLE turns AS
WITH conv AS (
    SELECT
        c, c % 10 AS agent, 'acct_' || lpad((c % 40)::VARCHAR, 12, '0') AS account,
        CASE WHEN c % 2 = 0 THEN 'sess-' || c END AS session_id,
        5 + (c * 7) % 31 AS n_turns,
        $start::TIMESTAMPTZ + to_seconds((c - $first) * ($days * 86400 // $conversations))
            AS conv_start
    FROM range($first, $first + $conversations) AS r(c)
)
SELECT
    conv.*, a.provider, a.model, a.tools AS n_tools, a.breaker, t,
    CASE WHEN a.breaker = 'tools_reordered' THEN t // 5 ELSE 0 END AS tools_version,
    CASE WHEN a.breaker = 'timestamp' THEN t ELSE 0 END AS system_version,
    CASE WHEN a.breaker = 'history_rewritten' AND t >= n_turns // 2 THEN 1 ELSE 0 END
        AS history_version,
    conv_start + to_seconds(t * 30 + CASE WHEN a.breaker = 'idle_gap' AND t >= n_turns // 2
                                          THEN 2400 ELSE 0 END) AS started_at
FROM conv JOIN agents AS a USING (agent), range(conv.n_turns) AS r(t)
"""

SEGMENTS_SQL = """
CREATE TEMP TABLE seg AS
WITH shape AS (
    SELECT *, 'syn-' || c || '-' || t AS request_id, n_tools + 2 + 2 * t AS segment_count
    FROM turns
),
pos AS (
    SELECT s.*, p AS position FROM shape AS s, range(s.segment_count) AS r(p)
)
SELECT
    request_id, started_at::DATE AS day, position::INTEGER AS position,
    CASE WHEN position < n_tools THEN 'tool' WHEN position = n_tools THEN 'system'
         ELSE 'message' END AS kind,
    CASE WHEN position < n_tools THEN NULL WHEN position = n_tools THEN 'system'
         WHEN (position - n_tools) % 2 = 1 THEN 'user' ELSE 'assistant' END AS role,
    CASE WHEN position < n_tools THEN md5(concat_ws('|', 't', agent, tools_version, position))
         WHEN position = n_tools THEN md5(concat_ws('|', 's', agent, system_version))
         ELSE md5(concat_ws('|', 'm', c, position,
                  CASE WHEN position - n_tools <= n_turns THEN history_version ELSE 0 END))
    END AS segment_hash,
    CASE WHEN position < n_tools THEN md5(concat_ws('|', 'pt', agent, tools_version, position))
         WHEN position = n_tools THEN md5(concat_ws('|', 'ps', agent, tools_version,
                                                    system_version))
         ELSE md5(concat_ws('|', 'pm', c, tools_version, system_version, history_version,
                            position))
    END AS prefix_hash,
    CASE WHEN position < n_tools THEN 600 WHEN position = n_tools THEN 6000
         ELSE 120 + (hash(c, position) % 1800)::INTEGER END AS bytes,
    agent, c, t, system_version, started_at
FROM pos
"""


def _select_for(table: str, given: dict[str, str]) -> str:
    cols = []
    for col in schema.load(table).columns:
        expr = given.get(col.name, "NULL")
        cols.append(f"CAST({expr} AS {col.type}) AS {col.name}")
    return ", ".join(cols)


def make_warehouse(
    root: Path,
    n_requests: int,
    *,
    start: str = "2026-10-01",
    days: int = 30,
    first: int = 0,
    key: str = KEY,
) -> tuple[int, int]:
    """Write a synthetic source of about n_requests over `days` days from `start`; returns
    (requests, segments). Several sources go into one warehouse with distinct `key`s and
    conversation numbers (`first`: the first one's, which makes the ids distinct)."""
    conversations = max(TURNS_SPREAD, n_requests // 20 // TURNS_SPREAD * TURNS_SPREAD)
    con = duckdb.connect()
    con.execute("SET preserve_insertion_order = false")
    con.execute("SET enable_progress_bar = false")
    con.execute(AGENT_SQL)
    con.execute(
        TURNS_SQL, {"conversations": conversations, "start": start, "days": days, "first": first}
    )
    con.execute(SEGMENTS_SQL)
    for sub in ("requests", "segments", "segment_content", "sources"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    req_cols = {
        "request_id": "'syn-' || c || '-' || t",
        "started_at": "started_at",
        "day": "started_at::DATE",
        "provider": "provider",
        "api": "CASE WHEN provider = 'anthropic' THEN 'messages' ELSE 'chat_completions' END",
        "model": "model",
        "requested_model": "model",
        "account": "account",
        "session_id": "session_id",
        "agent": "'agent-' || agent",
        "stream": "true",
        "status_code": "200",
        "outcome": "'ok'",
        "usage_status": "'reported'",
        "input_tokens": "prompt_bytes // 4",
        "cache_read_tokens": "CASE WHEN t = 0 OR breaker IN ('timestamp', 'tools_reordered') "
        "THEN 0 ELSE (prev_bytes // 4) // 128 * 128 END",
        "output_tokens": "150",
        "duration_ms": "2500.0",
        "segment_count": "segment_count",
        "prompt_bytes": "prompt_bytes",
        "last_prefix_hash": "last_prefix_hash",
        "cache_breakpoints": "CASE WHEN provider = 'anthropic' "
        "THEN [n_tools, segment_count - 1] END",
        "source": f"'synthetic-{key}'",
        "source_index": "0",
    }
    con.execute(
        f"""
        COPY (
            WITH sizes AS (
                SELECT request_id, sum(bytes) AS prompt_bytes, count(*) AS segment_count,
                       arg_max(prefix_hash, position) AS last_prefix_hash
                FROM seg GROUP BY request_id
            ),
            joined AS (
                SELECT tu.*, s.prompt_bytes, s.segment_count, s.last_prefix_hash,
                       lag(s.prompt_bytes, 1, 0) OVER (PARTITION BY c ORDER BY t) AS prev_bytes
                FROM turns AS tu JOIN sizes AS s ON s.request_id = 'syn-' || tu.c || '-' || tu.t
            )
            SELECT {_select_for("requests", req_cols)} FROM joined
        ) TO '{root / "requests"}' (FORMAT parquet, PARTITION_BY (day), COMPRESSION zstd,
            WRITE_PARTITION_COLUMNS true, OVERWRITE_OR_IGNORE, FILENAME_PATTERN '{key}-{{i}}')
        """
    )
    seg_cols = {n: n for n in schema.load("segments").names}
    con.execute(
        f"""COPY (SELECT {_select_for("segments", seg_cols)} FROM seg)
        TO '{root / "segments"}' (FORMAT parquet, PARTITION_BY (day), COMPRESSION zstd,
            WRITE_PARTITION_COLUMNS true, OVERWRITE_OR_IGNORE, FILENAME_PATTERN '{key}-{{i}}')"""
    )
    content_cols = {
        "segment_hash": "segment_hash",
        "bytes": "any_value(bytes)",
        "content": """any_value(CASE
            WHEN kind = 'system' THEN '{"role":"system","content":"Current time: '
                || strftime(started_at, '%Y-%m-%dT%H:%M:%S') || '\\nYou are agent '
                || agent || '. Follow the runbook."}'
            WHEN kind = 'tool' THEN '{"type":"function","function":{"name":"tool_'
                || position || '"}}'
            ELSE '{"role":"' || role || '","content":"message ' || c || '/' || position || '"}'
        END)""",
    }
    con.execute(
        f"""COPY (SELECT {_select_for("segment_content", content_cols)} FROM seg
                  GROUP BY segment_hash)
        TO '{root / "segment_content" / f"{key}-0.parquet"}' (FORMAT parquet)"""
    )
    source_cols = {
        "source": f"'synthetic-{key}'",
        "source_hash": "repeat('0', 64)",
        "format": "'synthetic'",
        "records": "(SELECT count(*) FROM turns)",
        "accepted": "(SELECT count(*) FROM turns)",
        "ingested_at": "now()",
    }
    con.execute(
        f"""COPY (SELECT {_select_for("sources", source_cols)})
        TO '{root / "sources" / f"{key}.parquet"}' (FORMAT parquet)"""
    )
    counts = con.execute("SELECT (SELECT count(*) FROM turns), (SELECT count(*) FROM seg)")
    n_req, n_seg = counts.fetchone() or (0, 0)
    con.close()
    return int(n_req), int(n_seg)


def _make_in_child(root: Path, n_requests: int) -> tuple[int, int]:
    """make_warehouse in a child process: its memory must not count as the build's peak."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        return pool.apply(make_warehouse, (root, n_requests))


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def planted_scores(workdir: Path) -> dict[str, float]:
    """Precision and recall of cache_breaks over the demo generator's planted breakers."""
    from pipeline.demo import write_demo
    from pipeline.diagnose import planted_precision_recall
    from pipeline.ingest import ingest
    from pipeline.warehouse import Warehouse

    capture = workdir / "demo" / "capture.jsonl"
    write_demo(capture)
    wh = Warehouse(workdir / "demo-wh")
    ingest([capture], wh)
    return planted_precision_recall(wh, capture.with_name("capture.planted.csv"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--keep", type=Path, help="write the warehouse here and keep it")
    parser.add_argument("--skip-planted", action="store_true")
    args = parser.parse_args()

    from pipeline import materialise, sql
    from pipeline.diagnose import timeline
    from pipeline.warehouse import Warehouse

    work = Path(tempfile.mkdtemp(prefix="cacheaudit-bench-"))
    root = args.keep or work / "wh"
    try:
        if args.keep and (root / "sources").is_dir():
            print(f"reusing warehouse {root}")
        else:
            if root.exists():
                shutil.rmtree(root)
            t0 = time.perf_counter()
            n_req, n_seg = _make_in_child(root, args.requests)
            print(
                f"synthetic warehouse: {n_req:,} requests, {n_seg:,} segments "
                f"in {time.perf_counter() - t0:.1f} s"
            )
        wh = Warehouse(root)
        shutil.rmtree(root / "derived", ignore_errors=True)
        t0 = time.perf_counter()
        built = [f"{r.name} {r.seconds:.1f} s" for r in materialise.build(wh) if r.rebuilt]
        build_s = time.perf_counter() - t0
        print(f"build views ({', '.join(built)}): {build_s:.1f} s, peak RSS {_peak_mb():,.0f} MB")
        t0 = time.perf_counter()
        con = sql.connect(wh)
        timed = []
        added_s = 0.0
        for view in OTHER_VIEWS + ADDED_VIEWS:
            start = time.perf_counter()
            con.execute(
                f"COPY (SELECT * FROM {view}) TO '{work / (view + '.parquet')}' (FORMAT parquet)"
            ).fetchall()
            took = time.perf_counter() - start
            timed.append(f"{view} {took:.1f} s")
            if view in ADDED_VIEWS:
                added_s += took
        con.close()
        other_s = time.perf_counter() - t0
        print(f"other views ({', '.join(timed)}): {other_s:.1f} s, peak RSS {_peak_mb():,.0f} MB")
        print(f"total view build: {build_s + other_s:.1f} s")
        base_s = build_s + other_s - added_s
        print(f"findings add {added_s:.1f} s = {added_s / base_s:.1%} of the rest of the build")
        t0 = time.perf_counter()
        rows = timeline(wh, worst=3)
        print(
            f"diagnose (3 worst conversations, {len(rows)} turns): {time.perf_counter() - t0:.2f} s"
        )
        result = {
            "requests": args.requests,
            "build_s": round(build_s + other_s, 2),
            "findings_share": round(added_s / base_s, 4),
            "peak_rss_mb": round(_peak_mb()),
        }
        if not args.skip_planted:
            scores = planted_scores(work)
            for key, value in scores.items():
                print(f"planted breakers {key}: {value:.3f}")
            result.update(scores)
        print(json.dumps(result))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
