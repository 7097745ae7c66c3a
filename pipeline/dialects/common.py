"""Helpers every dialect shares: compact JSON bytes, safe field access, error bodies."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from pipeline.records import ResponseInfo, SegmentRaw
from pipeline.redact import cut

# Order-preserving compact JSON: no key sorting, so a reorder the provider sees is a change.
# orjson.dumps itself, not a wrapper: it runs once per prompt segment on the ingest hot path.
compact: Callable[[Any], bytes] = orjson.dumps


def segment(kind: str, role: str | None, value: Any) -> SegmentRaw:
    return SegmentRaw(kind=kind, role=role, data=compact(value))


def get_int(obj: Any, *path: str) -> int | None:
    """obj[path...] as int, or None when any step is missing or null (unknown, never 0)."""
    cur = obj
    for key in path:
        if not isinstance(cur, dict) or key not in cur:
            return None
        cur = cur[key]
    if isinstance(cur, bool) or cur is None:
        return None
    if isinstance(cur, int):
        return cur
    if isinstance(cur, float) and cur.is_integer():
        return int(cur)
    return None


def get_float(obj: Any, *path: str) -> float | None:
    cur = obj
    for key in path:
        if not isinstance(cur, dict) or key not in cur:
            return None
        cur = cur[key]
    if isinstance(cur, bool) or not isinstance(cur, int | float):
        return None
    return float(cur)


def loads_lenient(body: bytes) -> Any:
    """Parse a JSON body after DeepSeek's blank-line keep-alives (leading whitespace).

    Under load DeepSeek may also send SSE-style `: keep-alive` comment lines before a
    non-streamed body; those lines are dropped too.
    """
    # A UTF-8 byte order mark (some Windows gateways send one): JSON lets a reader ignore it.
    body = body.strip().removeprefix(b"\xef\xbb\xbf").lstrip()
    while body.startswith(b":"):
        nl = body.find(b"\n")
        body = body[nl + 1 :].lstrip() if nl >= 0 else b""
    return orjson.loads(body)


def as_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def error_fields(obj: Any) -> tuple[str | None, str | None]:
    """(type, message) from the common error envelopes.

    OpenAI/DeepSeek/Groq `{"error":{"type","code","message"}}`, Anthropic
    `{"type":"error","error":{"type","message"}}`, Gemini `{"error":{"code","status","message"}}`,
    Bedrock `{"message": ...}` (type from the `x-amzn-errortype` header, handled by its dialect).
    """
    if not isinstance(obj, dict):
        return None, None
    err = obj.get("error")
    if isinstance(err, dict):
        etype = err.get("type") or err.get("status") or err.get("code")
        message = err.get("message")
        return (str(etype) if etype is not None else None), (
            str(message) if message is not None else None
        )
    if isinstance(err, str):
        return None, err
    message = obj.get("message")
    etype = obj.get("__type") or obj.get("code") or obj.get("type")
    return (str(etype) if etype is not None else None), (
        str(message) if message is not None else None
    )


def header(headers: list[tuple[str, str]] | None, name: str) -> str | None:
    """The first value of a header, case-insensitively."""
    for key, value in headers or ():
        if key.lower() == name:
            return value
    return None


def http_error(body: bytes, etype_hint: str | None = None) -> ResponseInfo:
    """An HTTP error response: outcome http_error, usage unknown, the provider's type kept.

    `etype_hint` is used when the body names no type (Bedrock puts it in `x-amzn-errortype`).
    """
    try:
        obj = loads_lenient(body) if body.strip() else None
    except orjson.JSONDecodeError:
        obj = None
    etype, message = error_fields(obj)
    etype = etype or etype_hint
    if obj is None and body.strip():
        message = cut(body.strip(), 200).decode("utf-8", "replace")
    return ResponseInfo(outcome="http_error", usage=None, error_type=etype, error_message=message)
