"""Stored views: where `build` keeps the heavy views and the stamp that says they are current.

The views in `MATERIALISED` can be computed once and stored as
`<warehouse>/derived/<view>.parquet` (a file, or a directory of part files) next to
`<warehouse>/derived/<view>.stamp.json`, whose `stamp` is `view_stamp(...)`: a digest of the
query text of the view and of everything it reads (transitively), of the warehouse's rows
(`warehouse_state`: every manifest file's bytes, which each ingest of a source writes anew with
its `ingested_at`, and the name and size of every visible part) and of the files of the data
tables it reads (the cache rules; the price tables). `sql.connect` reads a stored view instead
of recomputing it while its stamp matches (`fresh_derived`), and silently recomputes otherwise;
`materialise.build` (the `cacheaudit build` command) writes them, holding the warehouse lock
shared so that no ingest lands between the rows it reads and the stamp it stores. Any engine
may write stored views, as long as it writes the same two files.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pipeline.errors import NotFoundError
from pipeline.sql_catalog import QUERY_DIR, SqlOptions, load_queries, needed
from pipeline.warehouse import TABLES, Warehouse, stem_of

# Views worth storing: each reads millions of segment rows or joins them (see bench/views.py).
MATERIALISED = ("request_prefix", "conversation_links", "cache_breaks")

DERIVED_DIR = "derived"

STAMP_VERSION = "2"


def derived_path(wh: Warehouse, name: str) -> Path:
    return wh.root / DERIVED_DIR / f"{name}.parquet"


def stamp_path(wh: Warehouse, name: str) -> Path:
    return wh.root / DERIVED_DIR / f"{name}.stamp.json"


# the data table the cache rules are registered as; every other data table is a price table
RULES_TABLE = "cache_rules"


def data_files(options: SqlOptions, *, rules: bool = True, prices: bool = True) -> list[Path]:
    """The files the data tables are read from: the cache rules' and the price tables'."""
    from pipeline import cache_rules

    files = list(cache_rules.all_paths(options)) if rules else []
    if not prices:
        return files
    price_dir = Path(__file__).resolve().parent / "prices" / "data"
    extra = [price_dir, *options.prices_paths]
    for p in extra:
        if p.is_dir():
            files.extend(sorted(f for f in p.rglob("*") if f.is_file()))
        elif p.is_file():
            files.append(p)
    return files


def warehouse_state(wh: Warehouse, files: dict[str, list[Path]] | None = None) -> str:
    """Digest of the rows readers see: what a stored view's stamp says it was computed from.

    A source's parts become visible with its manifest file and go with it, and every ingest of a
    source writes that file anew with its own `ingested_at`, also a --force re-ingest, which
    rewrites the rows under the same key (the key alone does not change, so a stamp built from keys
    would miss it). So the bytes of every manifest file change whenever rows do; the name and size
    of every visible part are added for parts removed or replaced by other means. No mtimes: a
    copied warehouse keeps its stored views. `files`: the `Warehouse.snapshot` the caller reads,
    when it has one."""
    digest = hashlib.sha256(b"warehouse\n")
    files = files if files is not None else wh.snapshot(TABLES)
    for path in files["sources"]:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue  # removed meanwhile (an ingest replacing it): the digest differs anyway
        digest.update(f"manifest {stem_of(path)} {len(data)}\n".encode())
        digest.update(data)
    for table in TABLES:
        if table == "sources":
            continue
        for path in files[table]:
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                continue
            digest.update(f"part {path.relative_to(wh.root).as_posix()} {size}\n".encode())
    return digest.hexdigest()


def view_stamp(
    wh: Warehouse, name: str, options: SqlOptions | None = None, *, state: str | None = None
) -> str:
    """Digest of everything view `name` is computed from (see the module docstring).

    `state`: `warehouse_state(wh)` when the caller has it, taken before the rows were read."""
    options = options or SqlOptions()
    queries = load_queries()
    if name not in queries:
        raise NotFoundError(f"no query named {name!r}", hint=f"see {QUERY_DIR}")
    digest = hashlib.sha256(f"cacheaudit-derived {STAMP_VERSION}\n".encode())
    data_tables: set[str] = set()
    for dep in sorted(needed([name], queries)):
        digest.update(f"query {dep}\n".encode())
        digest.update(queries[dep].sql.encode())
        data_tables.update(i for i in queries[dep].inputs if i not in queries)
    data_tables = {t for t in data_tables if not t.startswith("raw_")}
    digest.update(f"state {state or warehouse_state(wh)}\n".encode())
    # only the data a view reads: the heavy views read the cache rules, never a price, so a
    # user's price file (`--prices`) leaves their stored rows current
    rules, prices = RULES_TABLE in data_tables, bool(data_tables - {RULES_TABLE})
    if rules or prices:
        for path in data_files(options, rules=rules, prices=prices):
            data = path.read_bytes()
            digest.update(f"data {path.name} {len(data)}\n".encode())
            digest.update(data)
    return digest.hexdigest()


def stamp_doc(wh: Warehouse, name: str) -> dict[str, object]:
    """What `build` wrote beside view `name` (its stamp, rows, days): {} when none or damaged."""
    try:
        doc = json.loads(stamp_path(wh, name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def stored_stamp(wh: Warehouse, name: str) -> str | None:
    if not derived_path(wh, name).exists():
        return None
    stamp = stamp_doc(wh, name).get("stamp")
    return stamp if isinstance(stamp, str) else None


def fresh_derived(
    wh: Warehouse, name: str, options: SqlOptions | None = None, *, state: str | None = None
) -> Path | None:
    """The derived Parquet of `name` when its stamp matches the current inputs, else None."""
    if name not in MATERIALISED:
        return None
    stored = stored_stamp(wh, name)
    if stored is None or stored != view_stamp(wh, name, options, state=state):
        return None
    return derived_path(wh, name)
