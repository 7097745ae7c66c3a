"""The simulator's cache rules, checked with token counts worked out by hand.

Tokenizer (pipeline/simulate/tokens.py): a run of ASCII letters/digits is one token, every other
non-space character one token, whitespace sticks to the next token. So " ".join(n words) is n
tokens. Chat layout: `<|user|>` + content per message, then `<|assistant|>` (1 token each).
Anthropic layout: `<|system|>` starts the system block; the first message block starts with a
config token and `<|user|>`.
"""

from __future__ import annotations

import socket
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from pipeline.simulate import Simulator, SimulatorSettings
from pipeline.simulate.cache import DeepSeekCache, DeepSeekSettings
from pipeline.simulate.tokens import tokenize


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def words(n: int, stem: str = "w") -> str:
    return " ".join(f"{stem}{i}" for i in range(n))


def client(rules: str, clock: Clock, **kw: Any) -> TestClient:
    settings = SimulatorSettings(
        rules=rules, base_latency_ms=0, prefill_ms_per_1k=0, chunk_ms=0, **kw
    )
    return TestClient(Simulator(settings, clock=clock).app())


# --- tokenizer -----------------------------------------------------------------------------------


def test_the_tokenizer_splits_words_and_punctuation_and_keeps_whitespace_on_the_next_token() -> (
    None
):
    assert tokenize("Hello, world!") == ["Hello", ",", " world", "!"]
    assert tokenize("a  b\n") == ["a", "  b", "\n"]
    assert len(tokenize(words(50))) == 50


# --- DeepSeek (pure model) -----------------------------------------------------------------------


def ds(min_unit: int = 4, interval: int = 0) -> DeepSeekCache:
    return DeepSeekCache(
        DeepSeekSettings(build_delay_s=2.0, min_unit_tokens=min_unit, interval_tokens=interval)
    )


def test_a_deepseek_unit_is_usable_only_after_its_build_delay() -> None:
    cache = ds()
    prompt = tokenize(words(10))
    assert cache.request("k", prompt, 0.0) == 0
    assert cache.request("k", prompt, 1.0) == 0  # built at 2.0
    assert cache.request("k", prompt, 2.5) == 10


def test_deepseek_persists_a_common_prefix_only_once_two_requests_share_it() -> None:
    cache = ds()
    a = tokenize(words(8, "a"))
    assert cache.request("k", a + tokenize(" b0 b1"), 0.0) == 0
    # A+C shares 8 tokens with A+B, but only A+B (10) and nothing shorter is stored yet.
    assert cache.request("k", a + tokenize(" c0 c1 c2"), 10.0) == 0
    # A+D hits A, the unit the A+B / A+C pair created.
    assert cache.request("k", a + tokenize(" d0"), 20.0) == 8


def test_deepseek_input_plus_output_is_a_unit_so_the_next_turn_hits_it() -> None:
    cache = ds()
    prompt = tokenize(words(6))
    cache.request("k", prompt, 0.0)
    cache.answered("k", prompt + tokenize(" r0 r1 r2"), 1.0)
    assert cache.request("k", prompt + tokenize(" r0 r1 r2 q9"), 5.0) == 9


def test_deepseek_units_below_the_minimum_are_not_persisted() -> None:
    cache = ds(min_unit=64)
    prompt = tokenize(words(63))
    cache.request("k", prompt, 0.0)
    assert cache.request("k", prompt, 10.0) == 0


def test_deepseek_fixed_interval_units_are_off_by_default_and_every_n_tokens_when_on() -> None:
    off, on = ds(), ds(interval=10)
    first = tokenize(words(25))
    later = tokenize(words(23)) + tokenize(" z")  # shares 23 tokens with `first`
    for cache in (off, on):
        cache.request("k", first, 0.0)
    assert off.request("k", later, 10.0) == 0
    assert on.request("k", later, 10.0) == 20  # units at 10 and 20; 20 is the longest inside


