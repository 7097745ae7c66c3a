"""The Vega, Vega-Lite and vega-embed JavaScript, inlined so a report makes no network request.

vl-convert ships the libraries and bundles them on request (a few seconds), so the bundle is
cached on disk per vl-convert and Vega-Lite version, in the user's cache directory
(pipeline/user_cache.py).
"""

from __future__ import annotations

import os
from functools import cache
from importlib.metadata import version

import altair as alt
import vl_convert as vlc

from pipeline import dead_work
from pipeline.errors import DataError
from pipeline.user_cache import cache_dir


def vega_lite_version() -> str:
    """The Vega-Lite major.minor Altair writes specs for (e.g. "6.4")."""
    return ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])


# The snippet vl-convert bundles: expose the libraries as globals for the page's own script.
_GLOBALS = "window.vegaEmbed = vegaEmbed; window.vega = vega; window.vegaLite = vegaLite;"


def _make_bundle(vl_version: str) -> str:
    js = str(vlc.javascript_bundle(_GLOBALS, vl_version))
    # An inline script ends at the first `</script`; HTML comments open an escaped state.
    if "</script" in js.lower() or "<!--" in js:
        raise DataError("the Vega bundle contains </script or <!-- and cannot be inlined")
    return js


@cache
def javascript() -> str:
    vl_version = vega_lite_version()
    name = f"vega-bundle-vlc{version('vl-convert-python')}-vl{vl_version}.js"
    path = cache_dir() / name
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        pass
    js = _make_bundle(vl_version)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # a report killed while it wrote the bundle (2 MB) left its temporary file for good
        dead_work.remove_dead_work(path.parent, dead_work.VEGA_BUNDLE, files_only=True)
        tmp = path.with_name(f".{name}.{os.getpid()}.tmp")
        tmp.write_text(js, encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass  # an unwritable cache only costs time
    return js
