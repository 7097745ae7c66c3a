"""The warehouse: a directory of Parquet tables, partitioned by UTC day, written atomically.

Layout:
    <root>/requests/day=YYYY-MM-DD/<stem>-<part>.parquet
    <root>/segments/day=YYYY-MM-DD/<stem>-<part>.parquet
    (rows whose start is unknown: day=__HIVE_DEFAULT_PARTITION__, read back as a NULL day)
    <root>/segment_content/<stem>-<part>.parquet
    <root>/rejects/<stem>-<part>.parquet
    <root>/sources/<stem>.parquet          (the manifest: written last)

A stem is `<key>.<generation>`: the source key (the first 16 hex chars of the content hash of
the file first ingested under it, unless another source holds those) and a generation (16 hex
digits, growing). Warehouses written before generations have stems that are a bare key: the
lowest generation of that key.

Every file is written under a temporary name and renamed into place, so readers never see a
half-written file. A source counts as ingested only once its manifest file exists: readers
(`files`) list only parts whose stem has a manifest, so a crashed ingest's parts are invisible,
and the next ingest removes them (under the warehouse lock, so never a running ingest's parts).

Rows are replaced in one step. A --force re-ingest, or the ingest of a capture that grew since
it was ingested, writes its parts under a new generation of the key it replaces, and readers
see only the highest generation of each key that has a manifest (`live_stems`). Until the new
manifest lands, readers see the old rows; from then on, the new ones; never none, never both.
The old generation's files stay for REPLACED_GRACE_S, for readers that listed them before the
switch, and the first ingest after that removes them, its manifest first.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import date
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

from pipeline import manifest_cache, schema
from pipeline.errors import WarehouseBusy, WarehouseError

TABLES = ("requests", "segments", "segment_content", "rejects", "sources")
# How long the files of a replaced generation stay after their replacement lands: a reader
# (a query, a report) that listed them before the switch reads them later, when DuckDB opens
# them. The first ingest after this removes them.
REPLACED_GRACE_S = 600.0
# from this many sources on, their manifests are read by DuckDB in one call (`_manifest_rows`)
MANY_MANIFESTS = 32
LOCK_NAME = ".ingest.lock"  # held by an ingest (exclusive) or a build (shared)
# Parquet encoding per column: a dictionary only where values repeat (a dictionary attempted on
# unique hashes is wasted work), min/max statistics only where readers filter. Together they cut
# write time by a fifth and make files smaller; the values read back are the same.
DICTIONARY_COLUMNS = frozenset(
    {
        "request_id", "day", "kind", "role", "provider", "api", "host", "path", "model",
        "requested_model", "account", "session_id", "agent", "tags", "stream", "status_code",
        "outcome", "usage_status", "usage_semantics", "finish_reason", "error_type", "source",
        "format", "cacheaudit_version", "cache_ttls",
    }
)  # fmt: skip
STATISTICS_COLUMNS = frozenset(
    {
        "request_id", "started_at", "day", "provider", "api", "model", "account", "session_id",
        "source", "source_index", "position", "ingested_at",
    }
)  # fmt: skip


# The partition of rows whose day is unknown (a request whose start was not recorded): the
# name Hive, Spark and DuckDB all read back as a NULL partition value.
UNKNOWN_PARTITION = "__HIVE_DEFAULT_PARTITION__"


def with_day(spec: schema.TableSchema, table: pa.Table, day: date | None) -> pa.Table:
    """`table` (one day's rows, without the partition column) with the day as a column in its
    schema place. The day is also the part's folder, but a reader that takes it from there
    (DuckDB's hive partitioning) pays for it each time a view over the parts is bound: 12 ms
    per reference over 1,100 parts against 3.5 ms reading it from the files, and a report binds
    the raw views hundreds of times. Parquet stores the constant column in a few bytes."""
    assert spec.partition_by is not None
    index = spec.names.index(spec.partition_by)
    column = pa.repeat(pa.scalar(day, pa.date32()), table.num_rows)
    return table.add_column(index, pa.field(spec.partition_by, pa.date32()), column)


def partition_dir(column: str, day: date | None) -> str:
    """`day=YYYY-MM-DD`, or `day=__HIVE_DEFAULT_PARTITION__` for an unknown day."""
    return f"{column}={day.isoformat() if day is not None else UNKNOWN_PARTITION}"


def default_root() -> Path:
    return Path(os.environ.get("CACHEAUDIT_WAREHOUSE", "warehouse"))


def source_key(source_hash: str) -> str:
    return source_hash[:16]


def stem_of(path: Path) -> str:
    """The stem a part or manifest file belongs to (`<key>.<generation>`, or a bare key)."""
    return path.name.split("-", 1)[0].removesuffix(".parquet")


def key_of(stem: str) -> str:
    return stem.split(".", 1)[0]


def generation_of(stem: str) -> str:
    """Fixed-width hex, so comparing strings compares numbers; a bare key's is "" (lowest)."""
    return stem.partition(".")[2]


def live(stems: set[str]) -> set[str]:
    """The highest generation of each key: the stems whose rows readers see."""
    best: dict[str, str] = {}
    for stem in stems:
        key = key_of(stem)
        if key not in best or generation_of(stem) > generation_of(best[key]):
            best[key] = stem
    return set(best.values())


class Warehouse:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._made: set[Path] = set()  # directories this instance has created (or found)
        self._issued: set[str] = set()  # stems handed out (`new_stem`), manifest or not yet

    def ensure(self) -> None:
        try:
            for table in TABLES:
                (self.root / table).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise WarehouseError(f"cannot create warehouse at {self.root}: {exc}") from exc

    def exists(self) -> bool:
        return (self.root / "sources").is_dir()

    def files(self, table: str) -> list[Path]:
        """Parquet files of a table that readers see (see `snapshot`)."""
        return self.snapshot([table])[table]

    def snapshot(self, tables: Iterable[str] = TABLES) -> dict[str, list[Path]]:
        """The Parquet files readers see of each table, all as of one moment: those of the live
        generation of each source (`live_stems`). The manifests are listed before and after the
        parts, and the parts again if a generation changed between: an ingest that replaced one
        meanwhile may have removed parts listed as live a moment before."""
        wanted = list(tables)
        done = self.live_stems()
        for _ in range(10):
            found = {table: self._parts(table, done) for table in wanted}
            now = self.live_stems()
            if now == done:
                break
            done = now
        return found

    def _parts(self, table: str, stems: set[str]) -> list[Path]:
        base = self.root / table
        if not base.is_dir():
            return []
        return [p for p in sorted(base.rglob("*.parquet")) if stem_of(p) in stems]

    def manifest_stems(self) -> set[str]:
        """Every stem with a manifest file, superseded generations not yet removed included."""
        base = self.root / "sources"
        return {p.stem for p in base.glob("*.parquet")} if base.is_dir() else set()

    def live_stems(self) -> set[str]:
        return live(self.manifest_stems())

    def new_stem(self, key: str) -> str:
        """A generation of `key` above every one it has (the clock, in ns; one past the highest
        if the clock stands behind it)."""
        stems = self.manifest_stems() | self._issued
        gens = [generation_of(s) for s in stems if key_of(s) == key]
        now = time.time_ns()
        highest = max((int(g, 16) for g in gens if g), default=0)
        stem = f"{key}.{max(now, highest + 1):016x}"
        self._issued.add(stem)
        return stem

    def fresh_key(self, source_hash: str) -> str:
        """The key of a source that replaces nothing: its hash's, unless a stem holds that key
        already. A capture that grew keeps the key of its first content, so a copy of that
        first content is another source under the same hash key; sharing the key, its
        generation would hide the capture's rows."""
        taken = {key_of(s) for s in self.manifest_stems() | self._issued}
        candidates = itertools.chain(
            (source_key(source_hash), source_hash[16:32]),
            (xxhash.xxh3_64_hexdigest(f"{source_hash}:{i}".encode()) for i in itertools.count()),
        )
        return next(c for c in candidates if len(c) == 16 and c not in taken)

    @contextmanager
    def lock(
        self,
        *,
        shared: bool = False,
        on_wait: Callable[[], None] | None = None,
        wait: bool = True,
    ) -> Iterator[None]:
        """Exclusive lock for the duration of an ingest (a second ingest waits). `shared`: for
        a reader that must see no ingest land while it works (`cacheaudit build`); several may
        hold it at once, never beside an ingest. `on_wait` runs once if the lock is busy;
        without `wait`, a busy lock raises WarehouseBusy instead. A shared lock creates no
        table folders: a reader's build may run where the warehouse cannot be written."""
        if not shared:
            self.ensure()
        with (self.root / LOCK_NAME).open("a") as fh:
            mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
            try:
                fcntl.flock(fh.fileno(), mode | fcntl.LOCK_NB)
            except BlockingIOError:
                if not wait:
                    raise WarehouseBusy(f"an ingest into {self.root} is running") from None
                if on_wait is not None:
                    on_wait()
                fcntl.flock(fh.fileno(), mode)
            try:
                yield
            finally:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)

    def remove_orphans(self) -> int:
        """Delete what readers no longer see: parts without a manifest (an ingest that did not
        finish), temporary files, and generations replaced more than REPLACED_GRACE_S ago."""
        stems = self.manifest_stems()
        expired = self._replaced_long_ago(stems, live(stems))
        removed = sum(self.remove_stem(stem) for stem in expired)
        # Parts with a manifest stay: those readers see, and those of a generation replaced
        # within the grace, which a reader that listed them before the switch may still open.
        kept = stems - set(expired)
        for table in TABLES:
            base = self.root / table
            if not base.is_dir():
                continue
            for path in base.rglob("*"):
                stale_tmp = path.name.startswith(".") and path.name.endswith(".tmp")
                orphan = (
                    table != "sources" and path.suffix == ".parquet" and stem_of(path) not in kept
                )
                if path.is_file() and (stale_tmp or orphan):
                    path.unlink()
                    removed += 1
        return removed

    # --- writing -------------------------------------------------------------------------

    def _write_atomic(self, table: pa.Table, path: Path) -> None:
        if path.parent not in self._made:  # a part per table and day: mkdir once, not per part
            path.parent.mkdir(parents=True, exist_ok=True)
            self._made.add(path.parent)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        names = table.column_names
        try:
            # An open file, not a path: pyarrow resolves a path to a filesystem on every write.
            sink = pa.OSFile(str(tmp), "wb")
        except FileNotFoundError:  # the directory was removed since: make it again
            path.parent.mkdir(parents=True, exist_ok=True)
            sink = pa.OSFile(str(tmp), "wb")
        try:
            with sink:
                pq.write_table(
                    table,
                    sink,
                    compression="zstd",
                    use_dictionary=[n for n in names if n in DICTIONARY_COLUMNS],
                    write_statistics=[n for n in names if n in STATISTICS_COLUMNS],
                )
            tmp.replace(path)
        except BaseException:
            # A full disk (or a Ctrl-C) mid-write: the half-written file must not hold the
            # space until the next ingest removes it (`remove_orphans`).
            tmp.unlink(missing_ok=True)
            raise

    def replace_part(self, path: Path, table: pa.Table) -> None:
        """Replace a part file with `table` (atomically), or remove it when `table` is empty."""
        if table.num_rows:
            self._write_atomic(table, path)
        else:
            path.unlink(missing_ok=True)

    def write_rows(self, name: str, columns: dict[str, list[Any]], key: str, part: str) -> int:
        """Write column lists as Parquet part files, split by day when the table is partitioned."""
        spec = schema.load(name)
        if not columns or not next(iter(columns.values()), []):
            return 0
        arrow_schema = spec.arrow(with_partition=True)
        table = pa.Table.from_pydict(
            {f.name: columns.get(f.name) for f in arrow_schema}, schema=arrow_schema
        )
        if spec.partition_by is None:
            self._write_atomic(table, self.root / name / f"{key}-{part}.parquet")
            return int(table.num_rows)
        import pyarrow.compute as pc  # 30 ms to import, and only needed here

        day_col = spec.partition_by
        days = set(columns[day_col])
        for day in sorted(days - {None}) + ([None] if None in days else []):
            assert day is None or isinstance(day, date)
            if day is None:
                mask = pc.is_null(table[day_col])
            else:
                mask = pc.equal(table[day_col], pa.scalar(day, pa.date32()))
            sub = table.filter(mask)  # the day stays in the part too (`with_day`)
            out = self.root / name / partition_dir(day_col, day) / f"{key}-{part}.parquet"
            self._write_atomic(sub, out)
        return int(table.num_rows)

    def write_partition(
        self, name: str, columns: dict[str, list[Any]], key: str, part: str, day: date | None
    ) -> int:
        """Write the rows of one day of a partitioned table (columns without the day) as a part."""
        spec = schema.load(name)
        if not columns or not next(iter(columns.values()), []):
            return 0
        arrow_schema = spec.arrow()
        table = pa.Table.from_pydict(
            {f.name: columns.get(f.name) for f in arrow_schema}, schema=arrow_schema
        )
        return self.write_table(name, table, key, part, day)

    def write_table(self, name: str, table: pa.Table, key: str, part: str, day: date | None) -> int:
        """Write one day of a partitioned table (an Arrow table without the day) as a part."""
        spec = schema.load(name)
        assert spec.partition_by is not None
        out = self.root / name / partition_dir(spec.partition_by, day) / f"{key}-{part}.parquet"
        self._write_atomic(with_day(spec, table, day), out)
        return int(table.num_rows)

    def write_manifest(self, row: dict[str, Any], stem: str | None = None) -> None:
        """Make the parts of `stem` visible (and those of the generations of its key below it
        invisible) in one rename. Without a stem: the source's bare key (the lowest
        generation, as warehouses before generations wrote it)."""
        spec = schema.load("sources")
        table = pa.Table.from_pylist([row], schema=spec.arrow())
        name = stem or source_key(row["source_hash"])
        self._write_atomic(table, self.root / "sources" / f"{name}.parquet")

    # --- manifest ------------------------------------------------------------------------

    def manifest_index(self) -> dict[str, tuple[str, dict[str, Any]]]:
        """Source hash -> (stem, manifest row) of every live source. A capture that grew is
        under the key of its first ingest, so a source is found by its hash, not its key: read
        once per ingest (under its lock, nothing else changes the manifest meanwhile), the
        files unchanged since the last ingest from its index (pipeline/manifest_cache.py)."""
        stems = sorted(self.live_stems())
        rows_of = manifest_cache.rows_of(self.root / "sources", stems, self._manifest_rows)
        index: dict[str, tuple[str, dict[str, Any]]] = {}
        for stem in sorted(rows_of):
            index.update((str(row["source_hash"]), (stem, row)) for row in rows_of[stem])
        return index

    def _manifest_rows(self, stems: list[str]) -> dict[str, list[dict[str, Any]]]:
        """The manifest rows of `stems`, read by DuckDB in one call: one pyarrow read per file
        took 0.9 ms, so an hourly ingest into a warehouse of 500 sources spent 0.45 s here and
        grew by as much with every 500 more (DuckDB: 0.1 s for 500). Columns a manifest of an
        older version lacks read as NULL."""
        paths = {str(self.root / "sources" / f"{stem}.parquet"): stem for stem in stems}
        if len(paths) < MANY_MANIFESTS:  # a DuckDB connection costs more than reading these
            return self._manifest_rows_one_by_one(paths)
        import duckdb

        con = duckdb.connect()
        con.execute("SET TimeZone = 'UTC'")  # ingested_at as written, not in the local zone
        try:
            table = con.sql(
                "SELECT * FROM read_parquet($files, union_by_name = true, filename = true)",
                params={"files": list(paths)},
            ).to_arrow_table()
        except duckdb.Error:
            return self._manifest_rows_one_by_one(paths)  # one superseded meanwhile (a reader)
        finally:
            con.close()
        rows_of: dict[str, list[dict[str, Any]]] = {}
        for row in table.to_pylist():
            rows_of.setdefault(paths[row.pop("filename")], []).append(row)
        return rows_of

    def _manifest_rows_one_by_one(self, paths: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
        rows_of = {}
        for path, stem in paths.items():
            try:
                rows_of[stem] = pq.ParquetFile(path).read().to_pylist()
            except FileNotFoundError:
                continue  # superseded meanwhile (a reader; an ingest holds the lock)
        return rows_of

    def _replaced_long_ago(self, stems: set[str], done: set[str]) -> list[str]:
        """Replaced generations whose replacement landed over REPLACED_GRACE_S ago (by its
        manifest's time): a reader that listed the old files before then has had time to
        finish with them."""
        landed = {}
        for stem in done:
            with contextlib.suppress(FileNotFoundError):
                landed[key_of(stem)] = (self.root / "sources" / f"{stem}.parquet").stat().st_mtime
        cutoff = time.time() - REPLACED_GRACE_S
        return [s for s in stems - done if landed.get(key_of(s), 0.0) < cutoff]

    def remove_stem(self, stem: str) -> int:
        """Delete a generation: its manifest first (from then on its parts are orphans, which
        readers never list), then its parts and temporary files."""
        removed = 0
        manifest = self.root / "sources" / f"{stem}.parquet"
        if manifest.exists():
            manifest.unlink()
            removed += 1
        for table in TABLES:
            base = self.root / table
            if not base.is_dir():
                continue
            for pattern in (f"{stem}-*.parquet", f".{stem}-*.tmp"):
                for path in base.rglob(pattern):
                    path.unlink()
                    removed += 1
        return removed