def test_deepseek_caches_are_separate_per_namespace() -> None:
    cache = ds()
    prompt = tokenize(words(10))
    cache.request("key-a", prompt, 0.0)
    assert cache.request("key-b", prompt, 10.0) == 0


def test_deepseek_stream_carries_usage_on_the_finish_chunk_with_choices() -> None:
    clock = Clock()
    api = client("deepseek", clock, deepseek=DeepSeekSettings(build_delay_s=0, min_unit_tokens=1))
    body = {
        "model": "deepseek-chat",
        "messages": [{"role": "user", "content": words(20)}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    api.post("/chat/completions", json=body)
    response = api.post("/chat/completions", json=body)
    chunks = [
        orjson.loads(line[6:]) for line in response.text.split("\n") if line.startswith("data: {")
    ]
    assert response.text.rstrip().endswith("data: [DONE]")
    assert all(c["usage"] is None for c in chunks[:-1])
    last = chunks[-1]
    assert last["choices"][0]["finish_reason"] == "stop"
    # 1 (<|user|>) + 20 + 1 (<|assistant|>) = 22, all hit on the identical second request.
    assert last["usage"]["prompt_tokens"] == 22
    assert last["usage"]["prompt_cache_hit_tokens"] == 22
    assert last["usage"]["prompt_cache_miss_tokens"] == 0
    assert last["usage"]["prompt_tokens_details"] == {"cached_tokens": 22}


# --- OpenAI --------------------------------------------------------------------------------------


def openai_body(doc_words: int, question: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": "gpt-4.1",
        "messages": [
            {"role": "user", "content": words(doc_words)},
            {"role": "user", "content": question},
        ],
        **extra,
    }


def usage_of(response: Any) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    usage: dict[str, Any] = response.json()["usage"]
    return usage


@pytest.mark.parametrize(
    ("doc_words", "expected_cached"),
    [
        # common prefix = <|user|> + doc + <|user|> = doc + 2 tokens
        (1000, 0),  # 1002 < 1024
        (1022, 1024),  # exactly 1024
        (1100, 1024),  # 1102 -> 1024 + 128 * 0
        (1300, 1280),  # 1302 -> 1024 + 128 * 2
    ],
)
def test_openai_caches_1024_tokens_then_128_token_steps_of_the_common_prefix(
    doc_words: int, expected_cached: int
) -> None:
    api = client("openai", Clock())
    first = usage_of(api.post("/v1/chat/completions", json=openai_body(doc_words, "alpha beta")))
    assert first["prompt_tokens_details"]["cached_tokens"] == 0
    second = usage_of(api.post("/v1/chat/completions", json=openai_body(doc_words, "gamma")))
    assert second["prompt_tokens"] == doc_words + 4  # 2 markers + doc + "gamma" + <|assistant|>
    assert second["prompt_tokens_details"]["cached_tokens"] == expected_cached


def test_openai_in_memory_cache_expires_after_ten_idle_minutes_but_24h_retention_keeps_it() -> None:
    clock = Clock()
    api = client("openai", clock)
    api.post("/v1/chat/completions", json=openai_body(1300, "a"))
    keep = {"prompt_cache_retention": "24h"}
    api.post("/v1/chat/completions", json=openai_body(1300, "b", **keep) | {"model": "gpt-5"})
    clock.now += 11 * 60
    short = usage_of(api.post("/v1/chat/completions", json=openai_body(1300, "c")))
    long = usage_of(
        api.post("/v1/chat/completions", json=openai_body(1300, "d", **keep) | {"model": "gpt-5"})
    )
    assert short["prompt_tokens_details"]["cached_tokens"] == 0
    assert long["prompt_tokens_details"]["cached_tokens"] == 1280


def test_openai_stream_sends_usage_in_a_final_chunk_with_no_choices() -> None:
    api = client("openai", Clock())
    body = openai_body(10, "q", stream=True, stream_options={"include_usage": True})
    text = api.post("/v1/chat/completions", json=body).text
    chunks = [orjson.loads(x[6:]) for x in text.split("\n") if x.startswith("data: {")]
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["prompt_tokens"] == 14  # 2 markers + 10 + "q" + <|assistant|>
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"


# --- Anthropic -----------------------------------------------------------------------------------

EPHEMERAL = {"type": "ephemeral"}


def anthropic_body(
    system_words: int = 1200,
    user_blocks: list[dict[str, Any]] | None = None,
    model: str = "claude-sonnet-4-5",
    system_ttl: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    control = dict(EPHEMERAL) | ({"ttl": system_ttl} if system_ttl else {})
    return {
        "model": model,
        "max_tokens": 50,
        "system": [{"type": "text", "text": words(system_words), "cache_control": control}],
        "messages": [
            {"role": "user", "content": user_blocks or [{"type": "text", "text": "Hello there"}]}
        ],
        **extra,
    }


def anthropic_usage(api: TestClient, body: dict[str, Any]) -> dict[str, Any]:
    response = api.post("/v1/messages", json=body)
    assert response.status_code == 200, response.text
    usage: dict[str, Any] = response.json()["usage"]
    return usage


def cache_numbers(usage: dict[str, Any]) -> tuple[int, int, int]:
    return (
        usage["cache_read_input_tokens"],
        usage["cache_creation_input_tokens"],
        usage["input_tokens"],
    )


def test_anthropic_writes_then_reads_the_system_breakpoint_and_input_tokens_excludes_both() -> None:
    api = client("anthropic", Clock())
    # system block: <|system|> + 1200 = 1201; message block: config + <|user|> + 2 = 4.
    first = anthropic_usage(api, anthropic_body())
    assert cache_numbers(first) == (0, 1201, 4)
    assert first["cache_creation"] == {
        "ephemeral_5m_input_tokens": 1201,
        "ephemeral_1h_input_tokens": 0,
    }
    assert cache_numbers(anthropic_usage(api, anthropic_body())) == (1201, 0, 4)
    last = [{"type": "text", "text": "Hello there", "cache_control": EPHEMERAL}]
    assert cache_numbers(anthropic_usage(api, anthropic_body(user_blocks=last))) == (1201, 4, 0)


def test_anthropic_does_not_cache_a_prefix_shorter_than_the_models_minimum() -> None:
    api = client("anthropic", Clock())
    body = anthropic_body(model="claude-haiku-4-5")  # minimum 4096 > 1205
    assert cache_numbers(anthropic_usage(api, body)) == (0, 0, 1205)
    assert cache_numbers(anthropic_usage(api, body)) == (0, 0, 1205)


def test_anthropic_5m_entries_expire_unless_refreshed_and_1h_entries_last() -> None:
    clock = Clock()
    api = client("anthropic", clock)
    anthropic_usage(api, anthropic_body(system_words=1100))
    written_1h = anthropic_usage(api, anthropic_body(system_words=1300, system_ttl="1h"))
    assert written_1h["cache_creation"]["ephemeral_1h_input_tokens"] == 1301
    clock.now += 4 * 60  # a hit at 4 min refreshes the 5m entry ...
    assert (
        anthropic_usage(api, anthropic_body(system_words=1100))["cache_read_input_tokens"] == 1101
    )
    clock.now += 4 * 60  # ... so 8 min after writing it still hits
    assert (
        anthropic_usage(api, anthropic_body(system_words=1100))["cache_read_input_tokens"] == 1101
    )
    clock.now += 6 * 60  # 6 idle minutes: gone, written again
    assert cache_numbers(anthropic_usage(api, anthropic_body(system_words=1100))) == (0, 1101, 4)
    assert (
        anthropic_usage(api, anthropic_body(system_words=1300, system_ttl="1h"))[
            "cache_read_input_tokens"
        ]
        == 1301
    )


@pytest.mark.parametrize(("blocks", "expected_read"), [(19, 1101), (21, 0)])
def test_anthropic_looks_back_at_most_20_block_boundaries_from_a_breakpoint(
    blocks: int, expected_read: int
) -> None:
    api = client("anthropic", Clock())
    anthropic_usage(api, anthropic_body(system_words=1100))  # entry at 1101 (block 0)
    later = anthropic_body(
        system_words=1100,
        user_blocks=[{"type": "text", "text": f"x{i}"} for i in range(blocks)],
    )
    later["system"][0].pop("cache_control")
    later["messages"][0]["content"][-1]["cache_control"] = EPHEMERAL
    usage = anthropic_usage(api, later)
    total = 1101 + 2 + blocks  # each block "xN" is 1 token; config + <|user|> on the first
    assert usage["cache_read_input_tokens"] == expected_read
    assert usage["cache_creation_input_tokens"] == total - expected_read
    assert usage["input_tokens"] == 0


def test_anthropic_changing_tool_choice_keeps_the_system_cache_and_drops_the_messages_cache() -> (
    None
):
    api = client("anthropic", Clock())
    last = [{"type": "text", "text": words(30, "m"), "cache_control": EPHEMERAL}]
    tools = [{"name": "lookup", "description": "d", "input_schema": {"type": "object"}}]
    body = anthropic_body(user_blocks=last, tools=tools)
    first = anthropic_usage(api, body)
    tool_tokens = first["cache_creation_input_tokens"] - 1201 - 32  # 32 = config + <|user|> + 30
    assert cache_numbers(anthropic_usage(api, body)) == (tool_tokens + 1201 + 32, 0, 0)
    changed = body | {"tool_choice": {"type": "any"}}
    assert cache_numbers(anthropic_usage(api, changed)) == (tool_tokens + 1201, 32, 0)


def test_anthropic_stream_reports_input_side_at_start_and_output_at_the_end() -> None:
    api = client("anthropic", Clock())
    text = api.post("/v1/messages", json=anthropic_body() | {"stream": True}).text
    events = [orjson.loads(x[6:]) for x in text.split("\n") if x.startswith("data: ")]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    start = events[0]["message"]["usage"]
    assert (start["cache_creation_input_tokens"], start["input_tokens"]) == (1201, 4)
    answer = "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta")
    assert answer.startswith("[cacheaudit simulator: no inference]")
    assert events[-2]["usage"]["output_tokens"] == len(tokenize(answer))


# --- identity and errors -------------------------------------------------------------------------


def test_every_response_names_the_simulator_even_errors() -> None:
    api = client("deepseek", Clock())
    ok = api.post("/chat/completions", json={"model": "m", "messages": []})
    bad = api.post("/chat/completions", content=b"{not json")
    wrong = api.post("/v1/messages", json={"model": "m", "max_tokens": 1, "messages": []})
    for response in (ok, bad, wrong, api.get("/v1/models")):
        assert response.headers["x-cacheaudit-simulator"].startswith("cacheaudit-simulator")
        assert response.headers["server"] == "cacheaudit-simulator"
    assert ok.json()["system_fingerprint"] == "cacheaudit-simulator"
    assert (bad.status_code, wrong.status_code) == (400, 404)
    assert "cacheaudit-simulator" in bad.json()["error"]["message"]


def test_a_forced_tool_choice_returns_a_tool_call() -> None:
    api = client("openai", Clock())
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
    body = openai_body(5, "find x", tools=tools, tool_choice="required")
    choice = api.post("/v1/chat/completions", json=body).json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["tool_calls"][0]["function"]["name"] == "lookup"


def test_serving_on_a_busy_port_is_a_one_line_network_error_naming_the_port_option(cli) -> None:  # type: ignore[no-untyped-def]
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = cli("simulate", "serve", "--port", str(port))
    assert result.returncode == 6, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0].startswith(f"error: cannot listen on 127.0.0.1:{port}: ")
    assert lines[1].startswith("hint: ") and "--port" in lines[1]
    assert len(lines) == 2  # no uvicorn log line, no "simulator on http://..." announcement
