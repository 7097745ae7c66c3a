"""Reading commands store the views they need before reading them, when an ingest made the
stored ones stale.

A view that is not stored is computed on the fly each time a query reads it, and a command
reads `findings` or `conversations` more than once. On 19k requests in 707 hourly sources,
`summary` took 38 s after an ingest without a build, against 7.0 s to store the views first
and 3.1 s for the same summary after that. So the commands that read the whole history (`summary`,
`findings`, `check`, `diagnose`, a conversation page, and `sql` on the views that need them)
first store the views they need, as `build` would, and say so on stderr.

Storing them first is a convenience, never a reason to wait or fail: while an ingest holds the
warehouse lock, or where the views cannot be stored (a read-only mount, a full disk, any other
failure to write them), the command computes the views for itself, as it did before, and says
why. The build holds the lock shared, as `cacheaudit build` does, so an ingest started
meanwhile waits for it. A command given --prices or --rules builds nothing: it computes the
views for itself, leaving the stored ones to the default data. Period reads (a weekly page,
`summary --by day --since ...`) do not build either: they compute their own days when the
stored views are stale (pipeline/period.py).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable

import duckdb

from pipeline import materialise, sql, sql_catalog
from pipeline.errors import PipelineError, WarehouseBusy
from pipeline.warehouse import Warehouse


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def stale_views(wh: Warehouse, names: Iterable[str], options: sql.SqlOptions) -> list[str]:
    """The stored views that reading `names` needs and that are missing or stale."""
    if not wh.exists():  # nothing ingested yet: the views are empty, nothing to store
        return []
    order = materialise.materialised_order(names, sql_catalog.load_queries())
    if not order or materialise.nothing_to_build(wh, order, options, force=False) is not None:
        return []
    return order


def store_stale_views(
    wh: Warehouse,
    names: Iterable[str],
    options: sql.SqlOptions | None = None,
    *,
    say: Callable[[str], None] = _stderr,
) -> list[str]:
    """Build the stored views that reading `names` needs, when they are missing or stale.
    Returns the names built; none when they were current, an ingest is running, the options
    name their own rule files (stored views under a user's rules would replace those every
    other read uses), or the views cannot be stored (the last said in one line, a running
    ingest too). A user's price files change none of the stored views (they read no price):
    with `--prices` the views are stored and read as without it."""
    options = options or sql.SqlOptions()
    if options.rules_paths:
        return []
    names = list(names)
    stale = stale_views(wh, names, options)
    if not stale:
        return []
    say(
        f"building {', '.join(stale)} first: not stored since the last ingest"
        " (`cacheaudit build` after an ingest does this ahead)"
    )
    start = time.perf_counter()
    try:
        results = materialise.build(wh, options=options, names=names, wait=False)
    except WarehouseBusy as exc:
        say(f"note: {exc.message}: computing the views for this command only (slower)")
        return []
    except (OSError, PipelineError, duckdb.Error) as exc:
        # a read-only mount, a full disk (DuckDB's own write errors included): the command
        # works as it did without stored views
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else _one_line(exc)
        say(f"warning: cannot store the views in {wh.root} ({reason}); computing them in memory")
        return []
    from pipeline import warehouse_db

    refreshed = warehouse_db.refresh(wh, options, wait=False)
    if refreshed.startswith("warning"):
        say(refreshed)
    say(f"built in {time.perf_counter() - start:.1f} s")
    return [r.name for r in results if r.rebuilt]


def views_read_by(statement: str) -> set[str]:
    """The views of queries/ a user's SQL reads: the tables DuckDB's parser finds in each
    statement (a name in a string or a comment is none); where it finds them only by binding
    and that fails, every view named as a word (`sql_catalog.views_named_in`); none for a statement
    that reads the catalog, or that does not parse (the run reports it, nothing to build)."""
    queries = sql_catalog.load_queries()
    try:
        found: set[str] = set()
        for part in duckdb.extract_statements(statement):
            found |= duckdb.get_table_names(part.query)
    except duckdb.ParserException:
        return set()
    except duckdb.Error:
        return sql_catalog.views_named_in(statement) or set()
    return {name.lower() for name in found} & queries.keys()


def _one_line(exc: BaseException) -> str:
    message = exc.message if isinstance(exc, PipelineError) else str(exc)
    return " ".join(message.split())
