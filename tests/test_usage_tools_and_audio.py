"""The usage counts behind the fees and modality prices: Gemini's server-side tool prompts
are input (billed at the input rate, inside totalTokenCount, outside promptTokenCount), audio
input and audio cache reads come from the per-modality lists, and Anthropic's web searches from
server_tool_use. A count the response does not carry is unknown (NULL), a listed 0 is 0."""

from __future__ import annotations

import orjson

from pipeline.dialects import chat_completions, generate_content, messages

GROUNDED = {
    # a grounded gemini-2.5-flash answer: 26 prompt tokens, 12,504 of search results
    "promptTokenCount": 26,
    "candidatesTokenCount": 103,
    "toolUsePromptTokenCount": 12504,
    "totalTokenCount": 12633,
    "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 26}],
    "toolUsePromptTokensDetails": [{"modality": "TEXT", "tokenCount": 12504}],
}


def test_gemini_tool_use_prompt_tokens_are_input_so_input_and_output_add_up_to_the_total() -> None:
    usage = generate_content.normalise_usage(GROUNDED)
    assert usage is not None
    assert usage.input_tokens == 26 + 12504
    assert usage.tool_prompt_tokens == 12504
    assert usage.input_tokens + (usage.output_tokens or 0) == GROUNDED["totalTokenCount"]
    assert usage.audio_input_tokens == 0  # the modality list names no audio
    assert usage.web_search_requests is None  # Gemini reports no search count


def test_gemini_audio_input_and_audio_cache_reads_come_from_the_modality_lists() -> None:
    usage = generate_content.normalise_usage(
        {
            "promptTokenCount": 1000,
            "cachedContentTokenCount": 200,
            "candidatesTokenCount": 10,
            "promptTokensDetails": [
                {"modality": "TEXT", "tokenCount": 600},
                {"modality": "AUDIO", "tokenCount": 400},
            ],
            "cacheTokensDetails": [
                {"modality": "TEXT", "tokenCount": 100},
                {"modality": "AUDIO", "tokenCount": 100},
            ],
        }
    )
    assert usage is not None
    assert (usage.input_tokens, usage.cache_read_tokens) == (1000, 200)
    assert (usage.audio_input_tokens, usage.audio_cache_read_tokens) == (400, 100)
    assert usage.tool_prompt_tokens == 0  # proto3 omits a zero count


def test_openai_audio_prompt_tokens_are_read_and_an_absent_split_of_the_reads_is_unknown() -> None:
    usage = chat_completions.normalise_usage(
        {
            "prompt_tokens": 500,
            "completion_tokens": 20,
            "prompt_tokens_details": {"cached_tokens": 128, "audio_tokens": 300},
        }
    )
    assert usage is not None
    assert usage.audio_input_tokens == 300
    assert usage.audio_cache_read_tokens is None


def test_anthropic_web_searches_are_counted_and_a_missing_count_is_unknown() -> None:
    searched = messages.normalise_usage(
        {"input_tokens": 10, "output_tokens": 5, "server_tool_use": {"web_search_requests": 4}}
    )
    silent = messages.normalise_usage({"input_tokens": 10, "output_tokens": 5})
    assert searched is not None and silent is not None
    assert searched.web_search_requests == 4
    assert silent.web_search_requests is None


def test_a_compacted_anthropic_response_keeps_its_top_level_search_count() -> None:
    usage = messages.normalise_usage(
        {
            "input_tokens": 10,
            "output_tokens": 5,
            "server_tool_use": {"web_search_requests": 2},
            "iterations": [
                {"input_tokens": 100, "output_tokens": 7},
                {"input_tokens": 10, "output_tokens": 5},
            ],
        }
    )
    assert usage is not None
    assert usage.input_tokens == 110
    assert usage.web_search_requests == 2


def test_the_recorded_code_execution_stream_reports_zero_searches_as_zero() -> None:
    from pathlib import Path

    sample = (
        Path(__file__).resolve().parent
        / "fixtures/samples/anthropic_messages_stream_code_execution_cumulative_delta.chunks.jsonl"
    )
    reported = [
        line
        for line in sample.read_text(encoding="utf-8").splitlines()
        if "web_search_requests" in line
    ]
    assert reported
    event = orjson.loads(reported[-1])
    data = event.get("data", event)
    if isinstance(data, str):
        data = orjson.loads(data)
    usage = messages.normalise_usage(data.get("usage") or data["message"]["usage"])
    assert usage is not None
    assert usage.web_search_requests == 0
