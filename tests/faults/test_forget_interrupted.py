"""A `forget` killed part way (SIGKILL, SIGTERM, Ctrl-C) is finished by running it again: the
file is no source any more once its manifest went, yet its parts, or the stored views built
before, still held its rows; the second run said "not a source", exit 5, and left them there.

Found by killing `cacheaudit forget` at random moments and running it again (9 of 10 runs
left stored views of the forgotten rows, one of them the file's parts)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_cli
from test_forget import MARKER, _every_byte, _warehouse

from pipeline import derived, forget
from pipeline.warehouse import Warehouse, stem_of


def _part_stems(wh: Path) -> set[str]:
    return {stem_of(p) for t in ("requests", "segments", "segment_content")
            for p in (wh / t).rglob("*.parquet")}  # fmt: skip


def test_a_forget_killed_before_its_views_were_built_again_is_finished_by_running_it_again(
    tmp_path: Path,
) -> None:
    _, b, wh = _warehouse(tmp_path)
    forget.forget(Warehouse(wh), [b])  # the rows went; the process died before the build
    assert MARKER.encode() in _every_byte(wh / "derived")  # the stored breaks still quote it

    again = run_cli("forget", str(b), "-w", str(wh))
    assert again.returncode == 0, again.stderr
    assert f"{b}: forgot 3 requests and 0 rejects (1 ingest of it)" in again.stderr
    assert MARKER.encode() not in _every_byte(wh)
    assert all(derived.fresh_derived(Warehouse(wh), v) for v in derived.MATERIALISED)
    assert not (wh / forget.PENDING).exists()
    # once finished, the file is no source: the same error as before
    assert run_cli("forget", str(b), "-w", str(wh)).returncode == 5


def test_a_forget_killed_between_the_manifest_and_the_parts_is_finished_by_running_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, b, wh = _warehouse(tmp_path)
    real = Warehouse.remove_stem

    def killed_after_the_manifest(self: Warehouse, stem: str) -> int:
        (self.root / "sources" / f"{stem}.parquet").unlink()
        raise KeyboardInterrupt

    monkeypatch.setattr(Warehouse, "remove_stem", killed_after_the_manifest)
    with pytest.raises(KeyboardInterrupt):
        forget.forget(Warehouse(wh), [b])
    monkeypatch.setattr(Warehouse, "remove_stem", real)
    assert len(_part_stems(wh)) == 2  # a's and b's: b's parts are still there

    again = run_cli("forget", str(b), "-w", str(wh))
    assert again.returncode == 0, again.stderr
    assert _part_stems(wh) == Warehouse(wh).manifest_stems()  # a's only
    assert MARKER.encode() not in _every_byte(wh)


def test_a_file_ingested_again_after_an_unfinished_forget_is_forgotten_whole_once(
    tmp_path: Path,
) -> None:
    _, b, wh = _warehouse(tmp_path)
    forget.forget(Warehouse(wh), [b])
    assert run_cli("ingest", str(b), "-w", str(wh)).returncode == 0

    again = run_cli("forget", str(b), "-w", str(wh))
    assert again.returncode == 0, again.stderr
    assert again.stderr.count(f"{b}: forgot") == 1
    assert MARKER.encode() not in _every_byte(wh)
    assert not (wh / forget.PENDING).exists()
