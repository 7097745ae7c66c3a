"""mitmproxy addon: record LLM API calls passing through mitmproxy as capture JSONL.

    pip install 'cacheaudit[mitm]'        # mitmproxy in the same environment as cacheaudit
    mitmdump -s "$(cacheaudit capture mitm-addon)" --set cacheaudit_out=capture

Only POSTs to LLM API paths are recorded unless `--set cacheaudit_all=true`. Responses of
recorded flows are streamed (not buffered by mitmproxy), so SSE reaches the client as it arrives
and each chunk's arrival time is kept. The `x-cacheaudit-session` / `-agent` / `-tags` request
headers become the record's hints, as in the proxy, and are removed before the request goes
upstream. This module needs mitmproxy; the flow -> record logic is in
`pipeline.capture.mitm_flow`, which does not.

mitmproxy may also live in its own environment (on Python 3.11 the only mitmproxy, 11.x, pins
h11 0.14, which breaks httpx in cacheaudit's environment): that environment needs orjson, xxhash
and zstandard, and this file then loads the `pipeline` package it belongs to by path.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path
from typing import Any

from mitmproxy import ctx, http


def _load_own_package() -> None:
    """Make `pipeline` importable when mitmproxy runs from another environment: register this
    file's package from its directory, without putting cacheaudit's site-packages on sys.path
    (their h11 and friends would shadow mitmproxy's)."""
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


_load_own_package()

from pipeline.capture.exchange import Hints  # noqa: E402
from pipeline.capture.mitm_flow import (  # noqa: E402
    ChunkTap,
    FlowSnapshot,
    snapshot_record,
    take_hints,
    wanted,
)
from pipeline.capture.writer import CaptureWriter  # noqa: E402

_TAP = "cacheaudit_tap"
_DONE = "cacheaudit_written"
_HINTS = "cacheaudit_hints"


def _headers(fields: Any) -> list[tuple[str, str]]:
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in fields]


class CacheauditRecorder:
    def __init__(self) -> None:
        self.writer: CaptureWriter | None = None

    def load(self, loader: Any) -> None:
        loader.add_option("cacheaudit_out", str, "capture", "Capture directory for cacheaudit.")
        loader.add_option("cacheaudit_all", bool, False, "Record every flow, not only LLM APIs.")
        loader.add_option("cacheaudit_agent", str, "", "Agent hint recorded with each exchange.")

    def running(self) -> None:
        self.writer = CaptureWriter(Path(ctx.options.cacheaudit_out))

    def done(self) -> None:
        if self.writer is not None:
            self.writer.close()

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        # Before the request goes upstream: the x-cacheaudit-* hint headers are ours.
        flow.metadata[_HINTS] = take_hints(flow.request.headers, self._hints())

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        if flow.response is None or not wanted(
            flow.request.method, flow.request.path, ctx.options.cacheaudit_all
        ):
            return
        tap = ChunkTap(flow.response.headers.get("content-encoding"))
        flow.metadata[_TAP] = tap
        flow.response.stream = tap

    def response(self, flow: http.HTTPFlow) -> None:
        self._write(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        self._write(flow)

    def _write(self, flow: http.HTTPFlow) -> None:
        if flow.metadata.get(_DONE) or self.writer is None:
            return
        if not wanted(flow.request.method, flow.request.path, ctx.options.cacheaudit_all):
            return
        flow.metadata[_DONE] = True
        hints = flow.metadata.get(_HINTS) or self._hints()
        self.writer.write_record(snapshot_record(snapshot(flow), hints))

    def _hints(self) -> Hints:
        return Hints(agent=ctx.options.cacheaudit_agent or None)


def snapshot(flow: http.HTTPFlow) -> FlowSnapshot:
    req, resp = flow.request, flow.response
    snap = FlowSnapshot(
        started_at=req.timestamp_start,
        method=req.method,
        url=req.url,
        request_headers=_headers(req.headers.fields),
        request_body=req.get_content(strict=False) or b"",
        error=flow.error.msg if flow.error else None,
        record_id=flow.id,
    )
    if resp is not None:
        tap: ChunkTap | None = flow.metadata.get(_TAP)
        snap.status = resp.status_code
        snap.response_headers = _headers(resp.headers.fields)
        snap.response_headers_at = resp.timestamp_start
        if tap is not None:
            snap.response_body, snap.chunks = bytes(tap.body), tap.chunks
            snap.ended_at = tap.ended_at or resp.timestamp_end or time.time()
            snap.decode_error = tap.decode_error
        else:
            body = resp.get_content(strict=False) or b""
            snap.response_body = body
            snap.chunks = [(resp.timestamp_end or resp.timestamp_start, len(body))] if body else []
            snap.ended_at = resp.timestamp_end
    return snap


addons = [CacheauditRecorder()]
