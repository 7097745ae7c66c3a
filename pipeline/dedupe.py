"""An exchange is in the warehouse once, however many files carry it.

The manifest makes re-ingesting the same bytes a no-op, but the same traffic also arrives in
other bytes: a capture compressed after it was ingested, a renamed copy of a HAR, two exports
that overlap, a file concatenated with itself. Every record has a stable id (the capture's own
id, or one derived from what the exchange was: `ingest.fallback_id`), so after the workers have
written a batch's parts, and before its manifest makes them visible, this pass removes from the
new parts every request whose id is already in the warehouse or earlier in the batch. Kept:
the copy ingested first, then the one from the file listed first, then the lowest line/entry.

Only new parts are rewritten (what readers already see never changes), and only the days the
new rows fall on are read: a duplicate started at the same instant, so it is in the same day
partition. Removed rows count as skipped, so records = accepted + rejected + skipped holds.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.warehouse import Warehouse, source_key

if TYPE_CHECKING:
    from collections.abc import Mapping

    import polars as pl


class Counted(Protocol):
    source: str
    accepted: int
    skipped: int
    duplicates: int


OLD = -1  # rank of rows already visible in the warehouse: they always win


def drop_duplicates(warehouse: Warehouse, pending: Mapping[str, Counted]) -> int:
    """Remove repeated requests from the parts of `pending` sources (by content hash, in the
    order they were listed); adjusts their counts and returns how many rows were removed."""
    if not pending:
        return 0
    rank = {source_key(digest): i for i, digest in enumerate(pending)}
    by_key = {source_key(digest): fr for digest, fr in pending.items()}
    visible = warehouse.manifest_keys() - rank.keys()
    removed = 0
    for day_dir in sorted((warehouse.root / "requests").glob("day=*")):
        parts = {p: p.name.split("-", 1)[0] for p in day_dir.glob("*.parquet")}
        new = [p for p, key in parts.items() if key in rank]
        if not new:
            continue
        old = [p for p, key in parts.items() if key in visible]
        if not _any_repeated(new, old):
            continue  # the usual case, found without polars (importing it alone took 0.2 s)
        for part, losers in _losers(new, old, rank).items():
            _rewrite(warehouse, part, losers)
            fr = by_key[parts[part]]
            fr.accepted -= losers.height
            fr.skipped += losers.height
            fr.duplicates += losers.height
            removed += losers.height
    for fr in pending.values():
        if fr.duplicates:
            print(
                f"{fr.source}: {fr.duplicates} record(s) already in the warehouse or earlier in"
                " this batch (same request_id): skipped",
                file=sys.stderr,
            )
    return removed


def _request_ids(parts: list[Path]) -> pa.ChunkedArray:
    # cast: a part written by another engine may store the ids as large_string
    columns = [pq.read_table(p, columns=["request_id"])[0].cast(pa.string()) for p in parts]
    return pa.chunked_array([c for col in columns for c in col.chunks], pa.string())


def _any_repeated(new: list[Path], old: list[Path]) -> bool:
    """Whether an id of the new parts repeats among them or is in an old part."""
    ids = _request_ids(new)
    if pc.count_distinct(ids).as_py() < len(ids):
        return True
    return bool(old) and pc.any(pc.is_in(ids, value_set=_request_ids(old))).as_py() is True


def _ids(part: Path, rank: int) -> pl.DataFrame:
    import polars as pl

    columns = ["request_id"] if rank == OLD else ["request_id", "source_index"]
    frame = _frame(pq.read_table(part, columns=columns))
    if rank == OLD:
        frame = frame.with_columns(pl.lit(0, pl.Int64).alias("source_index"))
    return frame.with_columns(
        pl.col("source_index").cast(pl.Int64),
        pl.lit(rank, pl.Int32).alias("rank"),
        pl.lit(str(part)).alias("part"),
    )


def _losers(new: list[Path], old: list[Path], rank: Mapping[str, int]) -> dict[Path, pl.DataFrame]:
    """Per new part, the rows to drop: request_id, source_index, and whether the copy that is
    kept is in this same part (then only its segments stay, not the repeated ones)."""
    import polars as pl

    fresh = pl.concat([_ids(p, rank[p.name.split("-", 1)[0]]) for p in new])
    if old:
        # Only ids of the new rows can collide: read the old ones, keep those that match.
        seen = pl.concat([_ids(p, OLD) for p in old]).join(
            fresh.select("request_id").unique(), on="request_id", how="semi"
        )
        rows = pl.concat([seen, fresh])
    else:
        rows = fresh
    repeated = rows.filter(pl.col("request_id").is_duplicated())
    if repeated.is_empty():
        return {}
    ordered = repeated.sort(["rank", "source_index", "part"]).with_columns(
        pl.col("part").first().over("request_id").alias("kept_part"),
        (pl.int_range(pl.len()).over("request_id") > 0).alias("loser"),
    )
    losers = ordered.filter(pl.col("loser")).with_columns(
        (pl.col("kept_part") == pl.col("part")).alias("kept_here")
    )
    return {
        Path(part): group.select("request_id", "source_index", "kept_here")
        for (part,), group in losers.group_by("part")
    }


def _rewrite(warehouse: Warehouse, part: Path, losers: pl.DataFrame) -> None:
    """Rewrite one requests part without its losers, and the segments part of the same name."""
    import polars as pl

    table = pq.read_table(part)
    drop = losers.select("request_id", "source_index", pl.lit(True).alias("drop"))
    rows = _frame(table).with_columns(pl.col("source_index").cast(pl.Int64))
    marked = rows.join(drop, on=["request_id", "source_index"], how="left", maintain_order="left")
    warehouse.replace_part(part, table.filter(marked["drop"].is_null().to_arrow()))
    segments = part.parents[2] / "segments" / part.parent.name / part.name
    if not segments.exists():
        return
    seg_table = pq.read_table(segments)
    # A repeated request's segments go; where the kept copy is in this same part, the first
    # row of each position (its own, written first) stays.
    gone = losers.filter(~pl.col("kept_here"))["request_id"].implode()
    here = losers.filter(pl.col("kept_here"))["request_id"].implode()
    rid = pl.col("request_id")
    first = pl.int_range(pl.len()).over("request_id", "position") == 0
    keep = _frame(seg_table).select(~rid.is_in(gone) & (~rid.is_in(here) | first))
    warehouse.replace_part(segments, seg_table.filter(keep.to_series().to_arrow()))


def _frame(table: pa.Table) -> pl.DataFrame:
    import polars as pl

    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame
