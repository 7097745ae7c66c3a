"""One module per section of the weekly page, in page order.

Each module exposes `VIEWS` (report view -> the upstream view it reads, for the "not available"
note) and `build(data: WeekData) -> Section`; chart builders are pure functions of rows, so
golden tests can pin their Vega-Lite specs.
"""

from __future__ import annotations

import importlib
from types import ModuleType

WEEKLY = (
    "findings",
    "headline",
    "hit_ratio",
    "cost_split",
    "breaks",
    "prefix_stability",
    "latency",
    "provider_gap",
    "length_buckets",
    "hygiene",
)


def weekly_modules() -> list[ModuleType]:
    return [importlib.import_module(f"{__name__}.{name}") for name in WEEKLY]


def weekly_views() -> dict[str, str]:
    """Every report view the weekly page reads -> its upstream view."""
    views: dict[str, str] = {}
    for module in weekly_modules():
        views.update(module.VIEWS)
    return views
