"""Not built yet: registers no tables."""

from __future__ import annotations

from typing import Any


def register(con: Any, options: Any) -> None:
    return None
