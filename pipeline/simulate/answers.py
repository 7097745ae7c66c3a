"""What the simulator says back: a deterministic non-answer (or a forced tool call), and the
exact usage objects each provider returns (the shapes of their API references; docs/providers.md).

The answer text always starts with SIMULATOR_TAG so nobody mistakes it for a model's output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from pipeline.simulate.tokens import assistant_body, tokenize

SIMULATOR_NAME = "cacheaudit-simulator"
SIMULATOR_TAG = "[cacheaudit simulator: no inference]"
ECHO_TOKENS = 12  # how much of the last user text the answer echoes


@dataclass(slots=True)
class Answer:
    text: str | None  # None for a tool call
    tool_name: str | None
    tool_arguments: str | None  # JSON text
    output_tokens: int
    truncated: bool

    @property
    def is_tool_call(self) -> bool:
        return self.tool_name is not None


def _last_user_text(messages: list[Any]) -> str:
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            texts = [p.get("text", "") for p in content if isinstance(p, dict) and p.get("text")]
            if texts:
                return str(texts[-1])
    return ""


def _echo(messages: list[Any]) -> str:
    return "".join(tokenize(_last_user_text(messages))[:ECHO_TOKENS]).strip()


def text_answer(messages: list[Any], max_tokens: int | None) -> Answer:
    tokens = tokenize(f"{SIMULATOR_TAG} You asked: {_echo(messages)}")
    truncated = max_tokens is not None and len(tokens) > max_tokens
    if truncated and max_tokens is not None:
        tokens = tokens[:max_tokens]
    return Answer("".join(tokens), None, None, len(tokens), truncated)


def tool_answer(messages: list[Any], name: str) -> Answer:
    arguments = orjson.dumps({"query": _echo(messages)}).decode()
    call = {"function": {"name": name, "arguments": arguments}}
    return Answer(None, name, arguments, len(assistant_body(None, [call])), False)


def chat_tool_forced(body: dict[str, Any]) -> str | None:
    """The tool a Chat Completions request forces, if any ("required" picks the first)."""
    choice = body.get("tool_choice")
    tools = body.get("tools") or []
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        return str(name) if name else None
    if choice == "required" and tools:
        return str((tools[0].get("function") or {}).get("name", "tool"))
    return None


def messages_tool_forced(body: dict[str, Any]) -> str | None:
    choice = body.get("tool_choice")
    tools = body.get("tools") or []
    if not isinstance(choice, dict):
        return None
    if choice.get("type") == "tool" and choice.get("name"):
        return str(choice["name"])
    if choice.get("type") == "any" and tools:
        return str(tools[0].get("name", "tool"))
    return None


def deepseek_usage(prompt: int, hit: int, output: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": output,
        "total_tokens": prompt + output,
        "prompt_tokens_details": {"cached_tokens": hit},
        "prompt_cache_hit_tokens": hit,
        "prompt_cache_miss_tokens": prompt - hit,
    }


def openai_usage(prompt: int, cached: int, output: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": output,
        "total_tokens": prompt + output,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def anthropic_usage(
    uncached: int, read: int, write_5m: int, write_1h: int, output: int
) -> dict[str, Any]:
    """`input_tokens` excludes both cache fields; total input is the sum of the three."""
    return {
        "input_tokens": uncached,
        "cache_creation_input_tokens": write_5m + write_1h,
        "cache_read_input_tokens": read,
        "cache_creation": {
            "ephemeral_5m_input_tokens": write_5m,
            "ephemeral_1h_input_tokens": write_1h,
        },
        "output_tokens": output,
        "service_tier": "standard",
    }
