"""What README.md quotes from the demo is what the demo gives: the headline numbers, the
`summary --by agent` lines and the result of its SQL example."""

from __future__ import annotations

import re

import pytest

from pipeline import docs
from pipeline import sql as sqlmod
from pipeline.demo import write_demo
from pipeline.ingest import ingest
from pipeline.warehouse import Warehouse

README = (docs.ROOT / "README.md").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Warehouse:
    root = tmp_path_factory.mktemp("readme")
    capture = root / "capture.jsonl"
    write_demo(capture, seed=7, sessions=24)  # what `make demo` writes
    wh = Warehouse(root / "warehouse")
    ingest([capture], wh, workers=1)
    return wh


def test_the_headline_numbers_are_the_demos(demo: Warehouse) -> None:
    con = sqlmod.connect(demo, only=["headline", "cost_summary"])
    requests, ratio, unknown = con.sql(
        "SELECT requests, hit_ratio, requests_input_unknown FROM headline"
    ).fetchall()[0]
    cost, saved, left = con.sql(
        "SELECT cost_total, savings, left_on_table FROM cost_summary WHERE currency = 'USD'"
    ).fetchall()[0]
    text = " ".join(README.split())  # the paragraph wraps anywhere
    assert f"{requests:,} requests" in text
    assert f"**{ratio:.1%}**" in text
    assert f"**${cost:.4f}**" in text
    assert f"**${saved:.4f}**" in text
    assert f"**${left:.4f}**" in text
    ((lost,),) = (
        sqlmod.connect(demo, only=["findings"])
        .sql("SELECT sum(lost_cost) FROM findings WHERE currency = 'USD'")
        .fetchall()
    )
    assert f"lost **${lost:.4f}**" in text
    assert f"The {unknown} requests whose streams were cut" in text


def test_the_summary_sample_lines_are_printed_by_summary_by_agent(cli, demo: Warehouse) -> None:
    sample = re.search(r"\$ cacheaudit summary --by agent\n(.*?)\n\.\.\.\n", README, re.DOTALL)
    assert sample
    result = cli("summary", "--by", "agent", "-w", str(demo.root))
    assert result.returncode == 0, result.stderr
    printed = result.stdout.splitlines()
    for line in sample.group(1).splitlines():
        assert line in printed


def test_the_sql_example_runs_and_agrees_with_summary_by_model(demo: Warehouse) -> None:
    found = re.search(r'cacheaudit sql "(select model,.*?)"', README, re.DOTALL)
    assert found
    _con, rel = sqlmod.run_user_sql(demo, found.group(1))
    got = {model: (ratio, unknown) for model, ratio, unknown in rel.fetchall()}
    con = sqlmod.connect(demo, only=["summary_requests"])
    want = con.sql(
        "SELECT model, sum(cache_read_tokens) FILTER (WHERE ratio_known)"
        " / sum(input_tokens) FILTER (WHERE ratio_known), count(*) FILTER (WHERE NOT ratio_known)"
        " FROM summary_requests GROUP BY model"
    ).fetchall()
    assert set(got) == {m for m, _, _ in want}
    for model, ratio, unknown in want:
        assert got[model][0] == pytest.approx(ratio)
        assert got[model][1] == unknown
