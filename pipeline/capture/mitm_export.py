"""A mitmproxy flow file (`mitmdump -w FILE`) read with mitmproxy's own reader, as capture
records: one JSON line per flow on stdout, `{"index": N, "record": {...}}` (N: the flow's
position in the file, from 0) or `{"index": N, "error": "..."}`.

`cacheaudit ingest` calls `flow_lines` directly where mitmproxy is importable, and otherwise runs
this file as a script under the Python of an environment that has mitmproxy
(`python mitm_export.py FLOWS`): on Python 3.11 mitmproxy lives in its own environment (its h11
pin breaks httpx next to cacheaudit). That environment needs orjson, xxhash and zstandard, as
for the addon, and this file loads the `pipeline` package it belongs to by path. Records are
built by `make_record`, so credentials are redacted before a line leaves this process.

Timing: a flow file keeps when the request started, when the response headers arrived and when
the response ended, not when any body byte came: the first body byte (`ttfb_ms`) and a streamed
answer's first text (`ttft_ms`) are unknown (NULL); `duration_ms` is the end.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def _load_own_package() -> None:
    """Make `pipeline` importable when run by another environment's Python, without putting
    cacheaudit's site-packages on sys.path (as `mitm_addon` does; this cannot import that
    module before `pipeline` is importable)."""
    if importlib.util.find_spec("pipeline") is not None:
        return
    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location(
        "pipeline", root / "__init__.py", submodule_search_locations=[str(root)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["pipeline"] = module
    spec.loader.exec_module(module)


def _headers(fields: Any) -> list[tuple[str, str]]:
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in fields]


def flow_record(flow: Any) -> dict[str, Any]:
    """The capture record of one mitmproxy HTTPFlow read from a file."""
    from pipeline.capture.exchange import hints_from_headers
    from pipeline.capture.mitm_flow import FlowSnapshot, snapshot_record

    req, resp = flow.request, flow.response
    request_headers = _headers(req.headers.fields)
    snap = FlowSnapshot(
        started_at=req.timestamp_start,
        method=req.method,
        url=req.url,
        request_headers=request_headers,
        request_body=req.get_content(strict=False) or b"",
        error=flow.error.msg if flow.error else None,
        record_id=flow.id,
    )
    if resp is not None:
        snap.status = resp.status_code
        snap.response_headers = _headers(resp.headers.fields)
        snap.response_headers_at = resp.timestamp_start
        snap.ended_at = resp.timestamp_end
        if resp.raw_content is None:  # streamed by mitmproxy: the body was not kept
            snap.response_body = b""
            snap.decode_error = "response body not in the flow file (streamed by mitmproxy)"
        else:
            # decoded as the client decoded it; strict=False keeps the bytes it cannot decode
            snap.response_body = resp.get_content(strict=False) or b""
    return snapshot_record(snap, hints_from_headers(request_headers))


def flow_lines(path: Path) -> Iterator[bytes]:
    """One JSON line per flow of the file (see the module docstring). A file mitmproxy cannot
    read past some point ends with an error line at the index where reading stopped."""
    import orjson
    from mitmproxy import http, io
    from mitmproxy.exceptions import FlowReadException

    index = 0
    with path.open("rb") as fh:
        try:
            for flow in io.FlowReader(fh).stream():
                if isinstance(flow, http.HTTPFlow):
                    try:
                        yield orjson.dumps({"index": index, "record": flow_record(flow)}) + b"\n"
                    except (ValueError, TypeError, AttributeError) as exc:
                        reason = f"mitmproxy flow not convertible: {exc}"
                        yield orjson.dumps({"index": index, "error": reason}) + b"\n"
                index += 1
        except FlowReadException as exc:
            reason = f"mitmproxy could not read the flow file from here on: {exc}"
            yield orjson.dumps({"index": index, "error": reason[:400]}) + b"\n"


def main(argv: list[str]) -> int:
    _load_own_package()
    out = sys.stdout.buffer
    for line in flow_lines(Path(argv[1])):
        out.write(line)
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
