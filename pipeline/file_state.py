"""Whether a file is still the one read: its inode, size and modification time (in ns).

A writer of the warehouse replaces a file by renaming a new one onto it, so a new inode tells
a rewrite even within the file system's clock tick. The caches of what files hold (the columns
of the warehouse's parts, the price tables) and ingest's check that an input did not change
while it was read compare these."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path


def file_stamp(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_ino, st.st_size, st.st_mtime_ns


def files_state(paths: Iterable[Path]) -> tuple[tuple[str, int, int, int], ...]:
    """Each file with its stamp; OSError for a file that cannot be stat'ed."""
    return tuple((str(p), *file_stamp(Path(p))) for p in paths)
