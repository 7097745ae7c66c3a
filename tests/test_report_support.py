"""Helpers for the report tests (no tests here): a warehouse built from hand-written rows.

The numbers in the report tests are worked out by hand from these rows.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pipeline import schema
from pipeline.warehouse import Warehouse, source_key

EVIL = "</script><script>alert(1)</script>"


def request(
    rid: str,
    at: str,
    provider: str,
    model: str,
    input_tokens: int | None,
    read: int | None,
    *,
    output: int | None = 10,
    stream: bool | None = True,
    ttft_ms: float | None = None,
    usage_status: str = "reported",
) -> dict[str, Any]:
    started = datetime.fromisoformat(at).replace(tzinfo=UTC)
    return {
        "request_id": rid,
        "started_at": started,
        "day": started.date(),
        "provider": provider,
        "api": "chat_completions",
        "model": model,
        "stream": stream,
        "status_code": 200,
        "outcome": "ok" if usage_status == "reported" else "interrupted",
        "usage_status": usage_status,
        "input_tokens": input_tokens,
        "cache_read_tokens": read,
        "uncached_input_tokens": None
        if input_tokens is None or read is None
        else input_tokens - read,
        "output_tokens": output,
        "ttft_ms": ttft_ms,
        "source": "hand.jsonl",
        "source_index": int(rid[1:]),
    }


# Week 2026-W48 is Mon 2026-11-23 .. Sun 2026-11-29; 2026-11-30 starts 2026-W49.
ROWS = [
    request(
        "r1",
        "2026-11-23T10:00:00",
        "deepseek",
        "deepseek-chat",
        1000,
        800,
        output=50,
        ttft_ms=300.0,
    ),
    request(
        "r2",
        "2026-11-24T11:00:00",
        "deepseek",
        "deepseek-chat",
        3000,
        1500,
        output=20,
        stream=False,
        ttft_ms=2000.0,
    ),
    request("r3", "2026-11-24T12:00:00", "openai", EVIL, 5000, 1000, output=10, ttft_ms=400.0),
    request("r4", "2026-11-25T09:00:00", "openai", "gpt-4.1", 4000, None, output=30, stream=None),
    request(
        "r5",
        "2026-11-25T09:30:00",
        "openai",
        "gpt-4.1",
        None,
        None,
        output=None,
        usage_status="missing",
    ),
    request(
        "r6", "2026-11-30T08:00:00", "deepseek", "deepseek-chat", 2000, 0, output=5, ttft_ms=500.0
    ),
]


PRICES_CSV = (
    "provider,model,effective_from,effective_to,currency,condition,input_cache_miss_per_mtok,"
    "input_cache_hit_per_mtok,cache_write_5m_per_mtok,cache_write_1h_per_mtok,output_per_mtok,"
    "notes,source\n"
    "testprov,m1,2026-01-01T00:00Z,,USD,,1.00,0.10,,,2.00,made up for tests,none\n"
)


def write_requests(
    root: Path, rows: list[dict[str, Any]], source_hash: str = "ab" * 16
) -> Warehouse:
    """Write rows as one ingested source (parts, then its manifest row, as ingest does)."""
    wh = Warehouse(root)
    wh.ensure()
    names = schema.load("requests").names
    columns = {name: [row.get(name) for row in rows] for name in names}
    wh.write_rows("requests", columns, source_key(source_hash), "0")
    wh.write_manifest(
        {
            "source": f"hand-{source_hash[:4]}.jsonl",
            "source_hash": source_hash,
            "format": "capture_jsonl",
            "size_bytes": 1,
            "records": len(rows),
            "accepted": len(rows),
            "rejected": 0,
            "skipped": 0,
            "ingested_at": datetime(2026, 12, 1, tzinfo=UTC),
            "cacheaudit_version": "test",
        }
    )
    return wh
