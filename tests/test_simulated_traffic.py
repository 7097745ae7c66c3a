"""Traffic the bundled simulator answered is marked simulated wherever money is shown: the
requests row says so (from the simulator's response header), and `summary`, `summary --by` and
the weekly report say its cost is no bill."""

from __future__ import annotations

import json
from pathlib import Path

from test_ingest_support import capture_record, line, run, table

from pipeline.reports.weekly import WeekSelection, generate_weekly
from pipeline.warehouse import Warehouse

SIM_URL = "http://127.0.0.1:8788/v1/chat/completions"


def _capture(tmp_path: Path) -> Path:
    """Two exchanges: one the simulator answered (its header), one from api.openai.com."""
    simulated = capture_record(1, record_id="sim", url=SIM_URL)
    simulated["response"]["headers"].append(
        ["X-CacheAudit-Simulator", "cacheaudit-simulator; rules=openai; no inference"]
    )
    real = capture_record(2, record_id="real")
    capture = tmp_path / "capture.jsonl"
    capture.write_bytes(line(simulated) + line(real))
    return capture


def test_the_requests_row_says_whether_the_simulator_answered(tmp_path: Path) -> None:
    run([_capture(tmp_path)], tmp_path / "wh")
    rows = {r["request_id"]: r["simulated"] for r in table(tmp_path / "wh", "requests")}
    assert rows == {"sim": True, "real": False}


def test_summary_says_the_simulated_requests_cost_is_no_bill(cli, tmp_path: Path) -> None:
    run([_capture(tmp_path)], tmp_path / "wh")
    result = cli("summary", "-w", str(tmp_path / "wh"))
    assert result.returncode == 0, result.stderr
    assert (
        "  simulated:         1 request answered by the cacheaudit simulator (`simulate serve`):"
        " their cost is what the provider would charge, not a bill" in result.stdout
    )
    grouped = cli("summary", "--by", "day", "-w", str(tmp_path / "wh"), "--format", "json")
    assert [r["requests_simulated"] for r in json.loads(grouped.stdout)] == [1]
    table_out = cli("summary", "--by", "day", "-w", str(tmp_path / "wh"))
    assert "simulated: 1 request answered by the cacheaudit simulator" in table_out.stderr


def test_summary_of_real_traffic_says_nothing_of_the_simulator(cli, tmp_path: Path) -> None:
    real = tmp_path / "real.jsonl"
    real.write_bytes(line(capture_record(2, record_id="real")))
    run([real], tmp_path / "wh")
    result = cli("summary", "-w", str(tmp_path / "wh"))
    assert "simulat" not in result.stdout + result.stderr


def test_the_weekly_report_marks_simulated_traffic_beside_its_money(tmp_path: Path) -> None:
    run([_capture(tmp_path)], tmp_path / "wh")
    result = generate_weekly(
        Warehouse(tmp_path / "wh"), tmp_path / "out", WeekSelection(week="2026-W47")
    )
    page = next(p for p in result.written if p.name != "index.html").read_text(encoding="utf-8")
    assert "1 request of this week answered by the cacheaudit simulator" in page
    assert "not a bill" in page
