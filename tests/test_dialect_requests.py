"""Request side of every dialect: model, stream flag, segment order, cache breakpoints."""

from __future__ import annotations

import orjson

from pipeline.dialects import converse, generate_content, interactions, messages, responses


def kinds(info) -> list[tuple[str, str | None]]:  # type: ignore[no-untyped-def]
    return [(s.kind, s.role) for s in info.segments]


def test_anthropic_segments_are_tools_then_system_blocks_then_messages_with_breakpoints() -> None:
    body = {
        "model": "claude-sonnet-4-5",
        "stream": True,
        "messages": [
            {"role": "user", "content": "a"},
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "b", "cache_control": {"type": "ephemeral"}}],
            },
        ],
        "system": [
            {"type": "text", "text": "S1"},
            {"type": "text", "text": "S2", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
        ],
        "tools": [{"name": "t1", "input_schema": {}}],
    }
    info = messages.parse_request(body)
    assert kinds(info) == [
        ("tool", None),
        ("system", "system"),
        ("system", "system"),
        ("message", "user"),
        ("message", "assistant"),
    ]
    assert info.cache_breakpoints == [2, 4]
    assert info.cache_ttls == ["1h", "5m"]
    assert info.model == "claude-sonnet-4-5"
    assert info.stream is True
    # Segment bytes are the exact compact JSON of the block, key order preserved, without the
    # cache marker (a breakpoint is not content).
    assert info.segments[1].data == orjson.dumps(body["system"][0])
    assert info.segments[2].data == b'{"type":"text","text":"S2"}'
    assert info.segments[4].data == b'{"role":"assistant","content":[{"type":"text","text":"b"}]}'


def test_an_anthropic_string_system_prompt_is_one_segment() -> None:
    info = messages.parse_request({"system": "be brief", "messages": []})
    assert kinds(info) == [("system", "system")]
    assert info.segments[0].data == b'"be brief"'


def test_responses_segments_are_tools_schema_instructions_then_input_items() -> None:
    body = {
        "model": "gpt-5",
        "input": [{"role": "developer", "content": "d"}, {"role": "user", "content": "u"}],
        "instructions": "be kind",
        "text": {"format": {"type": "json_schema", "name": "x", "schema": {}}},
        "tools": [{"type": "function", "name": "f"}],
    }
    info = responses.parse_request(body)
    assert kinds(info) == [
        ("tool", None),
        ("schema", None),
        ("system", "system"),
        ("system", "developer"),
        ("message", "user"),
    ]


def test_a_responses_string_input_is_one_user_message() -> None:
    info = responses.parse_request({"model": "m", "input": "hello"})
    assert kinds(info) == [("message", "user")]


def test_gemini_model_and_stream_come_from_the_url_path() -> None:
    url = (
        "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash"
        ":streamGenerateContent?alt=sse"
    )
    body = {
        "contents": [{"role": "user", "parts": [{"text": "q"}]}],
        "systemInstruction": {"parts": [{"text": "sys"}]},
        "tools": [{"functionDeclarations": []}],
        "cachedContent": "cachedContents/abc",
    }
    info = generate_content.parse_request(body, url)
    assert info.model == "gemini-2.5-flash"
    assert info.stream is True
    assert kinds(info) == [
        ("cached_content", None),
        ("tool", None),
        ("system", "system"),
        ("message", "user"),
    ]


def test_vertex_gemini_urls_name_the_model_too() -> None:
    url = (
        "https://us-central1-aiplatform.googleapis.com/v1/projects/p/locations/us-central1/"
        "publishers/google/models/gemini-2.0-flash:generateContent"
    )
    info = generate_content.parse_request({"contents": []}, url)
    assert (info.model, info.stream) == ("gemini-2.0-flash", False)


def test_bedrock_model_id_is_percent_decoded_from_the_path_and_cache_points_recorded() -> None:
    url = "https://bedrock-runtime.us-east-1.amazonaws.com/model/us.anthropic.claude-v1%3A0/converse-stream"
    body = {
        "system": [{"text": "sys"}, {"cachePoint": {"type": "default"}}],
        "messages": [
            {"role": "user", "content": [{"text": "q"}, {"cachePoint": {"type": "default"}}]}
        ],
        "toolConfig": {"tools": [{"toolSpec": {"name": "t"}}]},
    }
    info = converse.parse_request(body, url)
    assert info.model == "us.anthropic.claude-v1:0"
    assert info.stream is True
    # The cachePoint entries are markers, not content: no segment of their own, and the
    # breakpoint is on the segment they close.
    assert kinds(info) == [("tool", None), ("system", "system"), ("message", "user")]
    assert info.cache_breakpoints == [1, 2]
    assert info.cache_ttls == ["5m", "5m"]
    assert info.segments[2].data == b'{"role":"user","content":[{"text":"q"}]}'


def test_interactions_segments_are_tools_system_then_input_turns() -> None:
    body = {
        "model": "gemini-2.5-flash",
        "input": [{"role": "user", "content": "hi"}],
        "system_instruction": "sys",
        "tools": [{"type": "function", "name": "f"}],
        "stream": True,
    }
    info = interactions.parse_request(body)
    assert kinds(info) == [("tool", None), ("system", "system"), ("message", "user")]
    assert info.stream is True
