"""Provider and dialect identity from host and path, with the user TOML mapping."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.errors import InputError
from pipeline.providers import Route, UserRule, load_user_rules, route


@pytest.mark.parametrize(
    ("host", "path", "expected"),
    [
        ("api.deepseek.com", "/chat/completions", Route("deepseek", "chat_completions")),
        ("api.deepseek.com", "/responses", Route("deepseek", "responses")),
        ("api.openai.com", "/v1/responses", Route("openai", "responses")),
        ("api.anthropic.com", "/v1/messages", Route("anthropic", "messages")),
        (
            "generativelanguage.googleapis.com",
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
            Route("google", "generate_content"),
        ),
        (
            "generativelanguage.googleapis.com",
            "/v1beta/models/gemini-2.5-flash:generateContent",
            Route("google", "generate_content"),
        ),
        (
            "generativelanguage.googleapis.com",
            "/v1beta/interactions",
            Route("google", "interactions"),
        ),
        (
            "us-central1-aiplatform.googleapis.com",
            "/v1/projects/p/locations/l/publishers/google/models/gemini-2.0-flash:generateContent",
            Route("google", "generate_content"),
        ),
        (
            "bedrock-runtime.us-east-1.amazonaws.com",
            "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse-stream",
            Route("bedrock", "converse"),
        ),
        (
            "bedrock-runtime.eu-west-1.amazonaws.com",
            "/model/amazon.nova-micro-v1:0/converse",
            Route("bedrock", "converse"),
        ),
        ("openrouter.ai", "/api/v1/chat/completions", Route("openrouter", "chat_completions")),
        ("api.z.ai", "/api/paas/v4/chat/completions", Route("zhipu", "chat_completions")),
        (
            "dashscope-intl.aliyuncs.com",
            "/compatible-mode/v1/chat/completions",
            Route("alibaba", "chat_completions"),
        ),
        ("api.groq.com", "/openai/v1/chat/completions", Route("groq", "chat_completions")),
        ("api.moonshot.ai", "/v1/chat/completions", Route("moonshot", "chat_completions")),
        ("vllm.local:8000", "/v1/chat/completions", Route("vllm.local", "chat_completions")),
    ],
)
def test_builtin_routes(host: str, path: str, expected: Route) -> None:
    assert route(host, path) == expected


def test_paths_that_are_not_llm_calls_are_not_routed() -> None:
    assert route("api.anthropic.com", "/v1/messages/count_tokens") is None
    assert route("api.openai.com", "/v1/models") is None
    assert route("generativelanguage.googleapis.com", "/v1beta/models/gemini-2.5-flash") is None


def test_a_user_toml_rule_maps_a_gateway_host_and_forces_its_dialect(tmp_path: Path) -> None:
    toml = tmp_path / "providers.toml"
    toml.write_text(
        '[[provider]]\nhost = "llm-gw.internal*"\nprovider = "vllm"\n'
        '[[provider]]\nhost = "claude-proxy.corp"\nprovider = "anthropic"\napi = "messages"\n'
    )
    rules = load_user_rules(toml)
    assert rules == [
        UserRule("llm-gw.internal*", "vllm", None),
        UserRule("claude-proxy.corp", "anthropic", "messages"),
    ]
    assert route("llm-gw.internal.example:443", "/v1/chat/completions", rules) == Route(
        "vllm", "chat_completions"
    )
    assert route("claude-proxy.corp", "/proxy/v1/complete", rules) == Route("anthropic", "messages")


def test_a_user_rule_overrides_a_builtin_host(tmp_path: Path) -> None:
    rules = [UserRule("api.openai.com", "my-openai", None)]
    assert route("api.openai.com", "/v1/chat/completions", rules) == Route(
        "my-openai", "chat_completions"
    )


def test_a_toml_entry_without_provider_is_an_input_error(tmp_path: Path) -> None:
    toml = tmp_path / "bad.toml"
    toml.write_text('[[provider]]\nhost = "x"\n')
    with pytest.raises(InputError):
        load_user_rules(toml)
