"""The usage counts behind the fees and modality prices: Gemini's server-side tool prompts
are input (billed at the input rate, inside totalTokenCount, outside promptTokenCount), audio
input and audio cache reads come from the per-modality lists, and Anthropic's web searches from
server_tool_use and OpenAI's Responses (tool_usage, else its web_search_call items). A count
the response does not carry is unknown (NULL), a listed 0 is 0."""

from __future__ import annotations

from pathlib import Path

import orjson

from pipeline.dialects import chat_completions, generate_content, messages, responses

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


def test_a_compaction_pass_without_a_count_leaves_that_sum_unknown_not_short() -> None:
    # 100 + unknown input is not 100: the request's input is unknown, so it is not priced
    usage = messages.normalise_usage(
        {
            "input_tokens": 10,
            "output_tokens": 5,
            "iterations": [
                {"input_tokens": 100_000, "output_tokens": 7, "cache_read_input_tokens": 0},
                {"output_tokens": 5, "cache_read_input_tokens": 50_000},
            ],
        }
    )
    assert usage is not None
    assert usage.input_tokens is None
    assert usage.output_tokens == 12  # both passes report it
    assert usage.cache_read_tokens == 50_000


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


SAMPLES = Path(__file__).resolve().parent / "fixtures" / "samples"


def test_an_openai_responses_stream_counts_each_web_search_call_of_its_output() -> None:
    # gpt-5 with the web_search tool: one web_search_call item in response.completed's output,
    # and no tool_usage count in that (older) Response
    body = (SAMPLES / "openai_responses_stream_web_search_cached.sse").read_bytes()
    info = responses.parse_response(200, body, "openai", True)
    assert info.usage is not None
    assert info.usage.web_search_requests == 1


def test_an_openai_response_reporting_tool_usage_gives_its_count_zero_included() -> None:
    body = (SAMPLES / "openai_responses_prompt_cache_write.json").read_bytes()
    assert b'"num_requests": 0' in body
    info = responses.parse_response(200, body, "openai", False)
    assert info.usage is not None
    assert info.usage.web_search_requests == 0


def test_an_openai_response_without_count_or_search_call_leaves_searches_unknown() -> None:
    response = {
        "status": "completed",
        "model": "gpt-4.1",
        "output": [{"type": "message", "content": [{"type": "output_text", "text": "hi"}]}],
        "usage": {"input_tokens": 10, "output_tokens": 2},
    }
    info = responses.parse_response(200, orjson.dumps(response), "openai", False)
    assert info.usage is not None
    assert info.usage.web_search_requests is None
    calls = {**response, "output": [{"type": "web_search_call", "status": "completed"}] * 3}
    counted = responses.parse_response(200, orjson.dumps(calls), "openai", False)
    assert counted.usage is not None and counted.usage.web_search_requests == 3
    reported = {**calls, "tool_usage": {"web_search": {"num_requests": 2}}}
    told = responses.parse_response(200, orjson.dumps(reported), "openai", False)
    assert told.usage is not None and told.usage.web_search_requests == 2  # the API's own count


def test_the_audio_part_of_the_output_is_read_for_openai_and_gemini() -> None:
    # https://platform.openai.com/docs/api-reference/chat/object (completion_tokens_details);
    # Gemini lists the output by modality in candidatesTokensDetails
    openai = chat_completions.normalise_usage(
        {
            "prompt_tokens": 1000,
            "completion_tokens": 2000,
            "completion_tokens_details": {"audio_tokens": 1800, "text_tokens": 200},
        }
    )
    gemini = generate_content.normalise_usage(
        {
            "promptTokenCount": 10,
            "candidatesTokenCount": 500,
            "candidatesTokensDetails": [{"modality": "AUDIO", "tokenCount": 500}],
        }
    )
    text_only = chat_completions.normalise_usage({"prompt_tokens": 10, "completion_tokens": 5})
    assert openai is not None and gemini is not None and text_only is not None
    assert (openai.output_tokens, openai.audio_output_tokens) == (2000, 1800)
    assert (gemini.output_tokens, gemini.audio_output_tokens) == (500, 500)
    assert text_only.audio_output_tokens is None  # not reported: unknown, not 0
