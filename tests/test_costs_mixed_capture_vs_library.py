"""On a mixed capture (the demo's agent traffic: DeepSeek and OpenAI, streamed and not, cache
hits and misses, peak and off-peak hours), every request the price library (genai-prices) can
price is priced by cacheaudit, and both give the same total within 1e-6, except for the models
listed here with the reason ours differs, checked by hand."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from test_costs_samples_vs_library import theirs

from pipeline import sql as sqlmod
from pipeline.demo import write_demo
from pipeline.ingest import ingest
from pipeline.warehouse import Warehouse

# (provider, model) -> why our totals differ from the library's
EXPLAINED = {
    # Our dated rows (deepseek.csv) price V4 Flash from 2026-08-16 at 0.22 / 0.007 / 0.66 per
    # million off-peak and twice that in the peak hours of weekdays; genai-prices 0.2.5 has a
    # change on 2026-09-10 to 0.15 / 0.003 off-peak and 0.30 / 0.006 in the peak hours of
    # every day. Ours are the researched layer and win. So the demo's November requests cost
    # ~1.4-1.5x the library's, and ~0.7x in weekend peak hours (off-peak for us, peak for it).
    # Which prices DeepSeek charged after 2026-09-10 is not established here: a primary source
    # would end our open-ended rows, or confirm them.
    ("deepseek", "deepseek-v4-flash"): "dated peak/off-peak rows vs the library's 2026-09-10 rows",
}


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[tuple[Any, Any]]]:
    root: Path = tmp_path_factory.mktemp("mixed")
    write_demo(root / "capture.jsonl", seed=7, sessions=8)
    wh = Warehouse(root / "wh")
    ingest([root / "capture.jsonl"], wh, workers=1)
    con = sqlmod.connect(wh, only=["request_costs"])
    cursor = con.sql(
        "SELECT request_id, provider, model, cost_total, unpriced_reason, input_tokens,"
        " cache_read_tokens, cache_write_5m_tokens, cache_write_1h_tokens, output_tokens,"
        " audio_input_tokens, web_search_requests, started_at FROM request_costs"
    )
    names = [d[0] for d in cursor.description]
    out: dict[str, list[tuple[Any, Any]]] = defaultdict(list)
    for values in cursor.fetchall():
        row = dict(zip(names, values, strict=True))
        out[f"{row['provider']}/{row['model']}"].append((row["cost_total"], theirs(row)))
    return out


def test_every_request_the_library_prices_is_priced_here_too(compared) -> None:
    unpriced = [m for m, pairs in compared.items() for ours, lib in pairs if lib and ours is None]
    assert not unpriced
    assert sum(1 for pairs in compared.values() for _, lib in pairs if lib is not None) > 300


@pytest.mark.parametrize("model", ["openai/gpt-4.1-2025-04-14", "openai/gpt-4.1-mini-2025-04-14",
                                   "deepseek/deepseek-v4-pro"])  # fmt: skip
def test_the_totals_agree_within_a_millionth(compared, model) -> None:
    pairs = [(ours, lib) for ours, lib in compared[model] if lib is not None]
    assert len(pairs) > 30
    for ours, lib in pairs:
        assert ours == pytest.approx(lib, rel=1e-6)


def test_every_model_of_the_capture_is_compared_or_explained(compared) -> None:
    compared_here = {
        "openai/gpt-4.1-2025-04-14",
        "openai/gpt-4.1-mini-2025-04-14",
        "deepseek/deepseek-v4-pro",
    }
    explained = {f"{p}/{m}" for p, m in EXPLAINED}
    assert set(compared) == compared_here | explained


def test_the_explained_model_still_differs_so_its_reason_still_holds(compared) -> None:
    for (provider, model), why in EXPLAINED.items():
        pairs = [(o, lib) for o, lib in compared[f"{provider}/{model}"] if lib is not None]
        assert pairs, why
        assert all(abs(o - lib) > 1e-6 * lib for o, lib in pairs), f"now agrees: drop it ({why})"
