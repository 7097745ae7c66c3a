"""Reading commands store the views they need before reading them, when an ingest made the
stored ones stale.

A view that is not stored is computed on the fly each time a query reads it, and a command
reads `findings` or `conversations` more than once. On 19k requests in 707 hourly sources,
`summary` took 38 s after an ingest without a build, against 6.5 s for `cacheaudit build` and
3.0 s for the same summary after it. So the commands that read the whole history (`summary`,
`findings`, `check`, `diagnose`, a conversation page, and `sql` on the views that need them)
first store the views they need, as `build` would, and say so on stderr.

Storing them first is a convenience, never a reason to wait or fail: while an ingest holds the
warehouse lock, or where the warehouse cannot be written (a read-only mount, a full disk), the
command computes the views for itself, as it did before, and says why. Period reads (a weekly
page, `summary --by day --since ...`) do not build: they compute their own days when the
stored views are stale (pipeline/period.py).
"""

from __future__ import annotations

import errno
import sys
import time
from collections.abc import Callable, Iterable

from pipeline import sql
from pipeline.errors import WarehouseBusy
from pipeline.warehouse import Warehouse

# errors of a warehouse that cannot take new files: the command then computes in memory
_CANNOT_WRITE = frozenset({errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC})


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def stale_views(wh: Warehouse, names: Iterable[str], options: sql.SqlOptions) -> list[str]:
    """The stored views that reading `names` needs and that are missing or stale."""
    if not wh.exists():  # nothing ingested yet: the views are empty, nothing to store
        return []
    order = sql.materialised_order(names, sql.load_queries())
    if not order or sql.nothing_to_build(wh, order, options, force=False) is not None:
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
    Returns the names built; none when they were current, an ingest is running, or the
    warehouse cannot be written (each of the last two said in one line)."""
    options = options or sql.SqlOptions()
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
        results = sql.build(wh, options=options, names=names, wait=False)
    except WarehouseBusy as exc:
        say(f"note: {exc.message}: computing the views for this command only (slower)")
        return []
    except OSError as exc:
        if exc.errno not in _CANNOT_WRITE:
            raise
        say(
            f"warning: cannot store the views in {wh.root} ({exc.strerror});"
            " computing them in memory (slower)"
        )
        return []
    built = [r.name for r in results if r.rebuilt]
    from pipeline import warehouse_db

    refreshed = warehouse_db.refresh(wh, options)
    if refreshed.startswith("warning"):
        say(refreshed)
    say(f"built in {time.perf_counter() - start:.1f} s")
    return built
