"""What killed processes left behind, removed by a later run: their work named by their pid.

A build writes each view, request_prefix's group work folder and each stamp under a temporary
name carrying its pid, and swaps them in at the end; a reading command spills to a folder of
its pid in the temporary directory. Killed (SIGKILL, SIGTERM, the OOM killer), a process runs
no clean-up: a half-written view is as large as the stored one, a spill folder as large as what
did not fit in memory, and nothing else ever removed them. Processes run side by side, so only
the work of a process that is gone is removed (a pid alive now, even if reused, keeps its work).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
from pathlib import Path

# A view's folder or file (`.request_prefix.parquet.<pid>.tmp`), its group work folder (the
# same with `.work`), a stamp (`request_prefix.stamp.<pid>.tmp`).
_WORK = re.compile(r"^(?:\.\w+\.parquet\.(\d+)\.tmp(?:\.work)?|\w+\.stamp\.(\d+)\.tmp)$")
# The folder a reading command spills to (pipeline/sql.py).
SPILL_PREFIX = "cacheaudit-spill-"
SPILL_FOLDER = re.compile(rf"^{re.escape(SPILL_PREFIX)}(\d+)$")
# A report's page or manifest being written (`.2026-W48.html.<pid>.tmp`, pipeline/reports/
# weekly.py) and the Vega bundle being cached (`.vega-bundle-<versions>.js.<pid>.tmp`).
REPORT_PAGE = re.compile(r"^\.[^/]+\.(?:html|json)\.(\d+)\.tmp$")
VEGA_BUNDLE = re.compile(r"^\.vega-bundle-[^/]+\.js\.(\d+)\.tmp$")
# A file of the user cache being written (pipeline/user_cache.py): the price library's rows
# (`.price-library-<digest>.json.<pid>.tmp`) and the DuckDB file kept for new warehouses
# (`.warehouse-db-<stamp>.duckdb.<pid>.tmp`).
CACHE_FILE = re.compile(
    r"^\.(?:price-library-[0-9a-f]+\.json|warehouse-db-[0-9a-f]+\.duckdb)\.(\d+)\.tmp$"
)
# A warehouse's DuckDB file being written (`.cacheaudit.duckdb.<pid>.tmp`, and its `.wal`).
DB_WRITER = re.compile(r"^\.cacheaudit\.duckdb\.(\d+)\.tmp(?:\.wal)?$")


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists (a reused pid counts as alive: its work is kept)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: not one of ours, but its folder is not ours either
    return True


def remove_dead_builds_work(out_dir: Path) -> int:
    """Remove what builds whose process is gone left in `out_dir`; returns how many."""
    return remove_dead_work(out_dir, _WORK)


@functools.cache
def remove_dead_work_once(
    folder: Path, pattern: re.Pattern[str], *, own_only: bool = False, files_only: bool = False
) -> int:
    """`remove_dead_work`, once per process for each folder and pattern: a command opens many
    sessions and writes many pages, and one look is enough."""
    return remove_dead_work(folder, pattern, own_only=own_only, files_only=files_only)


def remove_dead_work(
    folder: Path, pattern: re.Pattern[str], *, own_only: bool = False, files_only: bool = False
) -> int:
    """Remove the entries of `folder` whose name matches `pattern` (the pid in its first group
    that matched) and whose process is gone; `own_only`: only those this user owns;
    `files_only`: never a folder. Returns how many were removed."""
    removed = 0
    try:
        entries = list(folder.iterdir())
    except OSError:
        return 0
    for path in entries:
        match = pattern.match(path.name)
        if match is None:
            continue
        pid = int(next(group for group in match.groups() if group is not None))
        if pid == os.getpid() or pid_alive(pid):
            continue
        try:
            # a folder of a shared directory may be another user's (its rmtree would half fail)
            if own_only and path.lstat().st_uid != os.getuid():
                continue
            if path.is_dir() and not path.is_symlink():
                if files_only:
                    continue
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        except OSError:
            continue  # removed meanwhile by another process
        removed += 1
    return removed
