"""stdout is for data: a reader that stops early (`cacheaudit diagnose | head`) is not a failure."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def to_stdout() -> Iterator[None]:
    """Lines written to stdout inside: a reader that stops early (`| head`) ends the command
    with exit 0 (click would exit 1)."""
    try:
        yield
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
    except BrokenPipeError:
        # Later writes go nowhere, so Python's final flush does not fail either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(0) from None
