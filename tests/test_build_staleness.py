"""A view stored by `cacheaudit build` is used only while it covers exactly the rows the
warehouse holds: a --force re-ingest (same source key, rewritten rows) makes it stale, and an
ingest landing while a build runs never gets into the stamp of rows the build did not read."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline import derived, materialise, sql
from pipeline.demo import write_demo
from pipeline.ingest import ingest
from pipeline.warehouse import Warehouse

GATEWAY_MAP = (
    '[[provider]]\nhost = "gw.internal*"\nprovider = "deepseek"\napi = "chat_completions"\n'
)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("staleness")
    demo = root / "demo.jsonl"
    write_demo(demo, sessions=4)
    # The demo's DeepSeek traffic as recorded behind a gateway: its host names no provider.
    gateway = root / "gw.jsonl"
    text = demo.read_text(encoding="utf-8")
    gateway.write_text(
        text.replace("https://api.deepseek.com/", "http://gw.internal:8000/v1/"), encoding="utf-8"
    )
    other = root / "other.jsonl"
    write_demo(other, seed=11, sessions=2)
    providers = root / "map.toml"
    providers.write_text(GATEWAY_MAP, encoding="utf-8")
    built = Warehouse(root / "built")
    ingest([demo], built)
    materialise.build(built)
    return {"gateway": gateway, "other": other, "map": providers, "built": built.root}


def _copy_of_built(inputs: dict[str, Path], tmp_path: Path) -> Warehouse:
    wh = Warehouse(tmp_path / "wh")
    shutil.copytree(inputs["built"], wh.root)
    return wh


def _stored_rows(wh: Warehouse, name: str) -> int:
    path = derived.derived_path(wh, name)
    files = sorted(path.rglob("*.parquet")) if path.is_dir() else [path]
    return sum(int(pq.read_metadata(f).num_rows) for f in files)


def _recomputed_rows(wh: Warehouse, name: str) -> int:
    row = (
        sql.connect(wh, use_derived=False, only=[name])
        .execute(f"SELECT count(*) FROM {name}")
        .fetchone()
    )
    assert row is not None
    return int(row[0])


def test_a_copied_warehouse_keeps_its_built_views(inputs: dict[str, Path], tmp_path: Path) -> None:
    wh = _copy_of_built(inputs, tmp_path)
    assert all(derived.fresh_derived(wh, name) is not None for name in derived.MATERIALISED)


def test_a_forced_reingest_with_a_provider_map_makes_the_built_views_stale(
    inputs: dict[str, Path], tmp_path: Path
) -> None:
    wh = Warehouse(tmp_path / "wh")
    ingest([inputs["gateway"]], wh)
    materialise.build(wh)
    assert all(derived.fresh_derived(wh, name) is not None for name in derived.MATERIALISED)
    # README: after changing the provider map, re-ingest with --force. Same file, same key.
    ingest([inputs["gateway"]], wh, force=True, providers_file=inputs["map"])
    assert [n for n in derived.MATERIALISED if derived.fresh_derived(wh, n) is not None] == []
    con = sql.connect(wh)
    providers = con.execute(
        "SELECT DISTINCT provider FROM cache_breaks ORDER BY provider"
    ).fetchall()
    assert ("gw.internal",) not in providers
    assert ("deepseek",) in providers
    rebuilt = {r.name for r in materialise.build(wh) if r.rebuilt}
    assert rebuilt == set(derived.MATERIALISED)


def test_a_forced_reingest_with_content_after_one_without_makes_the_built_views_stale(
    inputs: dict[str, Path], tmp_path: Path
) -> None:
    wh = Warehouse(tmp_path / "wh")
    ingest([inputs["gateway"]], wh, keep_content=False)
    materialise.build(wh)
    ingest([inputs["gateway"]], wh, force=True)
    assert derived.fresh_derived(wh, "cache_breaks") is None
    con = sql.connect(wh, only=["cache_breaks"])
    row = con.execute("SELECT count(change_offset) FROM cache_breaks").fetchone()
    assert row is not None and row[0] > 0  # offsets need the content of the second ingest


def test_an_ingest_landing_while_a_build_runs_is_never_stamped_into_a_view_without_its_rows(
    inputs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wh = _copy_of_built(inputs, tmp_path)
    shutil.rmtree(wh.root / derived.DERIVED_DIR)
    real_connect = sql.connect
    landed: list[threading.Thread] = []

    def connect_then_ingest(*args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        con = real_connect(*args, **kwargs)  # type: ignore[arg-type]
        # The build has listed the Parquet parts; now an ingest finishes (or tries to).
        thread = threading.Thread(target=ingest, args=([inputs["other"]], wh))
        thread.start()
        thread.join(timeout=2)
        landed.append(thread)
        return con

    monkeypatch.setattr(sql, "connect", connect_then_ingest)
    materialise.build(wh)
    monkeypatch.setattr(sql, "connect", real_connect)
    landed[0].join(timeout=60)
    assert not landed[0].is_alive()
    for name in derived.MATERIALISED:
        if derived.fresh_derived(wh, name) is not None:
            assert _stored_rows(wh, name) == _recomputed_rows(wh, name), name
    materialise.build(wh)
    for name in ("request_prefix", "conversation_links"):
        assert derived.fresh_derived(wh, name) is not None
        assert _stored_rows(wh, name) == _recomputed_rows(wh, name)


def test_a_build_waits_for_a_running_ingest_and_says_so(
    inputs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wh = _copy_of_built(inputs, tmp_path)
    shutil.rmtree(wh.root / derived.DERIVED_DIR)
    locked, release = threading.Event(), threading.Event()

    def running_ingest() -> None:
        with wh.lock():
            locked.set()
            release.wait(timeout=60)

    holder = threading.Thread(target=running_ingest)
    holder.start()
    assert locked.wait(timeout=10)
    builder = threading.Thread(target=materialise.build, args=(wh,))
    builder.start()
    time.sleep(1.0)
    still_waiting = builder.is_alive()
    release.set()
    holder.join(timeout=10)
    builder.join(timeout=120)
    assert still_waiting
    assert not builder.is_alive()
    assert f"waiting for the ingest into {wh.root} to finish" in capsys.readouterr().err
    assert all(derived.fresh_derived(wh, name) is not None for name in derived.MATERIALISED)


def test_a_build_with_every_view_up_to_date_takes_no_lock(
    inputs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wh = _copy_of_built(inputs, tmp_path)

    def no_lock(self: Warehouse, **kwargs: object) -> None:
        raise PermissionError(f"cannot use {self.root}/.ingest.lock: Read-only file system")

    monkeypatch.setattr(Warehouse, "lock", no_lock)  # as on a read-only mount
    assert not any(r.rebuilt for r in materialise.build(wh))


def test_a_spark_build_with_every_view_up_to_date_starts_no_session_and_takes_no_lock(
    inputs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pipeline.engines import spark_session, spark_sql

    wh = _copy_of_built(inputs, tmp_path)

    def no_lock(self: Warehouse, **kwargs: object) -> None:
        raise PermissionError(f"cannot use {self.root}/.ingest.lock: Read-only file system")

    def no_session(*args: object, **kwargs: object) -> None:
        raise AssertionError("a Spark session was started with nothing to build")

    monkeypatch.setattr(Warehouse, "lock", no_lock)  # as on a read-only mount
    monkeypatch.setattr(spark_session, "get_session", no_session)
    assert not any(r.rebuilt for r in spark_sql.build_on("local[1]", wh))
    assert not any(r.rebuilt for r in spark_sql.build_derived(None, wh))
