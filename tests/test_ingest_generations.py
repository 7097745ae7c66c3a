"""Rows are replaced in one step: while a --force re-ingest or the ingest of a grown capture
runs, readers see the old rows; once its manifest lands, the new ones; never none, never both.
A warehouse written before generations existed is read and replaced the same way."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_ingest_support import capture_record, line, run, table

from pipeline import sql
from pipeline import warehouse as warehouse_module
from pipeline.warehouse import Warehouse, stem_of

GATEWAY_URL = "http://gw.internal:8000/v1/chat/completions"
GATEWAY_MAP = '[[provider]]\nhost = "gw.internal*"\nprovider = "openai"\napi = "chat_completions"\n'


def _capture(path: Path, ids: list[str], url: str | None = None) -> Path:
    extra = {"url": url} if url else {}
    path.write_bytes(
        b"".join(line(capture_record(i, record_id=rid, **extra)) for i, rid in enumerate(ids))
    )
    return path


def _seen(wh: Path) -> list[tuple[str, str]]:
    """What a reader sees now: (request_id, provider) through `cacheaudit sql`'s views."""
    rel = sql.connect(Warehouse(wh)).sql("SELECT request_id, provider FROM requests ORDER BY 1")
    return [(str(r[0]), str(r[1])) for r in rel.fetchall()]


def _spy(
    monkeypatch: pytest.MonkeyPatch, method: str, wh: Path, seen: list[Any]
) -> Callable[..., Any]:
    """Wrap a Warehouse method so that what readers see is recorded before each call."""
    original = getattr(Warehouse, method)

    def spied(self: Warehouse, *args: Any, **kwargs: Any) -> Any:
        seen.append(_seen(wh))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Warehouse, method, spied)
    return original


def _stems(wh: Path) -> set[str]:
    return {stem_of(p) for p in wh.rglob("*.parquet")}


def test_readers_see_the_old_rows_during_a_force_reingest_and_only_the_new_ones_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    capture = _capture(tmp_path / "gw.jsonl", ["r1", "r2"], url=GATEWAY_URL)
    providers = tmp_path / "map.toml"
    providers.write_text(GATEWAY_MAP, encoding="utf-8")
    wh = tmp_path / "wh"
    run([capture], wh)
    old = _seen(wh)
    assert old == [("r1", "gw.internal"), ("r2", "gw.internal")]
    old_stems = _stems(wh)
    during: list[Any] = []
    _spy(monkeypatch, "write_manifest", wh, during)  # every new part has landed by then
    result = run([capture], wh, force=True, providers_file=providers)
    assert result.files[0].accepted == 2
    assert during == [old]
    assert _seen(wh) == [("r1", "openai"), ("r2", "openai")]
    assert old_stems <= _stems(wh)  # kept a while, for readers that listed them before


def _ingested_then_grown(tmp_path: Path) -> tuple[Path, Path]:
    """A capture of r1 ingested, to which the proxy has appended r2 since."""
    capture = _capture(tmp_path / "live.jsonl", ["r1"])
    wh = tmp_path / "wh"
    run([capture], wh)
    with capture.open("ab") as fh:
        fh.write(line(capture_record(1, record_id="r2")))
    return capture, wh


