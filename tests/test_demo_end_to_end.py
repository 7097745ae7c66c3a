"""The demo path a new user runs: generate, ingest with the CLI, query with the CLI."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq
import pytest

from pipeline.demo import write_demo


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("demo")
    capture = base / "capture.jsonl"
    write_demo(capture, seed=3, sessions=6, min_turns=10, max_turns=14)
    return capture, base / "warehouse"


def _usage_written_by_the_generator(capture: Path) -> tuple[int, int, int]:
    """(requests, sum input, sum read) straight from the response bodies the generator wrote,
    for the requests whose usage reached the client (an oracle independent of the normaliser)."""
    requests = total_in = total_read = 0
    for line in capture.read_bytes().splitlines():
        rec = orjson.loads(line)
        requests += 1
        body = (rec["response"] or {}).get("body") or ""
        usage = None
        if body.startswith("data:"):
            for event in body.split("\n\n"):
                payload = event.removeprefix("data: ")
                if payload.startswith("{"):
                    usage = orjson.loads(payload).get("usage") or usage
        elif body.startswith("{"):
            usage = orjson.loads(body).get("usage")
        if usage:
            total_in += usage["prompt_tokens"]
            total_read += usage["prompt_tokens_details"]["cached_tokens"]
    return requests, total_in, total_read


def test_ingesting_the_demo_folder_reads_the_capture_and_not_its_answer_key(
    tmp_path: Path, cli: Any
) -> None:
    folder = tmp_path / "demo"
    write_demo(folder / "capture.jsonl", seed=3, sessions=2, min_turns=10, max_turns=11)
    assert (folder / "capture.planted.csv").is_file()
    out = cli("ingest", str(folder), "-w", str(tmp_path / "wh"))
    assert out.returncode == 0, out.stderr
    assert " 0 rejected" in out.stderr
    assert "ignoring 1 file(s) without a capture extension" in out.stderr


def test_the_same_seed_writes_the_same_bytes(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_demo(a, seed=11, sessions=3, min_turns=10, max_turns=12)
    write_demo(b, seed=11, sessions=3, min_turns=10, max_turns=12)
    assert a.read_bytes() == b.read_bytes()
    assert (tmp_path / "a.planted.csv").read_bytes() == (tmp_path / "b.planted.csv").read_bytes()


def test_ingest_prints_records_equal_accepted_plus_rejected_plus_skipped(cli, demo) -> None:
    capture, wh = demo
    result = cli("ingest", str(capture), "--warehouse", str(wh))
    assert result.returncode == 0, result.stderr
    n = len(capture.read_bytes().splitlines())
    assert f"total: {n} records = {n} accepted + 0 rejected + 0 skipped" in result.stderr
    again = cli("ingest", str(capture), "--warehouse", str(wh))
    assert "already ingested" in again.stderr


def test_the_hit_ratio_matches_the_usage_the_generator_wrote(cli, demo) -> None:
    capture, wh = demo
    cli("ingest", str(capture), "--warehouse", str(wh))
    n, total_in, total_read = _usage_written_by_the_generator(capture)
    result = cli(
        "sql",
        "select requests, input_tokens, cache_read_tokens, hit_ratio from headline",
        "--warehouse",
        str(wh),
        "--format",
        "json",
    )
    assert result.returncode == 0, result.stderr
    row = json.loads(result.stdout)[0]
    assert row["requests"] == n
    assert row["input_tokens"] == total_in
    assert row["cache_read_tokens"] == total_read
    assert row["hit_ratio"] == pytest.approx(total_read / total_in)


def test_sql_writes_csv_and_parquet_and_keeps_diagnostics_off_stdout(cli, demo, tmp_path) -> None:
    capture, wh = demo
    cli("ingest", str(capture), "--warehouse", str(wh))
    query = "select provider, count(*) as n from requests group by 1 order by 1"
    as_csv = cli("sql", query, "-w", str(wh), "--format", "csv")
    rows = list(csv.reader(io.StringIO(as_csv.stdout)))
    assert rows[0] == ["provider", "n"]
    assert {r[0] for r in rows[1:]} == {"deepseek", "openai"}
    out = tmp_path / "x.parquet"
    as_parquet = cli("sql", query, "-w", str(wh), "--format", "parquet", "--out", str(out))
    assert as_parquet.returncode == 0, as_parquet.stderr
    assert as_parquet.stdout == ""
    assert pq.read_table(out).num_rows == len(rows) - 1


def test_parquet_without_out_is_a_usage_error(cli, demo) -> None:
    _, wh = demo
    result = cli("sql", "select 1", "-w", str(wh), "--format", "parquet")
    assert result.returncode == 2
    assert "--out" in result.stderr


def test_unknown_usage_is_counted_not_zero(cli, demo) -> None:
    capture, wh = demo
    cli("ingest", str(capture), "--warehouse", str(wh))
    result = cli(
        "sql",
        "select count(*) filter (where usage_status = 'missing') as missing,"
        " count(*) filter (where usage_status = 'missing' and input_tokens is not null) as zeroed"
        " from requests",
        "-w",
        str(wh),
        "--format",
        "json",
    )
    row = json.loads(result.stdout)[0]
    assert row["zeroed"] == 0


def test_summary_prints_cost_per_currency_and_counts_unpriced_requests(cli, demo) -> None:
    capture, wh = demo
    cli("ingest", str(capture), "--warehouse", str(wh))
    result = cli("summary", "-w", str(wh))
    assert result.returncode == 0, result.stderr
    data = json.loads(
        cli("sql", "select * from cost_summary", "-w", str(wh), "--format", "json").stdout
    )
    usd = next(r for r in data if r["currency"] == "USD")
    assert f"cost (USD):          {usd['cost_total']:.4f}" in result.stdout
    unpriced = data[0]["requests_unpriced"]
    if unpriced:
        assert f"unpriced:          {unpriced} requests" in result.stdout


def test_summary_of_an_empty_warehouse_says_to_ingest_first(cli, tmp_path) -> None:
    (tmp_path / "nothing").mkdir()
    result = cli("summary", "-w", str(tmp_path / "nothing"))
    assert result.returncode == 0
    assert "requests:            0" in result.stdout
    assert "cacheaudit ingest" in result.stderr
