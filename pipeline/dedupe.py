"""An exchange is in the warehouse once, however many files carry it.

The manifest makes re-ingesting the same bytes a no-op, but the same traffic also arrives in
other bytes: a capture compressed after it was ingested, a renamed copy of a HAR, two exports
that overlap, a file concatenated with itself. Every record has a stable id (the capture's own
id, or one derived from what the exchange was: `ingest.fallback_id`), so after the workers have
written a batch's parts, and before its manifest makes them visible, this pass removes from the
new parts every request whose id is already in the warehouse or earlier in the batch. Kept:
the copy ingested first, then the one from a file replacing an earlier version of itself, then
the one from the file listed first, then the lowest line/entry.

A derived id ends in which exchange of that content in its file it is (`:0`, `:1`, ...). The
workers number only what each of them read, so when a file holds repeated content this pass
first renumbers its rows in file order: the n-th identical exchange of a file is `:n`, whatever
worker read it (two identical requests stay two rows, and match the same two in another file).

Only new parts are rewritten (what readers already see never changes), and only the days the
new rows fall on are read: a duplicate started at the same instant, so it is in the same day
partition. Removed rows count as skipped, so records = accepted + rejected + skipped holds.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline import compaction
from pipeline.warehouse import Warehouse, stem_of

if TYPE_CHECKING:
    from collections.abc import Mapping

    import polars as pl


class Counted(Protocol):
    source: str
    accepted: int
    skipped: int
    duplicates: int
    stem: str
    replaces: list[str]


OLD = -1  # rank of rows already visible in the warehouse: they always win
# A derived id (`ingest.fallback_id`): x<16 hex: the request>[-<8 hex: the response's own id,
# when it named one>]:<occurrence>; one past the first occurrence. Ids written before the
# response's part existed have none.
FALLBACK_ID = r"^x[0-9a-f]{16}(?:-[0-9a-f]{8})?:[0-9]+$"
_LATER_OCCURRENCE = r"^x[0-9a-f]{16}(?:-[0-9a-f]{8})?:[1-9][0-9]*$"
_WITH_RESPONSE = r"^x[0-9a-f]{16}-"
_OCCURRENCE = re.compile(r":[0-9]+$")
_REQUEST_CHARS = 17  # x + 16 hex: the request part of a derived id


def drop_duplicates(warehouse: Warehouse, pending: Mapping[str, Counted]) -> int:
    """Remove repeated requests from the parts of `pending` sources (by content hash, in the
    order they were listed); adjusts their counts and returns how many rows were removed."""
    if not pending:
        return 0
    # A file that replaces an earlier version of itself (--force, a grown capture) ranks before
    # the rest of its batch: every row of that version is one of its own. Ranked after another
    # file, that file's copies of such rows would become visible beside the old version when
    # its manifest landed first (and stay so if the batch stopped there).
    replacers_first = sorted(pending.values(), key=lambda fr: not fr.replaces)
    rank = {fr.stem: i for i, fr in enumerate(replacers_first)}
    by_key = {fr.stem: fr for fr in pending.values()}
    # What this batch replaces (--force, a grown capture) is still visible until its manifest
    # lands, but is no earlier copy of the new rows: it is their old version.
    replaced = {stem for fr in pending.values() for stem in fr.replaces}
    visible = warehouse.live_stems() - rank.keys() - replaced
    removed = 0
    for day_dir in sorted((warehouse.root / "requests").glob("day=*")):
        parts = {p: stem_of(p) for p in day_dir.glob("*.parquet")}
        new = [p for p, key in parts.items() if key in rank]
        if not new:
            continue
        old = [p for p, key in parts.items() if key in visible]
        # the day's copy (pipeline/compaction.py) when it holds exactly these parts: one file
        # read instead of one per source (a day of hourly sources: 24 or more)
        old = [copy] if (copy := compaction.copy_of(warehouse, "requests", old)) else old
        if not _any_repeated(new, old):
            continue  # the usual case, found without polars (importing it alone took 0.2 s)
        renames, all_losers = _plan(new, old, rank)
        for part in sorted(renames.keys() | all_losers.keys()):
            losers = all_losers.get(part)
            _rewrite(warehouse, part, renames.get(part, {}), losers)
            if losers is None:
                continue
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
    # cast: a part written by another engine may store the ids as large_string. ParquetFile
    # rather than read_table, which builds a dataset per file: 0.8 ms a part against 2 ms, and
    # a day of hourly sources read without its compacted copy has a hundred parts.
    columns = [pq.ParquetFile(p).read(columns=["request_id"])[0].cast(pa.string()) for p in parts]
    return pa.chunked_array([c for col in columns for c in col.chunks], pa.string())


def _any_repeated(new: list[Path], old: list[Path]) -> bool:
    """Whether an id of the new parts repeats among them or is in an old part, or is a derived
    id past a first occurrence (a file with repeated content: its numbering is checked), or
    has the content of a derived id in an old part (whatever that one's number: see
    `_as_occurrences`)."""
    ids = _request_ids(new)
    if pc.count_distinct(ids).as_py() < len(ids):
        return True
    if pc.any(pc.match_substring_regex(ids, _LATER_OCCURRENCE)).as_py() is True:
        return True
    requests = _derived_requests(ids)
    if pc.count_distinct(requests).as_py() < len(requests):
        return True  # one request twice: with a response id each, or one without (`_plan`)
    if not old:
        return False
    old_ids = _request_ids(old)
    if pc.any(pc.is_in(ids, value_set=old_ids)).as_py() is True:
        return True
    return pc.any(pc.is_in(requests, value_set=_derived_requests(old_ids))).as_py() is True


def _derived_requests(ids: pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """The request part (`x<hash>`) of the derived ids among `ids`."""
    derived = ids.filter(pc.match_substring_regex(ids, FALLBACK_ID))
    return pc.utf8_slice_codeunits(derived, 0, _REQUEST_CHARS)


def _as_occurrences(old: pl.DataFrame) -> pl.DataFrame:
    """Old rows with each derived id numbered as the n-th old row of that content (in the order
    of their numbers). Before the ids counted identical exchanges, they ended in the entry's
    position in its file (`x<hash>:17`): read this way, such a row still matches the first copy
    of its content in a new file. Rows numbered the current way keep their ids."""
    import polars as pl

    rid = pl.col("request_id")
    derived = rid.str.contains(FALLBACK_ID)
    number = rid.str.extract(r":([0-9]+)$").cast(pl.Int64)
    base = rid.str.replace(_OCCURRENCE.pattern, "")
    occurrence = number.rank("ordinal").over(derived, base) - 1
    return old.with_columns(
        pl.when(derived)
        .then(base + ":" + occurrence.cast(pl.String))
        .otherwise(rid)
        .alias("request_id")
    )


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


def _numbered(fresh: pl.DataFrame) -> tuple[pl.DataFrame, dict[Path, dict[str, str]]]:
    """The new rows with each derived id renumbered in file order (the n-th row of a source
    with that content is `:n`), and per part the ids that change: {old id: new id}. A worker
    numbers its own rows from 0 in each part, so an id is unique within a part."""
    import polars as pl

    rid = pl.col("request_id")
    ordered = fresh.sort(["rank", "source_index", "part"]).with_columns(
        rid.str.contains(FALLBACK_ID).alias("derived"),
        rid.str.replace(_OCCURRENCE.pattern, "").alias("base"),
    )
    occurrence = pl.int_range(pl.len()).over("rank", "base", "derived").cast(pl.String)
    numbered = ordered.with_columns(
        pl.when(pl.col("derived"))
        .then(pl.col("base") + ":" + occurrence)
        .otherwise(rid)
        .alias("numbered")
    )
    changed = numbered.filter(pl.col("numbered") != rid)
    renames: dict[Path, dict[str, str]] = {}
    for part, old_id, new_id in changed.select("part", "request_id", "numbered").iter_rows():
        renames.setdefault(Path(part), {})[old_id] = new_id
    rows = numbered.with_columns(pl.col("numbered").alias("request_id"))
    return rows.select(fresh.columns).with_columns(_legacy(in_file=True)), renames


def _legacy(*, in_file: bool) -> pl.Expr:
    """Each derived id as it would read without a response part (`x<hash>:<n>`, n counting the
    exchanges of that request in their file, whatever their responses), NULL for the others:
    how a row without a response id (an export saved without content, a warehouse written
    before ids had one) is matched to the rows of the same request. New rows are counted in
    file order (`in_file`; sorted so by `_numbered`); a row already in the warehouse keeps
    its number."""
    import polars as pl

    rid = pl.col("request_id")
    request = rid.str.slice(0, _REQUEST_CHARS)
    if in_file:
        number = pl.int_range(pl.len()).over("rank", request).cast(pl.String)
    else:
        number = rid.str.extract(r":([0-9]+)$")
    derived = rid.str.contains(FALLBACK_ID)
    return pl.when(derived).then(request + ":" + number).otherwise(None).alias("legacy")


def _plan(
    new: list[Path], old: list[Path], rank: Mapping[str, int]
) -> tuple[dict[Path, dict[str, str]], dict[Path, pl.DataFrame]]:
    """Per new part, the derived ids to renumber ({old: new}, see `_numbered`) and the rows to
    drop: request_id (as renumbered), source_index, and whether the copy that is kept is in
    this same part (then only its segments stay, not the repeated ones)."""
    import polars as pl

    fresh, renames = _numbered(pl.concat([_ids(p, rank[stem_of(p)]) for p in new]))
    if old:
        # Only ids of the new rows can collide: read the old ones, keep those that match
        # (exactly, or by request: `_legacy`).
        every = _as_occurrences(pl.concat([_ids(p, OLD) for p in old]))
        every = every.with_columns(_legacy(in_file=False))
        requests = fresh.select(pl.col("request_id").str.slice(0, _REQUEST_CHARS)).unique()
        seen = every.filter(
            pl.col("request_id").is_in(fresh["request_id"].implode())
            | pl.col("request_id")
            .str.slice(0, _REQUEST_CHARS)
            .is_in(requests.to_series().implode())
        )
        rows = pl.concat([seen, fresh])
    else:
        rows = fresh
    rows = rows.sort(["rank", "source_index", "part"])
    kept = pl.col("part").first()
    exact = rows.with_columns(
        kept.over("request_id").alias("kept_part"),
        (pl.int_range(pl.len()).over("request_id") > 0).alias("loser"),
    )
    # Of the same request without an exact match: a row without a response id is the same
    # exchange as an earlier one of that request and number, and one with a response id is the
    # same as an earlier one without (two response ids are two exchanges).
    unmatched = exact.filter(~pl.col("loser") & pl.col("legacy").is_not_null())
    answered = pl.col("request_id").str.contains(_WITH_RESPONSE)
    earlier_unanswered = (~answered).cast(pl.Int32).cum_sum().over("legacy") - (~answered).cast(
        pl.Int32
    )
    by_request = unmatched.with_columns(
        (
            (~answered & (pl.int_range(pl.len()).over("legacy") > 0))
            | (answered & (earlier_unanswered > 0))
        ).alias("loser"),
        # The copy kept has another id: none of this one's segments are its own.
        pl.lit(False).alias("kept_here"),
    )
    columns = ["request_id", "source_index", "part", "rank", "loser", "kept_here"]
    exact = exact.with_columns((pl.col("kept_part") == pl.col("part")).alias("kept_here"))
    losers = (
        pl.concat([exact.select(columns), by_request.select(columns)])
        .filter(pl.col("loser") & (pl.col("rank") != OLD))
        .unique(["part", "request_id", "source_index"], keep="first", maintain_order=True)
    )
    if losers.is_empty():
        return renames, {}
    return renames, {
        Path(part): group.select("request_id", "source_index", "kept_here")
        for (part,), group in losers.group_by("part")
    }


def _renamed(table: pa.Table, renames: Mapping[str, str]) -> pa.Table:
    """`table` with its request ids replaced as `renames` says."""
    if not renames:
        return table
    i = table.schema.get_field_index("request_id")
    column = table.column(i)
    ids = [renames.get(v, v) for v in column.to_pylist()]
    return table.set_column(i, table.schema.field(i), pa.array(ids, column.type))


def _rewrite(
    warehouse: Warehouse, part: Path, renames: Mapping[str, str], losers: pl.DataFrame | None
) -> None:
    """Rewrite one requests part with its ids renumbered and without its losers, and the
    segments part of the same name."""
    import polars as pl

    table = _renamed(pq.read_table(part), renames)
    if losers is not None:
        drop = losers.select("request_id", "source_index", pl.lit(True).alias("drop"))
        rows = _frame(table).with_columns(pl.col("source_index").cast(pl.Int64))
        on = ["request_id", "source_index"]
        marked = rows.join(drop, on=on, how="left", maintain_order="left")
        table = table.filter(marked["drop"].is_null().to_arrow())
    warehouse.replace_part(part, table)
    segments = part.parents[2] / "segments" / part.parent.name / part.name
    if not segments.exists():
        return
    seg_table = _renamed(pq.read_table(segments), renames)
    if losers is None:
        warehouse.replace_part(segments, seg_table)
        return
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