def test_readers_see_a_grown_capture_s_old_rows_until_all_its_rows_land(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    capture, wh = _ingested_then_grown(tmp_path)
    during: list[Any] = []
    _spy(monkeypatch, "write_manifest", wh, during)
    result = run([capture], wh)
    assert len(result.files[0].superseded) == 1
    # Not deduplicated against its own old version: r1 is in both, and is kept once.
    assert result.files[0].accepted == 2
    assert [[rid for rid, _ in rows] for rows in during] == [["r1"]]
    assert [rid for rid, _ in _seen(wh)] == ["r1", "r2"]
    assert len(table(wh, "sources")) == 1


def test_while_both_generations_are_on_disk_readers_see_only_the_new_rows(tmp_path: Path) -> None:
    capture, wh = _ingested_then_grown(tmp_path)
    run([capture], wh)
    assert len(list((wh / "sources").glob("*.parquet"))) == 2  # the old one is kept a while
    assert [rid for rid, _ in _seen(wh)] == ["r1", "r2"]
    assert len(sql.connect(Warehouse(wh)).sql("SELECT * FROM sources").fetchall()) == 1


def test_a_reader_that_listed_the_old_rows_before_the_switch_can_still_read_them(
    tmp_path: Path,
) -> None:
    """DuckDB opens the files a reader listed when it queries them, later: a report that
    started before a replacement finishes on the rows it started with, without an IO error."""
    capture, wh = _ingested_then_grown(tmp_path)
    con = sql.connect(Warehouse(wh))
    run([capture], wh)
    assert [r[0] for r in con.sql("SELECT request_id FROM requests").fetchall()] == ["r1"]


def test_a_reader_that_listed_the_old_rows_can_still_read_them_after_another_ingest(
    tmp_path: Path,
) -> None:
    """An ingest within the grace, of anything, keeps the replaced generation's parts (not
    only its manifest): they have a manifest, so they are no orphans."""
    capture, wh = _ingested_then_grown(tmp_path)
    con = sql.connect(Warehouse(wh))
    run([capture], wh)
    run([_capture(tmp_path / "other.jsonl", ["o1"])], wh)
    assert [r[0] for r in con.sql("SELECT request_id FROM requests").fetchall()] == ["r1"]


def test_an_ingest_after_the_grace_removes_replaced_generations_and_one_before_keeps_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    capture = _capture(tmp_path / "c.jsonl", ["r1", "r2"])
    wh = tmp_path / "wh"
    run([capture], wh)
    old_stems = _stems(wh)
    run([capture], wh, force=True)
    run([_capture(tmp_path / "o1.jsonl", ["o1"])], wh)  # within the grace
    assert old_stems <= _stems(wh)
    monkeypatch.setattr(warehouse_module, "REPLACED_GRACE_S", 0.0)
    run([_capture(tmp_path / "o2.jsonl", ["o2"])], wh)
    assert _stems(wh).isdisjoint(old_stems)
    assert [rid for rid, _ in _seen(wh)] == ["o1", "o2", "r1", "r2"]


def test_a_warehouse_written_before_generations_is_read_and_replaced_by_a_force_reingest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    capture = _capture(tmp_path / "c.jsonl", ["r1", "r2"])
    wh = tmp_path / "wh"
    run([capture], wh)
    for path in list(wh.rglob("*.parquet")):  # the old layout: stems that are a bare key
        stem = stem_of(path)
        path.rename(path.with_name(path.name.replace(stem, stem.split(".")[0], 1)))
    legacy = _stems(wh)
    assert all("." not in stem for stem in legacy)
    assert [rid for rid, _ in _seen(wh)] == ["r1", "r2"]
    assert run([capture], wh).files[0].status == "unchanged"
    run([capture], wh, force=True)
    assert [rid for rid, _ in _seen(wh)] == ["r1", "r2"]
    monkeypatch.setattr(warehouse_module, "REPLACED_GRACE_S", 0.0)
    run([_capture(tmp_path / "other.jsonl", ["o1"])], wh)
    assert _stems(wh).isdisjoint(legacy)


def test_listing_again_when_a_generation_changes_while_the_parts_are_listed(
    tmp_path: Path,
) -> None:
    """The parts of the generation a reader saw as live may be removed before it lists them:
    it lists again under the new generation instead of seeing none."""
    capture = _capture(tmp_path / "c.jsonl", ["r1"])
    wh = tmp_path / "wh"
    run([capture], wh)
    run([capture], wh, force=True)
    [current] = Warehouse(wh).live_stems()
    gone = current.split(".")[0] + ".0000000000000001"  # a generation already removed

    class Racing(Warehouse):
        calls = 0

        def live_stems(self) -> set[str]:
            Racing.calls += 1
            return {gone} if Racing.calls == 1 else {current}

    files = Racing(wh).files("requests")
    assert files and {stem_of(p) for p in files} == {current}


def test_every_table_a_reader_registers_is_of_the_same_generation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A generation that changes while a reader registers its tables one by one must not give
    it the old requests beside the new segments: `sql.connect` lists them as of one moment."""
    capture, wh = _ingested_then_grown(tmp_path)
    [old] = Warehouse(wh).live_stems()
    monkeypatch.setattr(Warehouse, "remove_stem", lambda self, stem: 0)  # both stay on disk
    run([capture], wh)
    monkeypatch.undo()
    [new] = Warehouse(wh).live_stems()
    assert new != old

    class Switching(Warehouse):
        calls = 0

        def live_stems(self) -> set[str]:  # the new manifest lands after two looks
            Switching.calls += 1
            return {old} if Switching.calls <= 2 else {new}

    con = sql.connect(Switching(wh), use_derived=False)
    ids = {
        table: {r[0] for r in con.sql(f"SELECT request_id FROM raw_{table}").fetchall()}
        for table in ("requests", "segments")
    }
    assert ids["requests"] == ids["segments"] == {"r1"}


def _grown_with_a_snapshot(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(capture, snapshot, warehouse): a copy of the capture's first content taken, then the
    capture ingested, grown and ingested again."""
    capture, wh = _ingested_then_grown(tmp_path)
    snapshot = tmp_path / "snapshot.jsonl"
    snapshot.write_bytes(line(capture_record(0, record_id="r1")))
    run([capture], wh)
    return capture, snapshot, wh


def test_a_copy_of_a_grown_capture_s_first_content_adds_nothing_and_hides_nothing(
    tmp_path: Path,
) -> None:
    """A grown capture keeps the key of its first content; a copy of that first content (a
    snapshot, a restored file) is another source and must not take the same key."""
    _, snapshot, wh = _grown_with_a_snapshot(tmp_path)
    result = run([snapshot], wh)
    assert (result.files[0].status, result.files[0].accepted) == ("ingested", 0)
    assert [rid for rid, _ in _seen(wh)] == ["r1", "r2"]
    assert len(table(wh, "sources")) == 2


def test_a_copy_of_a_capture_s_first_content_in_the_batch_that_forces_it_hides_nothing(
    tmp_path: Path,
) -> None:
    capture, snapshot, wh = _grown_with_a_snapshot(tmp_path)
    run([capture, snapshot], wh, force=True)
    assert [rid for rid, _ in _seen(wh)] == ["r1", "r2"]


def test_an_overlapping_file_listed_before_a_grown_capture_never_shows_a_row_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The grown capture ranks first in its batch: the overlapping file's copies of its rows are
    dropped, so when the overlapping file's manifest lands first, beside the capture's old
    version, no row is there twice (nor after, if the batch stops there)."""
    capture = _capture(tmp_path / "live.jsonl", ["r1", "r2"])
    wh = tmp_path / "wh"
    run([capture], wh)
    with capture.open("ab") as fh:
        fh.write(line(capture_record(2, record_id="r3")))
    overlap = _capture(tmp_path / "overlap.jsonl", ["r2", "r3", "r4"])
    during: list[Any] = []
    _spy(monkeypatch, "write_manifest", wh, during)
    run([overlap, capture], wh)
    for rows in [*during, _seen(wh)]:
        ids = [rid for rid, _ in rows]
        assert len(ids) == len(set(ids)), ids
    assert [rid for rid, _ in _seen(wh)] == ["r1", "r2", "r3", "r4"]
