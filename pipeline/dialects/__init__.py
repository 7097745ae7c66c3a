"""API dialects: how to read model, usage, outcome and prompt segments for each wire format.

Each dialect module exposes `API`, `parse_request(body) -> RequestInfo` and
`parse_response(status, body, provider, stream) -> ResponseInfo`. A dialect never writes files.
`DIALECTS` maps the `api` column value to its module; `pipeline.providers` decides which one an
exchange speaks.
"""

from __future__ import annotations

from types import ModuleType

from pipeline.dialects import chat_completions

DIALECTS: dict[str, ModuleType] = {
    chat_completions.API: chat_completions,
}


def register(module: ModuleType) -> None:
    DIALECTS[module.API] = module
