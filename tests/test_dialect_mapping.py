"""docs/dialects.md is generated from the code's own mapping data and must not drift."""

from __future__ import annotations

from pathlib import Path

from pipeline.dialects import DIALECTS, chat_completions, messages
from pipeline.dialects.fields import COLUMNS, OPTIONAL_COLUMNS, read_usage
from pipeline.dialects.mapping import all_maps, render_markdown

DOC = Path(__file__).resolve().parent.parent / "docs" / "dialects.md"


def test_docs_dialects_md_equals_the_generated_mapping_table() -> None:
    assert DOC.read_text(encoding="utf-8") == render_markdown(all_maps()), (
        "docs/dialects.md is stale: run `python -m pipeline.dialects.mapping > docs/dialects.md`"
    )


def test_every_dialect_and_otel_declare_every_column_but_the_optional_ones() -> None:
    maps = all_maps()
    assert [m.api for m in maps] == [*DIALECTS, "otel"]
    required = set(COLUMNS) - set(OPTIONAL_COLUMNS)
    for dmap in maps:
        assert required <= set(dmap.columns) <= set(COLUMNS), dmap.api


def test_a_column_a_dialect_leaves_out_is_read_as_not_reported() -> None:
    raw = {"input_tokens": 3, "output_tokens": 1, "audio_tokens": 5}
    usage = read_usage(raw, messages.USAGE_MAP)
    assert usage is not None
    assert "audio_input_tokens" not in messages.USAGE_MAP.columns
    assert usage.audio_input_tokens is None


def test_the_normalisers_read_through_their_declared_map() -> None:
    # Editing the map changes what the normaliser reads: the table and the code are one thing.
    raw = {"input_tokens": 3, "cache_read_input_tokens": 10, "cache_creation_input_tokens": 2}
    assert messages.normalise_usage(raw) == read_usage(raw, messages.USAGE_MAP)
    usage = messages.normalise_usage(raw)
    assert usage is not None
    assert usage.input_tokens == 15
    raw2 = {"prompt_tokens": 7, "prompt_tokens_details": {"cached_tokens": 4}}
    assert chat_completions.normalise_usage(raw2) == read_usage(raw2, chat_completions.USAGE_MAP)


def test_the_table_names_the_fields_that_matter() -> None:
    text = render_markdown(all_maps())
    for needle in (
        "`input_tokens` + `cache_creation_input_tokens` (absent = 0)",
        "`candidatesTokenCount` (absent = 0) + `thoughtsTokenCount` (absent = 0)",
        "`inputTokens` + `cacheReadInputTokens` (absent = 0)",
        "`prompt_cache_hit_tokens`, else `prompt_tokens_details.cached_tokens`",
        "`gen_ai.usage.cache_read.input_tokens`",
    ):
        assert needle in text


def test_the_chat_completions_section_states_the_assumed_prompt_order() -> None:
    text = render_markdown(all_maps())
    start = text.index("## OpenAI Chat Completions")
    section = text[start : text.index("\n## ", start + 1)]
    assert "tool definitions, then the response_format schema, then the messages in order" in (
        section
    )
    assert "OpenAI does not document where tools sit in the rendered prompt" in section
    assert section.index("Prompt order") < section.index("| column | from |")
