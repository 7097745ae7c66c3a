"""A mixed capture of every dialect (all 51 reference samples), written
both as capture JSONL and as HAR, ingests through `cacheaudit ingest`, and the `requests` table
gives the hand-computed token-weighted hit ratio per provider."""

from __future__ import annotations

import base64
import json
from datetime import timedelta
from fractions import Fraction
from pathlib import Path

import pytest
from test_samples import EXPECTED, exchange_for

from pipeline.capture_format import dumps_record, iso_utc, make_record

# sum(cache_read_tokens) / sum(input_tokens) over rows where both are known, worked out by hand
# from tests/fixtures/dialects/expected.json (itself hand-computed from the samples):
HIT_RATIO = {
    "alibaba": Fraction(0, 36),  # 18 + 18, no reads
    # reads 1111 + 1111 + 0 + 6289 + 55096 + 0 + 0; inputs 1114 + 1532 + 12 + 9632 + 55377
    # + 450 + 12 (stream_basic has no cache fields: excluded)
    "anthropic": Fraction(63607, 68129),
    # the stream sample reports no cache fields, but its total (95 = 13 + 82) says there were none
    "bedrock": Fraction(1322, 2648 + 13),
    # reads 512 + 320 + 384; inputs 13 + 563 + 18 + 339 + 6 + 440 + 88
    "deepseek": Fraction(1216, 1467),
    # reads 3512 + 204; inputs 13 + 3520 + 373 + 9 + 7 + 7 + 18 + 9
    "google": Fraction(3716, 3956),
    # reads 4012 + 4012 + 3072 + 8320; inputs 16 + 4020 + 4020 + 16 + 7243 + 4020 + 4020 + 278
    # + 9463 (the two 2024 streams report no cached_tokens: excluded)
    "openai": Fraction(19416, 33096),
    "openrouter": Fraction(3211, 6840),  # inputs 3329 + 3214 + 254 + 43
    "zhipu": Fraction(0, 13),
}
# Rows whose read or input is unknown, per provider (excluded from the ratio, and counted).
UNKNOWN = {"anthropic": 2, "bedrock": 1, "deepseek": 1, "google": 1, "groq": 1, "openai": 4}


def names() -> list[str]:
    return sorted(EXPECTED)


def write_capture(path: Path) -> None:
    with path.open("wb") as fh:
        for i, name in enumerate(names()):
            ex = exchange_for(name)
            record = make_record(
                started_at=ex.started_at + timedelta(seconds=i),
                method=ex.method,
                url=ex.url,
                request_headers=[*ex.request_headers, ("authorization", "Bearer sk-secret-1")],
                request_body=ex.request_body,
                status=ex.status,
                response_headers=ex.response_headers,
                response_body=ex.response_body,
                end_ms=100.0,
                record_id=f"mixed-{i}",
            )
            fh.write(dumps_record(record))


def write_har(path: Path) -> None:
    entries = []
    for i, name in enumerate(names()):
        ex = exchange_for(name)
        try:
            content = {"mimeType": "x", "text": ex.response_body.decode("utf-8")}
        except UnicodeDecodeError:  # the Bedrock event stream is binary
            content = {
                "mimeType": "x",
                "text": base64.b64encode(ex.response_body).decode(),
                "encoding": "base64",
            }
        entries.append(
            {
                "startedDateTime": iso_utc(ex.started_at + timedelta(seconds=i)),
                "time": 100,
                "request": {
                    "method": "POST",
                    "url": ex.url,
                    "headers": [{"name": "x-api-key", "value": "sk-ant-secret-2"}],
                    "postData": {"mimeType": "application/json", "text": ex.request_body.decode()},
                },
                "response": {
                    "status": ex.status,
                    "headers": [{"name": k, "value": v} for k, v in ex.response_headers],
                    "content": content,
                },
                "timings": {"send": 1, "wait": 50, "receive": 49},
            }
        )
    # A page load in the same HAR is skipped, not rejected.
    entries.append(
        {
            "startedDateTime": iso_utc(ex.started_at),
            "time": 5,
            "request": {"method": "GET", "url": "https://example.com/", "headers": []},
            "response": {"status": 200, "headers": [], "content": {"text": "<html>"}},
            "timings": {"send": 1, "wait": 2, "receive": 2},
        }
    )
    path.write_text(json.dumps({"log": {"version": "1.2", "entries": entries}}))


QUERY = """
select provider,
       sum(cache_read_tokens) filter (where cache_read_tokens is not null
                                      and input_tokens is not null) as reads,
       sum(input_tokens) filter (where cache_read_tokens is not null
                                 and input_tokens is not null) as inputs,
       count(*) filter (where cache_read_tokens is null or input_tokens is null) as unknown,
       count(*) as n
from requests group by provider order by provider
"""


@pytest.mark.parametrize("fmt", ["capture_jsonl", "har"])
def test_a_mixed_capture_gives_the_hand_computed_hit_ratio_per_provider(
    fmt: str,
    tmp_path: Path,
    cli,  # type: ignore[no-untyped-def]
) -> None:
    source = tmp_path / ("mixed.jsonl" if fmt == "capture_jsonl" else "mixed.har")
    (write_capture if fmt == "capture_jsonl" else write_har)(source)
    wh = tmp_path / "wh"
    result = cli("ingest", str(source), "--warehouse", str(wh))
    assert result.returncode == 0, result.stderr
    out = cli("sql", QUERY, "--format", "json", "--warehouse", str(wh))
    assert out.returncode == 0, out.stderr
    rows = {r["provider"]: r for r in json.loads(out.stdout)}
    assert sum(r["n"] for r in rows.values()) == 51
    ratios = {
        p: Fraction(int(r["reads"]), int(r["inputs"])) for p, r in rows.items() if r["inputs"]
    }
    assert ratios == HIT_RATIO
    assert {p: r["unknown"] for p, r in rows.items() if r["unknown"]} == UNKNOWN
    everything = b"".join(f.read_bytes() for f in wh.rglob("*") if f.is_file())
    assert b"sk-secret-1" not in everything
    assert b"sk-ant-secret-2" not in everything
