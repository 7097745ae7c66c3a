"""An ingest takes the manifest rows of the sources it saw before from one index file, reads
only the manifests that are new or changed, and answers exactly as reading every file does."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import ingest, manifest_cache
from pipeline.warehouse import Warehouse

FIXTURES = Path(__file__).parent / "fixtures" / "breaks"


def _ingested(tmp_path: Path) -> tuple[Warehouse, list[Path]]:
    files = sorted(FIXTURES.glob("*.jsonl"))
    wh = Warehouse(tmp_path / "wh")
    ingest.ingest(files[:-1], wh, workers=1)
    return wh, files


def _read_from_files(wh: Warehouse) -> dict[str, tuple[str, dict[str, object]]]:
    """The index the manifest files give without any index file."""
    (wh.root / "sources" / manifest_cache.INDEX_NAME).unlink(missing_ok=True)
    return wh.manifest_index()


def _reads_recorded(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every list of stems whose manifest files are read, by either reading path."""
    calls: list[list[str]] = []
    original = Warehouse._manifest_rows

    def recorded(self: Warehouse, stems: list[str]) -> dict[str, list[dict[str, object]]]:
        calls.append(list(stems))
        return original(self, stems)

    monkeypatch.setattr(Warehouse, "_manifest_rows", recorded)
    return calls


def test_an_ingest_reads_only_the_manifests_that_are_not_in_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wh, files = _ingested(tmp_path)
    reads = _reads_recorded(monkeypatch)
    result = ingest.ingest([files[-1]], wh, workers=1)
    assert [fr.status for fr in result.files] == ["ingested"]
    # the first ingest found no manifest to index; this one read them all and kept them
    assert [len(stems) for stems in reads] == [len(files) - 1]
    assert (wh.root / "sources" / manifest_cache.INDEX_NAME).is_file()
    reads.clear()
    again = ingest.ingest(files, wh, workers=1)
    assert [fr.status for fr in again.files] == ["unchanged"] * len(files)
    (new_stem,) = [fr.stem for fr in result.files]
    assert reads == [[new_stem]]  # the one manifest written since the index was


def test_the_index_answers_as_the_manifest_files_do(tmp_path: Path) -> None:
    wh, _files = _ingested(tmp_path)
    from_index = wh.manifest_index()
    assert from_index == _read_from_files(wh)
    assert len(from_index) == len(list((wh.root / "sources").glob("*.parquet")))


def test_a_manifest_file_replaced_under_the_same_name_is_read_again(tmp_path: Path) -> None:
    wh, _files = _ingested(tmp_path)
    wh.manifest_index()  # the index holds every manifest
    manifest = sorted((wh.root / "sources").glob("*.parquet"))[0]
    table = pq.read_table(manifest)
    changed = table.set_column(
        table.schema.get_field_index("accepted"),
        "accepted",
        pa.array([12345], table.schema.field("accepted").type),
    )
    tmp = manifest.with_name("replacement.tmp")
    pq.write_table(changed, tmp)
    tmp.replace(manifest)  # as every manifest is written: a new file renamed over the old one
    rows = dict(wh.manifest_index().values())
    assert rows[manifest.stem]["accepted"] == 12345
    assert wh.manifest_index() == _read_from_files(wh)


@pytest.mark.parametrize("damage", ["garbage", "foreign"])
def test_a_damaged_or_foreign_index_is_ignored_and_written_again(
    tmp_path: Path, damage: str
) -> None:
    wh, _files = _ingested(tmp_path)
    index = wh.root / "sources" / manifest_cache.INDEX_NAME
    expected = _read_from_files(wh)
    if damage == "garbage":
        index.write_bytes(b"not an arrow file")
    else:  # another program's Arrow file under the name: none of the index's columns
        shutil.copyfile(sorted((wh.root / "sources").glob("*.parquet"))[0], index)
    assert wh.manifest_index() == expected
    assert manifest_cache._load(index)  # written again, readable


def test_an_inode_past_the_signed_64_bit_range_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # FUSE and NFS servers may hand out inode numbers up to 2^64 - 1
    wh, _files = _ingested(tmp_path)
    huge = 2**64 - 5

    def identity(stat: object) -> tuple[int, int, int]:
        size, mtime_ns, _inode = real_identity(stat)  # type: ignore[arg-type]
        return (size, mtime_ns, huge)

    real_identity = manifest_cache._identity
    monkeypatch.setattr(manifest_cache, "_identity", identity)
    expected = _read_from_files(wh)
    kept = manifest_cache._load(wh.root / "sources" / manifest_cache.INDEX_NAME)
    assert kept and {entry[0][2] for entry in kept.values()} == {huge}
    assert wh.manifest_index() == expected


def test_an_index_written_for_another_sources_schema_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # another version (a column added or retyped) would hand back None for the files it took
    wh, _files = _ingested(tmp_path)
    index = wh.root / "sources" / manifest_cache.INDEX_NAME
    with monkeypatch.context() as other_version:
        other_version.setattr(manifest_cache, "_schema_digest", lambda: b"another schema")
        _read_from_files(wh)
        assert manifest_cache._load(index)  # that version reads its own index
    assert manifest_cache._load(index) == {}
    reads = _reads_recorded(monkeypatch)
    wh.manifest_index()
    assert [len(stems) for stems in reads] == [len(list((wh.root / "sources").glob("*.parquet")))]
