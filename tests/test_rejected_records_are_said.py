"""Records that became no request (unreadable lines) are in no figure: `summary` and the report
footer say how many there are, never leave them out silently."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_cli
from test_ingest_support import capture_record, line


def _mixed_warehouse(tmp_path: Path) -> Path:
    capture = tmp_path / "mixed.jsonl"
    capture.write_bytes(
        b"".join(line(capture_record(i)) for i in range(3)) + b'{"schema_version":1}\nnot json\n'
    )
    wh = tmp_path / "wh"
    done = run_cli("ingest", str(capture), "-w", str(wh))
    assert "3 accepted + 2 rejected" in done.stderr
    return wh


def test_summary_says_how_many_records_were_rejected(tmp_path: Path) -> None:
    wh = _mixed_warehouse(tmp_path)
    text = run_cli("summary", "-w", str(wh)).stdout.splitlines()
    assert text[0] == "requests:            3"
    assert text[2].startswith("  rejected records:  2 (unreadable, in no figure below")
    doc = json.loads(run_cli("summary", "-w", str(wh), "-f", "json").stdout)
    assert doc[0]["records_rejected"] == 2


def test_the_report_footer_says_how_many_records_were_rejected(tmp_path: Path) -> None:
    wh = _mixed_warehouse(tmp_path)
    out = tmp_path / "reports"
    assert run_cli("report", "weekly", "--all", "-w", str(wh), "--out", str(out)).returncode == 0
    page = next(out.glob("2026-W*.html")).read_text(encoding="utf-8")
    assert "1 source files, 2 records rejected (in no figure here" in page
    assert "(3 requests, 2 records rejected)" in page
