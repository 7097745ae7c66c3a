"""What builds that were killed left in the derived folder, removed by the next build.

A build writes each view, request_prefix's group work folder and each stamp under a temporary
name carrying its pid, and swaps them in at the end. Killed (SIGKILL, SIGTERM, the OOM killer),
it runs no clean-up: a half-written view is as large as the stored one, and nothing else ever
removed it. Builds run side by side under the shared lock, so only the work of a process that
is gone is removed.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

# A view's folder or file (`.request_prefix.parquet.<pid>.tmp`), its group work folder (the
# same with `.work`), a stamp (`request_prefix.stamp.<pid>.tmp`).
_WORK = re.compile(r"^(?:\.\w+\.parquet\.(\d+)\.tmp(?:\.work)?|\w+\.stamp\.(\d+)\.tmp)$")


def remove_dead_builds_work(out_dir: Path) -> int:
    """Remove what builds whose process is gone left in `out_dir`; returns how many."""
    from pipeline.ingest_pool import pid_alive

    removed = 0
    try:
        entries = list(out_dir.iterdir())
    except OSError:
        return 0
    for path in entries:
        match = _WORK.match(path.name)
        if match is None:
            continue
        pid = int(match.group(1) or match.group(2))
        if pid == os.getpid() or pid_alive(pid):
            continue
        try:
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        except OSError:
            continue  # removed meanwhile by another build
        removed += 1
    return removed
