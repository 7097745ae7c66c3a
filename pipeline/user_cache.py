"""The one directory where cacheaudit keeps files that only save time.

Three things live there: the price library's converted rows (pipeline/prices/library_cache.py),
the copy a new warehouse's `cacheaudit.duckdb` starts from (pipeline/warehouse_db.py) and the
Vega bundle a report inlines (pipeline/reports/bundle.py). Deleting it costs time, never data.

`$CACHEAUDIT_CACHE_DIR`, else `$XDG_CACHE_HOME/cacheaudit`, else `~/.cache/cacheaudit`. The
report bundle once read `$CACHEAUDIT_CACHE` instead; that name is still honoured when the
first one is not set, so a directory a user chose keeps being used.
"""

from __future__ import annotations

import os
from pathlib import Path

VARIABLE = "CACHEAUDIT_CACHE_DIR"
# the report bundle's earlier name for the same directory
OLD_VARIABLE = "CACHEAUDIT_CACHE"


def cache_dir() -> Path:
    for name in (VARIABLE, OLD_VARIABLE):
        if explicit := os.environ.get(name):
            return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cacheaudit"
