"""A simple deterministic tokenizer and the prompt layouts the simulator caches over.

Tokenizer: a run of ASCII letters/digits/underscore is one token, every other non-space
character is one token, and whitespace sticks to the token after it (a trailing run of
whitespace is one token of its own). So "Hello, world!" is ["Hello", ",", " world", "!"]: 4.
Real tokenizers differ; what matters here is that equal text gives equal tokens and that counts
are easy to work out by hand.

Chat Completions layout (DeepSeek and OpenAI rules): each tool definition is `<|tool|>` plus
its compact sorted-key JSON; each message is `<|role|>` plus its content (tool calls as
`<|call|>` name arguments); then `<|assistant|>` as the generation prompt. The answer is the
assistant body alone, so input + output is exactly the prefix of the next turn.

Messages layout (Anthropic rules): blocks in the order tools -> system -> messages. Each tool is one
block; system text blocks follow (the first starts with `<|system|>`); the first message block
starts with one `<|config ...|>` token naming tool_choice and thinking, so changing either leaves
tools and system cached and invalidates messages (Anthropic's prompt-caching page); each message's
first block starts with `<|role|>`. No generation-prompt token.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import orjson

_TOKEN = re.compile(r"\s*[A-Za-z0-9_]+|\s*[^\sA-Za-z0-9_]|\s+")


def tokenize(text: str) -> list[str]:
    return _TOKEN.findall(text)


def _json_tokens(value: Any) -> list[str]:
    return tokenize(orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode())


def _content_tokens(content: Any) -> list[str]:
    """Chat message content: a string, or a list of parts (text parts by their text)."""
    if content is None:
        return []
    if isinstance(content, str):
        return tokenize(content)
    tokens: list[str] = []
    for part in content if isinstance(content, list) else [content]:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            tokens += tokenize(part["text"])
        else:
            tokens += _json_tokens(part)
    return tokens


def _call_tokens(call: Any) -> list[str]:
    function = call.get("function", {}) if isinstance(call, dict) else {}
    arguments = function.get("arguments")
    return [
        "<|call|>",
        *tokenize(str(function.get("name", ""))),
        *(tokenize(arguments) if isinstance(arguments, str) else _json_tokens(arguments)),
    ]


def assistant_body(content: Any, tool_calls: Any) -> list[str]:
    """What an assistant turn adds after its `<|assistant|>` marker (answer and next prompt)."""
    tokens = _content_tokens(content)
    for call in tool_calls or []:
        tokens += _call_tokens(call)
    return tokens


def render_chat(body: dict[str, Any]) -> list[str]:
    tokens: list[str] = []
    for tool in body.get("tools") or []:
        tokens += ["<|tool|>", *_json_tokens(tool)]
    for message in body.get("messages") or []:
        role = str(message.get("role", "user"))
        tokens.append(f"<|{role}|>")
        if role == "assistant":
            tokens += assistant_body(message.get("content"), message.get("tool_calls"))
        else:
            tokens += _content_tokens(message.get("content"))
    tokens.append("<|assistant|>")
    return tokens


@dataclass(slots=True)
class Block:
    end: int  # token offset just after this block
    ttl: str | None  # cache_control ttl ("5m", "1h") when the block is a breakpoint


@dataclass(slots=True)
class BlockPrompt:
    tokens: list[str] = field(default_factory=list)
    blocks: list[Block] = field(default_factory=list)

    def add(self, tokens: list[str], holder: Any) -> None:
        self.tokens += tokens
        self.blocks.append(Block(len(self.tokens), _ttl(holder)))


def _ttl(holder: Any) -> str | None:
    control = holder.get("cache_control") if isinstance(holder, dict) else None
    if not isinstance(control, dict):
        return None
    return str(control.get("ttl") or "5m")


def _block_tokens(block: Any) -> list[str]:
    if isinstance(block, str):
        return tokenize(block)
    if not isinstance(block, dict):
        return _json_tokens(block)
    kind = block.get("type")
    if kind == "text":
        return tokenize(str(block.get("text", "")))
    if kind == "thinking":
        return tokenize(str(block.get("thinking", "")))
    if kind == "tool_use":
        return [
            "<|tool_use|>",
            *tokenize(str(block.get("name", ""))),
            *_json_tokens(block.get("input")),
        ]
    if kind == "tool_result":
        inner = block.get("content")
        parts = inner if isinstance(inner, list) else [inner] if inner is not None else []
        return ["<|tool_result|>", *[t for p in parts for t in _block_tokens(p)]]
    return _json_tokens({k: v for k, v in block.items() if k != "cache_control"})


def render_messages(body: dict[str, Any]) -> BlockPrompt:
    prompt = BlockPrompt()
    for tool in body.get("tools") or []:
        plain = {k: v for k, v in tool.items() if k != "cache_control"}
        prompt.add(["<|tool|>", *_json_tokens(plain)], tool)
    system = body.get("system")
    system_blocks = [{"type": "text", "text": system}] if isinstance(system, str) else system or []
    for i, block in enumerate(system_blocks):
        prompt.add((["<|system|>"] if i == 0 else []) + _block_tokens(block), block)
    config = orjson.dumps(
        {"thinking": body.get("thinking"), "tool_choice": body.get("tool_choice")},
        option=orjson.OPT_SORT_KEYS,
    ).decode()
    lead = [f"<|config {config}|>"]
    for message in body.get("messages") or []:
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        lead.append(f"<|{message.get('role', 'user')}|>")
        for block in blocks:
            prompt.add(lead + _block_tokens(block), block)
            lead = []
    if lead[1:]:  # a trailing message with no blocks still costs its markers
        prompt.add(lead, None)
    top = body.get("cache_control")
    if isinstance(top, dict) and prompt.blocks:  # automatic caching: breakpoint on the last block
        prompt.blocks[-1].ttl = prompt.blocks[-1].ttl or str(top.get("ttl") or "5m")
    return prompt
