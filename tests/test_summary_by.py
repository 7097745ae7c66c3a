"""`cacheaudit summary --by day|model|agent|session`: its numbers on the demo warehouse, checked
against SQL written here by hand over the base views (requests, request_costs, cache_breaks),
not over summary_requests; and the headline's thousands separators and unpriced reasons."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from fixtures.cassettes import undated_cassette

from pipeline import schema, sql_catalog
from pipeline import sql as sqlmod
from pipeline.demo import write_demo
from pipeline.ingest import ingest
from pipeline.summary import grouped
from pipeline.warehouse import Warehouse

# Each dimension's group, written independently of queries/params/summary_by.sql.
KEYS = {
    "day": "strftime(r.day, '%Y-%m-%d')",
    "model": "r.model",
    "agent": "r.agent",
    "session": "r.session_id",
}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Warehouse:
    root = tmp_path_factory.mktemp("summary")
    capture = root / "capture.jsonl"
    write_demo(capture, seed=7, sessions=24)
    wh = Warehouse(root / "warehouse")
    ingest([capture], wh, workers=1)
    return wh


def _hand(wh: Warehouse, key: str, since: date | None, until: date | None) -> dict[Any, tuple]:
    con = sqlmod.connect(wh, only=["request_costs", "cache_breaks"])
    rows = con.sql(
        f"""
        SELECT {key} AS g,
            count(*),
            sum(r.input_tokens),
            count(*) - count(r.input_tokens),
            sum(CASE WHEN r.input_tokens IS NOT NULL THEN r.cache_read_tokens END),
            sum(CASE WHEN r.cache_read_tokens IS NOT NULL THEN r.input_tokens END),
            sum(CASE WHEN r.input_tokens IS NULL OR r.cache_read_tokens IS NULL THEN 1 ELSE 0 END),
            sum(c.cost_total),
            sum(c.savings),
            count(*) - count(c.cost_total),
            (SELECT count(*) FROM cache_breaks b JOIN requests q USING (request_id)
             WHERE {key.replace("r.", "q.")} IS NOT DISTINCT FROM {key}
               AND q.day BETWEEN $lo AND $hi),
            (SELECT sum(b.tokens_lost) FROM cache_breaks b JOIN requests q USING (request_id)
             WHERE {key.replace("r.", "q.")} IS NOT DISTINCT FROM {key}
               AND q.day BETWEEN $lo AND $hi),
            (SELECT count(*) - count(b.tokens_lost) FROM cache_breaks b
             JOIN requests q USING (request_id)
             WHERE {key.replace("r.", "q.")} IS NOT DISTINCT FROM {key}
               AND q.day BETWEEN $lo AND $hi)
        FROM requests r JOIN request_costs c USING (request_id)
        WHERE r.day BETWEEN $lo AND $hi
        GROUP BY g
        """,
        params={"lo": since or date(1, 1, 1), "hi": until or date(9999, 12, 31)},
    ).fetchall()
    return {row[0]: row[1:] for row in rows}


@pytest.mark.parametrize(
    ("by", "since", "until"),
    [
        ("day", None, None),
        ("model", None, None),
        ("agent", None, None),
        ("session", None, None),
        ("model", date(2026, 11, 21), date(2026, 11, 29)),
        ("day", date(2026, 11, 29), None),
    ],
)
def test_each_group_matches_hand_written_sql_over_the_base_views(
    demo: Warehouse, by: str, since: date | None, until: date | None
) -> None:
    _con, rel = grouped(demo, by, since, until)
    got = {r[0]: dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()}
    hand = _hand(demo, KEYS[by], since, until)
    assert set(got) == set(hand)
    for group, (n, inp, inp_unknown, read, ratio_in, excluded, cost, saved, unpriced,
                breaks, lost, lost_unknown) in hand.items():  # fmt: skip
        row = got[group]
        assert row["requests"] == n
        assert row["input_tokens"] == inp
        assert row["requests_input_unknown"] == inp_unknown
        assert row["cache_read_tokens"] == read
        assert row["hit_ratio"] == pytest.approx(read / ratio_in)
        assert row["requests_excluded_from_ratio"] == excluded
        assert row["currency"] == "USD"  # the demo is priced in dollars only
        assert row["cost"] == pytest.approx(cost)
        assert row["saved"] == pytest.approx(saved)
        assert row["requests_unpriced"] == unpriced
        assert row["cache_breaks"] == breaks
        assert row["tokens_lost_to_breaks"] == (lost or 0)
        assert row["breaks_loss_unknown"] == lost_unknown
        assert row["requests_simulated"] == 0


def test_the_days_are_inclusive_and_the_groups_add_up_to_the_headline(demo: Warehouse) -> None:
    _con, rel = grouped(demo, "day", date(2026, 11, 20), date(2026, 11, 22))
    assert [r[0] for r in rel.fetchall()] == ["2026-11-20", "2026-11-21", "2026-11-22"]
    _con, rel = grouped(demo, "agent")
    rows = [dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()]
    con = sqlmod.connect(demo, only=["headline"])
    requests, inp, read = con.sql(
        "SELECT requests, input_tokens, cache_read_tokens FROM headline"
    ).fetchall()[0]
    assert sum(r["requests"] for r in rows) == requests
    assert sum(r["input_tokens"] for r in rows) == inp
    assert sum(r["cache_read_tokens"] for r in rows) == read


def test_summary_by_prints_a_table_with_thousands_separators_and_json_for_programs(
    cli, demo: Warehouse
) -> None:
    table = cli("summary", "--by", "model", "-w", str(demo.root))
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split()[:4] == ["model", "requests", "input", "cache"]
    _con, rel = grouped(demo, "model")
    first = dict(zip(rel.columns, rel.fetchall()[0], strict=True))
    assert lines[2].split()[:3] == [
        first["group"],
        f"{first['requests']:,}",
        f"{first['input_tokens']:,}",
    ]
    out = cli("summary", "--by", "model", "-w", str(demo.root), "--format", "json")
    records = json.loads(out.stdout)
    assert records[0]["group"] == first["group"]
    assert records[0]["input_tokens"] == first["input_tokens"]


def test_the_headline_prints_counts_with_thousands_separators_and_unpriced_in_words(
    cli, demo: Warehouse
) -> None:
    con = sqlmod.connect(demo, only=["headline"])
    requests, inp = con.sql("SELECT requests, input_tokens FROM headline").fetchall()[0]
    result = cli("summary", "-w", str(demo.root))
    assert result.returncode == 0, result.stderr
    assert f"requests:            {requests:,}\n" in result.stdout
    assert f"input tokens:        {inp:,} (" in result.stdout
    # The demo's streams cut before their usage chunk have no input count: unpriced, in words.
    assert "11 with input tokens not reported (input_unknown)" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--by", "week"], "error: --by 'week' is not one of day, model, agent, session"),
        (["--by", "day", "--since", "2026-13-01"], "error: --since '2026-13-01' is not a date"),
        (
            ["--by", "day", "--since", "2026-11-29", "--until", "2026-11-01"],
            "error: --since 2026-11-29 is after --until 2026-11-01",
        ),
        (["--since", "2026-11-01"], "error: --since and --until choose the days of --by"),
        (["--by", "day", "--format", "xml"], "error: unknown format 'xml'"),
    ],
)
def test_a_wrong_option_is_a_one_line_usage_error(
    cli, demo: Warehouse, args: list[str], message: str
) -> None:
    result = cli("summary", *args, "-w", str(demo.root))
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines()[0] == message
    assert result.stdout == ""


def test_the_summary_by_schema_describes_the_query_columns_and_types(demo: Warehouse) -> None:
    _con, rel = grouped(demo, "day")
    spec = schema.load("summary_by")
    assert list(rel.columns) == spec.names
    assert [str(t) for t in rel.types] == [c.type for c in spec.columns]


def test_the_parameterised_query_names_its_inputs_and_ends_in_final() -> None:
    text = (Path(sql_catalog.QUERY_DIR) / "params" / "summary_by.sql").read_text(encoding="utf-8")
    assert "-- name: summary_by" in text and "-- inputs: summary_requests" in text
    assert "final AS (" in text


def test_the_hit_ratio_counts_only_requests_with_input_and_read_known(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from fixtures.prices import tiny_warehouse as tiny

    at = datetime(2026, 11, 30, 10, tzinfo=UTC)
    wh = tiny.write(
        tmp_path / "warehouse",
        [
            tiny.request("a", at, "openai", "gpt-4.1", input_tokens=1_000,
                         cache_read_tokens=500, output_tokens=1),
            tiny.request("b", at, "openai", "gpt-4.1", input_tokens=1_000,
                         cache_read_tokens=None, output_tokens=1),
            tiny.request("c", at, "openai", "gpt-4.1", input_tokens=None,
                         cache_read_tokens=None, output_tokens=None),
        ],
    )  # fmt: skip
    _con, rel = grouped(wh, "model")
    [row] = [dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()]
    # Input: 1,000 + 1,000 known, one unknown. Ratio over "a" only: 500 / 1,000; with "b"'s
    # input in the denominator it would read 0.25.
    assert (row["input_tokens"], row["requests_input_unknown"]) == (2_000, 1)
    assert (row["cache_read_tokens"], row["requests_excluded_from_ratio"]) == (500, 2)
    assert row["hit_ratio"] == pytest.approx(0.5)


def test_without_by_csv_prints_the_headline_row_for_programs(cli, demo: Warehouse) -> None:
    result = cli("summary", "-w", str(demo.root), "--format", "csv")
    assert result.returncode == 0, result.stderr
    header, row = result.stdout.splitlines()
    con = sqlmod.connect(demo, only=["headline"])
    rel = con.sql("SELECT requests, input_tokens FROM headline")
    values = dict(zip(header.split(","), row.split(","), strict=True))
    assert (int(values["requests"]), int(values["input_tokens"])) == rel.fetchall()[0]


def test_an_unpriced_request_does_not_make_its_group_a_mix_of_currencies(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from fixtures.prices import tiny_warehouse as tiny

    # a price row in CNY for a model of the user's own: request "b" finds it, but its cache read
    # is unknown, so it has the row's currency and no money
    prices = tmp_path / "cny.csv"
    prices.write_text(
        "provider,model,effective_from,effective_to,currency,condition,input_cache_miss_per_mtok,"
        "input_cache_hit_per_mtok,cache_write_5m_per_mtok,cache_write_1h_per_mtok,"
        "output_per_mtok,notes,source\n"
        "deepseek,house-model,2026-01-01T00:00Z,,CNY,,2,0.2,,,3,a user row,none\n",
        encoding="utf-8",
    )
    at = datetime(2026, 11, 30, 10, tzinfo=UTC)
    wh = tiny.write(
        tmp_path / "warehouse",
        [
            tiny.request("a", at, "openai", "gpt-4.1", input_tokens=1_000,
                         cache_read_tokens=500, output_tokens=1),
            tiny.request("b", at, "deepseek", "house-model", input_tokens=2_000,
                         cache_read_tokens=None, output_tokens=10),
        ],
    )  # fmt: skip
    options = sqlmod.SqlOptions(prices_paths=(prices,))
    con = sqlmod.connect(wh, options=options, only=["request_costs"])
    costs = dict(con.sql("SELECT request_id, currency || ' ' || coalesce(cost_total::VARCHAR, '-')"
                         " FROM request_costs").fetchall())  # fmt: skip
    assert costs["b"] == "CNY -"  # the case: a currency, no money
    [(cost_a,)] = con.sql("SELECT cost_total FROM request_costs WHERE request_id = 'a'").fetchall()
    _con, rel = grouped(wh, "day", options=options)
    [row] = [dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()]
    assert (row["currency"], row["requests_unpriced"]) == ("USD", 1)
    assert cost_a is not None and row["cost"] == pytest.approx(cost_a)


def test_a_request_without_prompt_segments_has_unknown_breaks_not_zero(tmp_path: Path) -> None:
    # OTel spans that carried usage but no prompt content: nothing to find a break in
    wh = Warehouse(tmp_path / "warehouse")
    ingest([Path(__file__).parent / "fixtures" / "otlp" / "genai_spans.jsonl"], wh, workers=1)
    con = sqlmod.connect(wh, only=["requests"])
    segments = dict(con.sql("SELECT model, segment_count FROM requests").fetchall())
    assert segments["claude-sonnet-4-5-20250929"] == 0 and segments["gpt-4o"] > 0
    _con, rel = grouped(wh, "model")
    rows = {r[0]: dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()}
    no_content = rows["claude-sonnet-4-5-20250929"]
    assert (no_content["cache_breaks"], no_content["tokens_lost_to_breaks"]) == (None, None)
    assert no_content["requests_breaks_unknown"] == 1
    con = sqlmod.connect(wh, only=["cache_breaks"])
    [breaks] = con.sql(
        "SELECT count(*), sum(tokens_lost) FROM cache_breaks JOIN requests USING (request_id)"
        " WHERE requests.model = 'gpt-4o'"
    ).fetchall()
    with_content = rows["gpt-4o"]  # analysed: its breaks are known (its first turn's row)
    assert (with_content["cache_breaks"], with_content["tokens_lost_to_breaks"]) == breaks
    assert with_content["cache_breaks"] == 1 and with_content["requests_breaks_unknown"] == 0


def _undated_cassette(path: Path) -> Path:
    """One OpenAI call recorded without a Date header: 1,200 input tokens, 1,024 cached."""
    return undated_cassette(path, cached=1024)


def test_summary_by_without_a_period_counts_the_requests_without_a_start_time(
    tmp_path: Path, cli
) -> None:
    # `summary --by model` dropped a cassette's undated request (its model vanished) and
    # `--by day` had no row for it, while the headline counted it: 3 requests against 2
    dated = Path(__file__).parent / "fixtures" / "breaks" / "system_changed.jsonl"
    wh = tmp_path / "wh"
    ingested = cli("ingest", str(dated), str(_undated_cassette(tmp_path / "c.json")), "-w", str(wh))
    assert ingested.returncode == 0, ingested.stderr
    by_model = json.loads(cli("summary", "--by", "model", "-f", "json", "-w", str(wh)).stdout)
    # sys-1 and sys-2 sent 2,015 and 2,025 input tokens; the cassette 1,200 (1,024 cached)
    assert {r["group"]: (r["requests"], r["input_tokens"]) for r in by_model} == {
        "gpt-4.1-2025-04-14": (2, 4_040),
        "gpt-4.1-mini-2025-04-14": (1, 1_200),
    }
    by_day = json.loads(cli("summary", "--by", "day", "-f", "json", "-w", str(wh)).stdout)
    assert {r["group"]: r["requests"] for r in by_day} == {"2026-11-16": 2, None: 1}
    # a period holds only dated requests
    since = cli("summary", "--by", "day", "--since", "2026-11-01", "-f", "json", "-w", str(wh))
    assert {r["group"]: r["requests"] for r in json.loads(since.stdout)} == {"2026-11-16": 2}


def test_summary_json_lists_no_unpriced_cost_row_when_every_request_is_priced(
    tmp_path: Path, cli: Any
) -> None:
    from test_ingest_support import capture_record, line

    priced = tmp_path / "priced.jsonl"
    priced.write_bytes(b"".join(line(capture_record(i, record_id=f"r{i}")) for i in range(2)))
    wh = tmp_path / "wh"
    assert cli("ingest", str(priced), "-w", str(wh), "--workers", "1").returncode == 0
    out = cli("summary", "-w", str(wh), "--format", "json")
    assert out.returncode == 0, out.stderr
    [headline] = json.loads(out.stdout)
    # a row of currency null and 0 requests read as a currency of its own
    [usd] = headline["costs"]
    assert (usd["currency"], usd["requests"], usd["requests_unpriced"]) == ("USD", 2, 0)

    # one request the prices do not cover: its row is back, and the count is on every row
    unknown = capture_record(5, record_id="r5")
    unknown["response"]["body"] = unknown["response"]["body"].replace("gpt-4.1-mini", "house")
    (tmp_path / "unpriced.jsonl").write_bytes(line(unknown))
    assert cli("ingest", str(tmp_path / "unpriced.jsonl"), "-w", str(wh)).returncode == 0
    [headline] = json.loads(cli("summary", "-w", str(wh), "--format", "json").stdout)
    rows = [(c["currency"], c["requests"], c["requests_unpriced"]) for c in headline["costs"]]
    assert rows == [("USD", 2, 1), (None, 1, 1)]
