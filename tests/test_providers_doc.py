"""docs/providers.md covers every provider the code knows, links each one to the provider's own
documentation, and states the cache-rule numbers the built-in rule table uses."""

from __future__ import annotations

import csv
import re
from pathlib import Path

from pipeline.cache_rules import builtin_paths
from pipeline.providers import BUILTIN_HOSTS

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "providers.md").read_text(encoding="utf-8")

# The `provider` column value -> how the page names it.
NAMES = {
    "openai": "OpenAI",
    "azure_openai": "Azure OpenAI",
    "deepseek": "DeepSeek",
    "anthropic": "Anthropic",
    "bedrock": "Bedrock",
    "google": "Gemini",
    "openrouter": "OpenRouter",
    "zhipu": "Zhipu",
    "alibaba": "DashScope",
    "moonshot": "Moonshot",
    "groq": "Groq",
    "vllm": "vLLM",
    "sglang": "SGLang",
}


def _rules() -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    for path in builtin_paths():
        with path.open(encoding="utf-8", newline="") as fh:
            rows.extend(csv.DictReader(fh))
    return rows


def _sections() -> dict[str, str]:
    parts = re.split(r"^## ", DOC, flags=re.MULTILINE)[1:]
    return {p.splitlines()[0]: p for p in parts}


def test_every_provider_of_the_host_table_and_the_rule_table_is_described() -> None:
    providers = {p for _, p in BUILTIN_HOSTS} | {r["provider"] for r in _rules()}
    missing = [p for p in sorted(providers) if NAMES.get(p, p) not in DOC]
    assert missing == []


def test_every_provider_section_links_to_public_documentation() -> None:
    sections = _sections()
    assert len(sections) >= 7
    unlinked = [title for title, body in sections.items() if "](https://" not in body]
    assert unlinked == []


def test_the_minimum_prompt_lengths_of_the_rule_table_are_stated() -> None:
    minimums = {int(r["min_tokens"]) for r in _rules() if r["min_tokens"].strip()}
    # DeepSeek's 64-token unit is both its minimum and its step.
    assert minimums == {64, 1024, 2048, 4096}
    for tokens in minimums:
        assert f"{tokens:,}" in DOC or f"{tokens}-token" in DOC, tokens


def test_inclusive_and_exclusive_input_is_said_for_each_kind_of_provider() -> None:
    sections = _sections()
    exclusive = [t for t, body in sections.items() if "Input is exclusive" in body]
    inclusive = [t for t, body in sections.items() if "Input is inclusive" in body]
    assert any(t.startswith("Anthropic") for t in exclusive)
    assert any(t.startswith("AWS Bedrock Converse") for t in exclusive)
    for name in ("OpenAI", "DeepSeek", "Google Gemini", "OpenRouter"):
        assert any(t.startswith(name) for t in inclusive), name
