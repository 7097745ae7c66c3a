"""API dialects: how to read model, usage, outcome and prompt segments for each wire format.

Each dialect module exposes `API`, `USAGE_MAP` (its field mapping, which docs/dialects.md is
generated from), `parse_request(body, url) -> RequestInfo` and
`parse_response(status, body, provider, stream, headers) -> ResponseInfo`. A dialect never
writes files. `DIALECTS` maps the `api` column value to its module; `pipeline.providers`
decides which one an exchange speaks.
"""

from __future__ import annotations

from types import ModuleType

from pipeline.dialects import (
    chat_completions,
    converse,
    generate_content,
    interactions,
    invoke_model,
    messages,
    responses,
)

DIALECTS: dict[str, ModuleType] = {
    module.API: module
    for module in (
        chat_completions,
        responses,
        messages,
        generate_content,
        interactions,
        converse,
        invoke_model,
    )
}


def register(module: ModuleType) -> None:
    DIALECTS[module.API] = module
