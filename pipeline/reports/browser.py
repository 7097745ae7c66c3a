"""Open a report in headless Chromium with the network off: read back what rendered, and take
a screenshot. Used by the browser test and to refresh reports/demo-weekly.png:

    python -m pipeline.reports.browser reports/out/2026-W48.html reports/demo-weekly.png
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from pipeline.errors import InputError, NotFoundError

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")
# No network: a dead proxy for every scheme and a resolver that finds no host.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--proxy-server=http://127.0.0.1:9",
    "--proxy-bypass-list=<-loopback>",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--hide-scrollbars",
    "--virtual-time-budget=20000",
)
_STATUS = re.compile(r'<div id="render-status"[^>]*>(.*?)</div>', re.DOTALL)


def find_chromium() -> str | None:
    for name in CANDIDATES:
        if found := shutil.which(name):
            return found
    return None


def _run(page: Path, *extra: str, timeout: float = 90) -> str:
    binary = find_chromium()
    if binary is None:
        raise NotFoundError("chromium not found", hint="apt-get install -y chromium")
    if not page.is_file():
        raise InputError(f"no page at {page}")
    with tempfile.TemporaryDirectory(prefix="cacheaudit-chromium-") as profile:
        done = subprocess.run(
            [binary, *FLAGS, f"--user-data-dir={profile}", *extra, page.resolve().as_uri()],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    if done.returncode != 0:
        raise InputError(f"chromium failed ({done.returncode}): {done.stderr[-500:]}")
    return done.stdout


def render_status(page: Path, *, width: int = 1200) -> dict[str, Any]:
    """The JSON the page's own script writes once every chart has been drawn (or failed)."""
    match = _STATUS.search(_run(page, f"--window-size={width},900", "--dump-dom"))
    if not match or not match.group(1).strip():
        return {"charts": [], "errors": ["render-status was never written"], "blocked": []}
    status: dict[str, Any] = json.loads(html.unescape(match.group(1)))
    return status


def dump_dom(page: Path) -> str:
    return _run(page, "--dump-dom")


def screenshot(page: Path, png: Path, *, width: int = 1200, height: int | None = None) -> Path:
    """A full-page PNG (height measured from the rendered page unless given)."""
    if height is None:
        height = int(render_status(page, width=width).get("page_height") or 2400)
    png.parent.mkdir(parents=True, exist_ok=True)
    _run(page, f"--window-size={width},{height}", f"--screenshot={png.resolve()}")
    if not png.is_file():
        raise InputError(f"chromium wrote no screenshot to {png}")
    return png


if __name__ == "__main__":
    screenshot(Path(sys.argv[1]), Path(sys.argv[2]))
    print(sys.argv[2])
