"""`cacheaudit check`, the CI gate over the findings, and `cacheaudit findings`, on the demo.

The demo's lost share and its expired breaks are worked out here with separate SQL over
cache_breaks and requests, so the limits below sit on either side of the true figure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli

from pipeline import findings as findings_lib
from pipeline import sql as sqlmod
from pipeline.demo import write_demo
from pipeline.errors import ExitCode
from pipeline.ingest import ingest
from pipeline.warehouse import Warehouse


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    root = tmp_path_factory.mktemp("demo")
    write_demo(root / "capture.jsonl", seed=7, sessions=24)
    wh = Warehouse(root / "warehouse")
    ingest([root / "capture.jsonl"], wh, workers=1)
    return root / "warehouse", sqlmod.connect(wh)


def _share(con: Any) -> float:
    # over the same requests on both sides: a break whose loss is unknown is out of the input too
    lost, inputs = con.execute(
        "SELECT (SELECT sum(tokens_lost) FROM cache_breaks WHERE cause <> 'provider_miss'),"
        " (SELECT sum(input_tokens) FROM requests WHERE input_tokens IS NOT NULL AND request_id"
        "   NOT IN (SELECT request_id FROM cache_breaks WHERE cause <> 'provider_miss'"
        "   AND tokens_lost IS NULL))"
    ).fetchone()
    return float(lost) / float(inputs)


def test_check_exits_0_when_the_lost_share_is_under_the_limit(demo: tuple[Path, Any]) -> None:
    wh, con = demo
    share = _share(con)
    done = run_cli("check", "-w", str(wh), "--max-lost-share", str(share + 0.01))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok")


def test_check_exits_7_naming_the_limit_when_the_lost_share_is_over_it(
    demo: tuple[Path, Any],
) -> None:
    wh, con = demo
    share = _share(con)
    done = run_cli("check", "-w", str(wh), "--max-lost-share", str(share - 0.01), "-f", "json")
    assert done.returncode == ExitCode.LIMIT == 7
    doc = json.loads(done.stdout)
    assert doc["ok"] is False
    assert doc["lost_share"] == pytest.approx(share)
    assert "lost share" in doc["broken"][0]
    assert doc["findings"]


def test_check_fails_on_a_named_cause_and_lists_only_its_findings(
    demo: tuple[Path, Any],
) -> None:
    wh, con = demo
    expired = con.execute("SELECT count(*) FROM cache_breaks WHERE cause = 'expired'").fetchone()
    assert expired[0] > 0  # the demo plants idle gaps
    done = run_cli(
        "check", "-w", str(wh), "--max-lost-share", "1", "--fail-on", "expired", "-f", "json"
    )
    assert done.returncode == 7
    doc = json.loads(done.stdout)
    assert doc["broken"] == [f"cause expired: {expired[0]} breaks"]
    assert {f["cause"] for f in doc["findings"]} == {"expired"}
    passed = run_cli("check", "-w", str(wh), "--max-lost-share", "1", "--fail-on", "model_changed")
    assert passed.returncode == 0, passed.stdout


def test_check_exits_7_over_a_money_limit_and_2_on_a_bad_format(demo: tuple[Path, Any]) -> None:
    wh, _ = demo
    over = run_cli("check", "-w", str(wh), "--max-lost-share", "1", "--max-lost-money", "0.01")
    assert over.returncode == 7
    assert "lost money" in over.stdout
    bad = run_cli("check", "-w", str(wh), "--format", "yaml")
    assert bad.returncode == ExitCode.USAGE


def test_findings_filters_by_agent(demo: tuple[Path, Any]) -> None:
    wh, con = demo
    done = run_cli("findings", "-w", str(wh), "--agent", "ops-agent", "-f", "json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    breaks = con.execute(
        "SELECT count(*) FROM cache_breaks WHERE agent = 'ops-agent' AND cause <> 'cold_start'"
    ).fetchone()[0]
    assert {r["scope"] for r in rows} == {"ops-agent"}
    assert sum(r["turns"] for r in rows) == breaks


def test_findings_over_a_period_group_only_its_breaks_and_unbounded_equal_the_view(
    demo: tuple[Path, Any],
) -> None:
    from datetime import UTC, datetime

    from pipeline import findings

    con = sqlmod.connect(Warehouse(demo[0]))  # its own: the module's may hold a result
    everything = con.sql("SELECT * FROM findings ORDER BY ALL").fetchall()
    unbounded = findings.select(con).fetchall()
    assert sorted(unbounded, key=repr) == sorted(everything, key=repr)
    since, until = datetime(2026, 11, 23, tzinfo=UTC), datetime(2026, 11, 30, tzinfo=UTC)
    rel = findings.select(con, since=since, until=until)
    rows = [dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()]
    by_hand = con.execute(
        "SELECT count(*), sum(lost_cost) FROM break_costs WHERE cause <> 'cold_start'"
        " AND started_at >= ? AND started_at < ?",
        [since, until],
    ).fetchall()[0]
    assert sum(r["turns"] for r in rows) == by_hand[0] > 0
    assert sum(r["lost_cost"] or 0 for r in rows) == pytest.approx(by_hand[1])
    assert all(since <= r["first_seen"] and r["last_seen"] < until for r in rows)


def test_check_says_how_many_breaks_and_requests_its_limits_left_out(
    demo: tuple[Path, Any],
) -> None:
    wh, con = demo
    [(loss_unknown, unpriced, input_unknown)] = con.execute(
        "SELECT (SELECT count(*) FROM cache_breaks WHERE cause NOT IN ('provider_miss',"
        " 'cold_start') AND tokens_lost IS NULL),"
        " (SELECT count(*) FROM break_costs WHERE cause NOT IN ('provider_miss', 'cold_start')"
        " AND lost_cost IS NULL),"
        " (SELECT count(*) FROM requests WHERE input_tokens IS NULL)"
    ).fetchall()
    assert loss_unknown > 0 and unpriced >= loss_unknown and input_unknown > 0  # the demo's
    done = run_cli("check", "-w", str(wh), "--max-lost-share", "0.99", "-f", "json")
    doc = json.loads(done.stdout)
    assert (doc["breaks_loss_unknown"], doc["breaks_unpriced"]) == (loss_unknown, unpriced)
    assert doc["requests_input_unknown"] == input_unknown
    text = run_cli("check", "-w", str(wh), "--max-lost-share", "0.99").stdout
    # a break whose loss is unknown is unpriced too: only the unpriced ones beyond are added,
    # else "5 breaks with unknown loss, 5 breaks unpriced" reads as 10 breaks left out
    more = unpriced - loss_unknown
    said = f"{more} more breaks unpriced (loss known, no price), " if more else ""
    assert (
        f"(left out: {loss_unknown} breaks with unknown loss, {said}"
        f"{input_unknown} requests with unknown input)"
    ) in text


def test_check_passes_with_a_lost_share_of_0_on_traffic_without_breaks(tmp_path: Path) -> None:
    # one request, a conversation's first turn: nothing earlier to reuse, so nothing lost
    wh = Warehouse(tmp_path / "warehouse")
    ingest([Path(__file__).parent / "fixtures" / "breaks" / "cold_start.jsonl"], wh, workers=1)
    done = run_cli("check", "-w", str(wh.root))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["ok", "lost share: 0.0000"]
    listed = run_cli("findings", "-w", str(wh.root))
    assert listed.returncode == 0
    assert "no findings: no cache break" in listed.stderr


def test_check_fails_when_nothing_could_be_measured_rather_than_pass(tmp_path: Path) -> None:
    # a test run that made no LLM call, or whose every record was rejected: the share is
    # unknown, which is no share under the limit
    (tmp_path / "x.jsonl").write_text('{"a": 1}\n')
    (tmp_path / "y.txt").write_text("hi\n")
    wh = Warehouse(tmp_path / "warehouse")
    loaded = run_cli(
        "ingest", str(tmp_path / "x.jsonl"), str(tmp_path / "y.txt"), "-w", str(wh.root)
    )
    assert "0 accepted + 2 rejected" in loaded.stderr
    (tmp_path / "empty").mkdir()
    for where in (wh.root, tmp_path / "empty"):
        done = run_cli("check", "-w", str(where))
        assert done.returncode == ExitCode.LIMIT, where
        assert done.stdout.splitlines()[0] == (
            "FAIL: lost share unknown (no request with a known input): the limit 0.05 cannot be"
            " checked"
        )
        assert "error: the cache-break gate failed: lost share unknown" in done.stderr


def test_check_words_a_finding_without_a_change_class_as_summary_does(
    demo: tuple[Path, Any],
) -> None:
    wh, con = demo
    breaks, tokens, money = con.execute(
        "SELECT count(*), sum(c.tokens_lost), sum(b.lost_cost) FROM cache_breaks c"
        " JOIN break_costs b USING (request_id)"
        " WHERE c.agent = 'code-agent' AND c.cause = 'expired'"
    ).fetchone()
    done = run_cli("check", "-w", str(wh), "--max-lost-share", "1", "--fail-on", "expired")
    assert done.returncode == 7
    line = next(ln for ln in done.stdout.splitlines() if "code-agent" in ln)
    assert line == (
        f"  code-agent: expired, {breaks} turns, {tokens:,} tokens lost, {money:.4f} USD"
        " - send within the cache lifetime, or ask for the longer retention where the provider"
        " offers it"
    )


def test_findings_table_shows_the_fix_whole_and_the_money_to_4_places(
    demo: tuple[Path, Any],
) -> None:
    wh, con = demo
    tokens, money = con.execute(
        "SELECT sum(c.tokens_lost), sum(b.lost_cost) FROM cache_breaks c"
        " JOIN break_costs b USING (request_id)"
        " WHERE c.agent = 'code-agent' AND c.cause = 'expired'"
    ).fetchone()
    done = run_cli("findings", "-w", str(wh), "--agent", "code-agent")
    assert done.returncode == 0, done.stderr
    header, _, *rows = done.stdout.splitlines()
    assert header.split()[-2:] == ["example_request_id", "fix"]
    expired = next(r for r in rows if " expired " in r)
    assert f" {tokens:,} " in expired and f" {money:.4f} " in expired
    assert expired.endswith("where the provider offers it")  # the fix, not cut
    quiet = run_cli("findings", "-w", str(wh), "--agent", "code-agent", "--since", "2027-01-01")
    assert quiet.returncode == 0 and quiet.stdout == ""
    assert "no requests of agent 'code-agent' in the period asked" in quiet.stderr


def test_check_refuses_a_cause_it_does_not_know_so_a_typo_cannot_pass_a_gate(
    demo: tuple[Path, Any],
) -> None:
    wh, _ = demo
    done = run_cli("check", "-w", str(wh), "--max-lost-share", "1", "--fail-on", "system_chnged")
    assert done.returncode == ExitCode.USAGE
    assert "'system_chnged' is not a cause" in done.stderr
    assert "system_changed" in done.stderr  # the hint lists the real ones


def test_the_causes_check_accepts_are_those_cache_breaks_names() -> None:
    schema = json.loads(
        (Path(__file__).parents[1] / "schemas" / "cache_breaks.json").read_text(encoding="utf-8")
    )
    cause = next(c for c in schema["columns"] if c["name"] == "cause")["description"]
    named = [w.strip(" .") for w in cause.replace(" or ", ", ").split(",")]
    assert tuple(named) == findings_lib.CAUSES


def test_check_github_annotations_go_to_stderr_so_json_on_stdout_still_parses(
    demo: tuple[Path, Any],
) -> None:
    wh, con = demo
    breaks, tokens, money = con.execute(
        "SELECT count(*), sum(c.tokens_lost), sum(b.lost_cost) FROM cache_breaks c"
        " JOIN break_costs b USING (request_id) WHERE c.cause = 'expired'"
    ).fetchone()
    done = run_cli(
        "check", "-w", str(wh), "--max-lost-share", "1", "--fail-on", "expired", "-f", "json",
        "--github",
    )  # fmt: skip
    assert done.returncode == 7
    assert json.loads(done.stdout)["broken"] == [f"cause expired: {breaks} breaks"]
    notes = [ln for ln in done.stderr.splitlines() if ln.startswith("::error ")]
    assert notes == [
        f"::error title=cache break expired::code-agent: expired, {breaks} turns, {tokens:,}"
        f" tokens lost, {money:.4f} USD - send within the cache lifetime, or ask for the longer"
        " retention where the provider offers it"
    ]


def test_a_provider_miss_is_a_finding_but_not_money_lost_to_prompt_changes(
    tmp_path: Path,
) -> None:
    """Its money is the provider's (provider below its own rules): summed into both figures it
    would be counted twice, and a CI gate would fail a team for a miss it cannot fix."""
    wh = tmp_path / "wh"
    fixture = Path(__file__).parent / "fixtures" / "breaks" / "provider_miss.jsonl"
    assert run_cli("ingest", str(fixture), "-w", str(wh)).returncode == 0
    con = sqlmod.connect(Warehouse(wh))
    [(cause, lost)] = con.execute("SELECT cause, lost_cost FROM findings").fetchall()
    assert cause == "provider_miss" and lost > 0
    [(left,)] = con.execute("SELECT sum(left_on_table) FROM request_costs").fetchall()
    assert left == pytest.approx(lost, rel=1e-9)  # the same money, in the provider's figure
    assert not any("lost to prompt changes" in line for line in findings_lib.summary_lines(con))
    gate = run_cli("check", "-w", str(wh), "--max-lost-share", "0", "--max-lost-money", "0")
    assert gate.returncode == 0, gate.stdout + gate.stderr
    named = run_cli("check", "-w", str(wh), "--fail-on", "provider_miss")
    assert named.returncode == ExitCode.LIMIT, named.stderr


def test_summary_json_carries_the_money_the_table_prints(demo: tuple[Path, Any]) -> None:
    root, con = demo
    out = run_cli("summary", "-w", str(root), "--format", "json")
    assert out.returncode == 0, out.stderr
    [headline] = json.loads(out.stdout)
    costs = {c["currency"]: c for c in headline["costs"]}
    [(cost, left)] = con.execute(
        "SELECT cost_total, left_on_table FROM cost_summary WHERE currency = 'USD'"
    ).fetchall()
    assert costs["USD"]["cost_total"] == pytest.approx(cost, rel=1e-12)
    assert costs["USD"]["left_on_table"] == pytest.approx(left, rel=1e-12)
    lost = {row["currency"]: row["lost_cost"] for row in headline["lost_to_prompt_changes"]}
    [(expected,)] = con.execute(
        "SELECT sum(lost_cost) FROM findings WHERE currency = 'USD' AND cause <> 'provider_miss'"
    ).fetchall()
    assert lost["USD"] == pytest.approx(expected, rel=1e-12)
    table = run_cli("summary", "-w", str(root)).stdout
    assert f"lost to prompt changes (USD): {expected:.4f}" in table
    assert headline["findings"][0]["fix"]


def test_findings_until_a_day_includes_that_day_as_summary_and_report_do(
    demo: tuple[Path, Any],
) -> None:
    wh, con = demo
    day = run_cli("findings", "-w", str(wh), "--since", "2026-11-29", "--until", "2026-11-29",
                  "-f", "json")  # fmt: skip
    assert day.returncode == 0, day.stderr
    turns, money = con.execute(
        "SELECT count(*), sum(lost_cost) FROM break_costs WHERE cause <> 'cold_start'"
        " AND started_at >= '2026-11-29 00:00:00+00' AND started_at < '2026-11-30 00:00:00+00'"
    ).fetchone()
    rows = json.loads(day.stdout)
    assert sum(r["turns"] for r in rows) == turns > 0
    assert sum(r["lost_cost"] or 0 for r in rows) == pytest.approx(money)
    # a day as --until is the instant after it, as written out
    instant = run_cli("findings", "-w", str(wh), "--since", "2026-11-29",
                      "--until", "2026-11-30T00:00:00", "-f", "json")  # fmt: skip
    assert json.loads(instant.stdout) == rows


def test_findings_of_one_week_save_per_week_what_they_lost_in_it(demo: tuple[Path, Any]) -> None:
    # a period of 7 days: the saving per week is the week's loss, however its traffic fell in it
    wh, _ = demo
    done = run_cli("findings", "-w", str(wh), "--since", "2026-11-23", "--until", "2026-11-29",
                   "-f", "json")  # fmt: skip
    rows = [r for r in json.loads(done.stdout) if r["lost_cost"] is not None]
    assert rows
    for r in rows:
        assert r["saving_per_week"] == pytest.approx(r["lost_cost"]), r["scope"]


def test_findings_of_an_agent_no_request_names_is_an_error_not_an_empty_result(
    demo: tuple[Path, Any],
) -> None:
    wh, _ = demo
    done = run_cli("findings", "-w", str(wh), "--agent", "reserch-agent")
    assert done.returncode == ExitCode.NOT_FOUND
    assert done.stdout == "" and "no requests of agent 'reserch-agent'" in done.stderr
    bad = run_cli("findings", "-w", str(wh), "--since", "2026-02-30")
    assert bad.returncode == ExitCode.USAGE
    assert bad.stderr.splitlines()[0] == "error: --since '2026-02-30' is not a date or an instant"


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--max-lost-share", "5"),
        ("--max-lost-share", "-0.1"),
        ("--max-lost-share", "nan"),
        ("--max-lost-money", "-1"),
        ("--max-lost-money", "nan"),
    ],
)
def test_check_refuses_a_limit_no_figure_can_cross_rather_than_pass_every_build(
    tmp_path: Path, flag: str, value: str
) -> None:
    # `--max-lost-share 5`, meant as 5%, is a share no build can exceed: it passed every gate
    done = run_cli("check", "-w", str(tmp_path / "absent"), flag, value)
    assert done.returncode == ExitCode.USAGE, done.stdout + done.stderr
    assert done.stderr.splitlines()[0].startswith(f"error: {flag} ")
    assert "Traceback" not in done.stderr


def test_check_adds_only_the_unpriced_breaks_beyond_those_of_unknown_loss() -> None:
    from pipeline.commands.findings import _left_out
    from pipeline.findings import Verdict

    # 1 break of unknown loss (so of unknown money too) and 2 of known loss with no price
    verdict = Verdict(breaks_loss_unknown=1, breaks_unpriced=3, requests_input_unknown=0)
    assert _left_out(verdict) == (
        " (left out: 1 break with unknown loss, 2 more breaks unpriced (loss known, no price))"
    )
