"""`cacheaudit diagnose` prints a turn-by-turn timeline with the cause and the change, and
`cacheaudit build` stores the prefix views under <warehouse>/derived/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

BREAKS = Path(__file__).resolve().parent / "fixtures" / "breaks"


def test_diagnose_shows_the_timestamp_change_of_a_request_in_its_timeline(
    tmp_path: Path, cli: Any
) -> None:
    run_cli = cli
    wh = tmp_path / "wh"
    assert run_cli("ingest", str(BREAKS / "system_changed.jsonl"), "-w", str(wh)).returncode == 0
    built = run_cli("build", "-w", str(wh))
    assert built.returncode == 0, built.stderr
    assert (wh / "derived" / "cache_breaks.parquet").is_file()
    out = run_cli("diagnose", "-w", str(wh), "-r", "sys-2")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("conversation s1 agent=golden")
    turn2 = next(line for line in lines if "sys-2" in line)
    assert "system_changed system [timestamp] @byte 46" in turn2
    assert "2026-11-17" in turn2


def test_diagnose_names_a_missing_request_and_exits_not_found(tmp_path: Path, cli: Any) -> None:
    run_cli = cli
    wh = tmp_path / "wh"
    run_cli("ingest", str(BREAKS / "cold_start.jsonl"), "-w", str(wh))
    out = run_cli("diagnose", "-w", str(wh), "-r", "nope")
    assert out.returncode == 5
    assert "no request nope" in out.stderr


def test_diagnose_sums_only_known_losses_and_counts_the_unknown_ones() -> None:
    from pipeline.diagnose import Turn, render

    def turn(conversation: str, n: int, cause: str | None, lost: int | None) -> Turn:
        known = lost is not None or cause is None
        return Turn(
            conversation, n, f"{conversation}-{n}", None, "bot", "m",
            1000 if known else None, 0 if known else None, 0 if known else None,
            cause, lost, None, None, None, None,
        )  # fmt: skip

    text = render(
        [
            turn("A", 1, "cold_start", 0),
            turn("A", 2, "system_changed", None),
            turn("A", 3, "system_changed", 700),
            turn("B", 2, "expired", None),  # no loss known at all: not 0
        ]
    )
    lines = text.splitlines()
    assert lines[0].endswith("tokens lost=700 (1 break with unknown loss)")
    assert next(x for x in lines if x.startswith("conversation B")).endswith(
        "tokens lost=? (1 break with unknown loss)"
    )
    assert "?  system_changed" in next(x for x in lines if "A-2" in x)


def test_diagnose_rejects_worst_zero_as_a_usage_error(tmp_path: Path, cli: Any) -> None:
    wh = tmp_path / "wh"
    assert cli("ingest", str(BREAKS / "cold_start.jsonl"), "-w", str(wh)).returncode == 0
    out = cli("diagnose", "-w", str(wh), "--worst", "0")
    assert out.returncode == 2
    assert "--worst" in out.stderr
    assert out.stdout == ""


def _lost(header: str) -> int:
    return int(header.split("tokens lost=")[1].split()[0].replace(",", ""))


def test_diagnose_prints_the_worst_conversation_first_and_given_ones_in_the_order_given(
    tmp_path: Path, cli: Any
) -> None:
    wh, capture = tmp_path / "wh", tmp_path / "demo.jsonl"
    assert cli("demo", "--sessions", "8", "--out", str(capture)).returncode == 0
    assert cli("ingest", str(capture), "-w", str(wh)).returncode == 0
    out = cli("diagnose", "-w", str(wh), "--worst", "4")
    assert out.returncode == 0, out.stderr
    headers = [x for x in out.stdout.splitlines() if x.startswith("conversation ")]
    losses = [_lost(h) for h in headers]
    assert len(losses) == 4 and len(set(losses)) > 1
    assert losses == sorted(losses, reverse=True)
    # -c in the order given, not alphabetical
    names = [h.split()[1] for h in headers]
    given = sorted(names, reverse=True)
    out = cli("diagnose", "-w", str(wh), *[a for n in given for a in ("-c", n)])
    shown = [x.split()[1] for x in out.stdout.splitlines() if x.startswith("conversation ")]
    assert shown == given


def test_diagnose_on_a_read_only_warehouse_computes_the_views_in_memory_and_says_so(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    import errno

    from pipeline import diagnose, sql
    from pipeline.ingest import ingest
    from pipeline.warehouse import Warehouse

    wh = Warehouse(tmp_path / "wh")
    ingest([BREAKS / "system_changed.jsonl"], wh, workers=1)

    def read_only(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EROFS, "Read-only file system", str(wh.root / "derived"))

    monkeypatch.setattr(sql, "build", read_only)  # as on a read-only mount, views not stored
    turns = diagnose.timeline(wh, requests=["sys-2"])
    assert any(t.request_id == "sys-2" and t.cause == "system_changed" for t in turns)
    assert "computing them in memory" in capsys.readouterr().err
