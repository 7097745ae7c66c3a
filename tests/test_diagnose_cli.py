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
    assert (wh / "derived" / "cache_breaks.parquet").exists()
    out = run_cli("diagnose", "-w", str(wh), "-r", "sys-2", "--all")
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

    from pipeline import diagnose, materialise
    from pipeline.ingest import ingest
    from pipeline.warehouse import Warehouse

    wh = Warehouse(tmp_path / "wh")
    ingest([BREAKS / "system_changed.jsonl"], wh, workers=1)

    def read_only(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EROFS, "Read-only file system", str(wh.root / "derived"))

    monkeypatch.setattr(
        materialise, "build", read_only
    )  # as on a read-only mount, views not stored
    turns = diagnose.timeline(wh, requests=["sys-2"])
    assert any(t.request_id == "sys-2" and t.cause == "system_changed" for t in turns)
    assert "computing them in memory" in capsys.readouterr().err


GOLDEN = Path(__file__).resolve().parent / "golden" / "diagnose" / "grouped.txt"


def test_diagnose_groups_runs_of_identical_breaks_as_its_golden_file(
    tmp_path: Path, cli: Any
) -> None:
    """One line per run of identical breaks (cause, kind of segment, kind of change), with
    the turns, tokens and money it lost, the fix and both sides of the change; regenerate
    with UPDATE_GOLDEN=1 after an intended change and read the diff."""
    import os

    wh = tmp_path / "wh"
    files = sorted(str(p) for p in BREAKS.glob("*.jsonl"))
    assert cli("ingest", *files, "-w", str(wh)).returncode == 0
    out = cli("diagnose", "-w", str(wh), "--worst", "30")
    assert out.returncode == 0, out.stderr
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(out.stdout, encoding="utf-8")
    assert out.stdout == GOLDEN.read_text(encoding="utf-8")


def test_diagnose_groups_forty_timestamp_breaks_into_one_line_and_all_lists_each(
    tmp_path: Path, cli: Any
) -> None:
    wh, capture = tmp_path / "wh", tmp_path / "demo.jsonl"
    assert cli("demo", "--sessions", "8", "--out", str(capture)).returncode == 0
    assert cli("ingest", str(capture), "-w", str(wh)).returncode == 0
    grouped = cli("diagnose", "-w", str(wh), "--worst", "1").stdout.splitlines()
    everything = cli("diagnose", "-w", str(wh), "--worst", "1", "--all").stdout.splitlines()
    run = next(x for x in grouped if "system_changed system [timestamp]" in x)
    first, last = (int(n) for n in run.split(":")[0].split()[1].split("–"))
    times = int(run.split(" times")[0].rsplit(" ", 1)[1])
    # every turn of the run is its own line under --all, with the same cause
    listed = [x for x in everything[2:] if "system_changed system [timestamp]" in x]
    assert times == len(listed) == last - first + 1 >= 10
    assert len(grouped) < len(everything) / 5
    assert any(
        x.strip().startswith("fix:    move the timestamp after the history") for x in grouped
    )
    # the run's money is the sum of its breaks' money (break_costs), to the 4 decimals shown
    money = float(run.rsplit(", ", 1)[1].split()[0])
    conversation = grouped[0].split()[1]
    hand = cli(
        "sql",
        "select round(sum(lost_cost), 4) from break_costs where conversation_id = "
        f"'{conversation}' and cause = 'system_changed'",
        "--format",
        "csv",
        "-w",
        str(wh),
    )
    assert float(hand.stdout.splitlines()[1]) == money


def test_diagnose_takes_a_unique_start_of_a_request_id_and_refuses_an_ambiguous_one(
    tmp_path: Path, cli: Any
) -> None:
    wh = tmp_path / "wh"
    assert cli("ingest", str(BREAKS / "system_changed.jsonl"), "-w", str(wh)).returncode == 0
    full = cli("diagnose", "-w", str(wh), "-r", "sys-2")
    short = cli("diagnose", "-w", str(wh), "-r", "sys-")
    assert short.returncode == 2 and "ambiguous" in short.stderr and "sys-1" in short.stderr
    assert full.returncode == 0, full.stderr
    ids = cli("sql", "select request_id from requests", "--format", "csv", "-w", str(wh))
    unique = next(i for i in ids.stdout.splitlines()[1:] if i.startswith("sys-2"))
    prefix = cli("diagnose", "-w", str(wh), "-r", unique[:-1] if len(unique) > 5 else unique)
    assert prefix.returncode == 0 and prefix.stdout == full.stdout


def test_an_expired_break_shows_its_idle_gap_and_the_lifetime_it_exceeded(
    tmp_path: Path, cli: Any
) -> None:
    wh = tmp_path / "wh"
    assert cli("ingest", str(BREAKS / "expired.jsonl"), "-w", str(wh)).returncode == 0
    gap = cli(
        "sql",
        "select request_id, idle_s, lifetime_s from cache_breaks where cause = 'expired'",
        "--format",
        "csv",
        "-w",
        str(wh),
    )
    rid, idle, lifetime = gap.stdout.splitlines()[1].split(",")
    assert float(idle) > float(lifetime) > 0
    out = cli("diagnose", "-w", str(wh), "-r", rid)
    line = next(x for x in out.stdout.splitlines() if ": expired" in x)
    assert f"idle (lifetime {round(float(lifetime) / 60)} min)" in line


def test_diagnose_prices_the_money_lost_with_the_users_price_rows_as_findings_does(
    tmp_path: Path, cli: Any
) -> None:
    # diagnose took no --prices and ignored CACHEAUDIT_PRICES: with a user's own price row the
    # money it printed for a break disagreed with `findings` over the same warehouse
    wh = tmp_path / "wh"
    assert cli("ingest", str(BREAKS / "system_changed.jsonl"), "-w", str(wh)).returncode == 0
    prices = tmp_path / "mine.csv"
    prices.write_text(
        "provider,model,effective_from,effective_to,currency,condition,"
        "input_cache_miss_per_mtok,input_cache_hit_per_mtok,cache_write_5m_per_mtok,"
        "cache_write_1h_per_mtok,output_per_mtok,notes,source\n"
        "openai,gpt-4.1-2025-04-14,2026-01-01T00:00Z,,USD,,10,1,,,20,ours,test\n",
        encoding="utf-8",
    )
    # the break of sys-2 sent 1,920 tokens uncached that were cached: 1,920 x (10 - 1) / 1e6
    expected = "money lost=0.0173 USD"
    by_flag = cli("diagnose", "-w", str(wh), "-r", "sys-2", "--prices", str(prices))
    assert by_flag.returncode == 0, by_flag.stderr
    assert expected in by_flag.stdout.splitlines()[0]
    by_env = cli("diagnose", "-w", str(wh), "-r", "sys-2", env={"CACHEAUDIT_PRICES": str(prices)})
    assert by_env.returncode == 0, by_env.stderr
    assert expected in by_env.stdout.splitlines()[0]
