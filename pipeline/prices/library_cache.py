"""A cache file of the price library's rows, so a command does not convert them again.

The file holds the rows `library.rows()` built, as JSON, named by a digest of the installed
genai-prices version and of the code that converts it (library.py, rows.py, validate.py): a new
release or a changed converter names another file, so a stale file is never read. It lives in
the user's cache directory (pipeline/user_cache.py). The
cache only saves time: a file that cannot be written or read is rebuilt and nothing fails.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from pipeline import dead_work
from pipeline.prices.rows import Condition, Place, PriceRow, parse_condition
from pipeline.user_cache import cache_dir

_CODE = ("library.py", "rows.py", "validate.py", "library_cache.py")
FORMAT = "1"


def path_for(release: str) -> Path:
    digest = hashlib.sha256(f"{FORMAT}\n{release}\n".encode())
    here = Path(__file__).resolve().parent
    for name in _CODE:
        digest.update((here / name).read_bytes())
    return cache_dir() / f"price-library-{digest.hexdigest()[:24]}.json"


def _row(row: PriceRow) -> dict[str, Any]:
    return {
        "file": row.place.file, "line": row.place.line, "layer": row.place.layer,
        "fallback": row.place.fallback,
        "provider": row.provider, "model": row.model,
        "from": row.effective_from.isoformat() if row.effective_from else None,
        "to": row.effective_to.isoformat() if row.effective_to else None,
        "currency": row.currency, "condition": row.condition.text, "prices": row.prices,
        "notes": row.notes, "source": row.source,
    }  # fmt: skip


def _price_row(d: dict[str, Any], conditions: dict[str, Condition]) -> PriceRow:
    text = d["condition"]
    if text not in conditions:  # a few distinct windows and tiers among thousands of rows
        conditions[text] = parse_condition(text)
    return PriceRow(
        place=Place(d["file"], d["line"], d["layer"], fallback=d["fallback"]),
        provider=d["provider"],
        model=d["model"],
        effective_from=datetime.fromisoformat(d["from"]) if d["from"] else None,
        effective_to=datetime.fromisoformat(d["to"]) if d["to"] else None,
        currency=d["currency"],
        condition=conditions[text],
        prices=d["prices"],
        notes=d["notes"],
        source=d["source"],
    )


def load(release: str) -> tuple[PriceRow, ...] | None:
    """The cached rows of this release and converter, None when there are none to read."""
    try:
        data = orjson.loads(path_for(release).read_bytes())
        conditions: dict[str, Condition] = {}
        return tuple(_price_row(d, conditions) for d in data["rows"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def store(release: str, rows: tuple[PriceRow, ...]) -> None:
    """Write the rows for later processes; any failure (read-only home) leaves no file."""
    path = path_for(release)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # a writer killed mid-write (SIGKILL: no clean-up runs) left its file for good
        dead_work.remove_dead_work(
            path.parent, dead_work.CACHE_FILE, own_only=True, files_only=True
        )
        tmp.write_bytes(orjson.dumps({"release": release, "rows": [_row(r) for r in rows]}))
        tmp.replace(path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
