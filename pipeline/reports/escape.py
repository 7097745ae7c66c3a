"""Escaping for the two places traffic strings land in a page: HTML text and inline JSON.

Prompts, model names and diff excerpts come from recorded traffic and can contain anything,
including `</script>`. HTML text goes through `html.escape`; JSON inside a <script> element has
`<`, `>` and `&` written as unicode escapes, so no byte sequence can close the element early.
"""

from __future__ import annotations

import html
import json
from datetime import date, datetime
from decimal import Decimal
from typing import Any

_JSON_UNSAFE = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}
_JSON_TABLE = str.maketrans(_JSON_UNSAFE)


def text(value: object) -> str:
    """Any value as HTML text; None is shown as an em dash so unknown never looks like zero."""
    if value is None:
        return "\u2014"
    return html.escape(str(value), quote=True)


def plain(value: Any) -> Any:
    """A JSON-ready copy of a value fetched from DuckDB (dates as ISO text, decimals as floats)."""
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def inline_json(value: Any) -> str:
    """JSON that is safe to place between <script> and </script>."""
    dumped = json.dumps(plain(value), ensure_ascii=False, sort_keys=True, allow_nan=False)
    return dumped.translate(_JSON_TABLE)
