"""The providers' side of the demo traffic (pipeline/demo.py): what each answers.

A simple model of each provider's prompt cache (the demo's docstring states its rules), the
usage block it reports from that model, and the streamed response an OpenAI or DeepSeek
endpoint sends, with the arrival time of each chunk. The agents, their sessions and the planted
cache breakers stay in pipeline/demo.py.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import orjson

from pipeline.simulate.answers import deepseek_usage, openai_usage

if TYPE_CHECKING:
    from pipeline.demo import Agent


@dataclass
class CacheModel:
    """Per (model, account) prompt history for the provider's cache rules."""

    prompts: list[tuple[datetime, bytes]] = field(default_factory=list)
    units: list[tuple[datetime, bytes]] = field(default_factory=list)

    # Reads look without writing: only a request the provider processed writes the cache (a
    # refused one, such as a 429, leaves nothing for the next turn to read), and whether it was
    # refused is drawn after its read is known. `write` records it once it was processed.

    def openai_read(self, now: datetime, prompt: bytes) -> int:
        best = 0
        for ts, earlier in self.prompts:
            if now - ts <= timedelta(minutes=10):
                best = max(best, lcp(earlier, prompt))
        tokens = best // 4
        return 0 if tokens < 1024 else 1024 + 128 * ((tokens - 1024) // 128)

    def deepseek_read(self, now: datetime, prompt: bytes) -> int:
        live = self._live_units(now)
        return max((len(u) for _, u in live if prompt.startswith(u)), default=0) // 4

    def write(self, provider: str, now: datetime, prompt: bytes) -> None:
        if provider == "openai":
            self.prompts.append((now, prompt))
            return
        live = self._live_units(now)
        best = max((len(u) for _, u in live if prompt.startswith(u)), default=0)
        # Common-prefix detection: a prefix shared with an earlier request becomes a unit.
        shared = max((lcp(u, prompt) for _, u in live), default=0)
        if shared > best and shared >= 256:
            live.append((now, prompt[:shared]))
        live.append((now, prompt))
        self.units = live

    def _live_units(self, now: datetime) -> list[tuple[datetime, bytes]]:
        return [(ts, u) for ts, u in self.units if now - ts <= timedelta(hours=6)]

    def add_unit(self, now: datetime, unit: bytes) -> None:
        self.units.append((now, unit))


def lcp(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    lo, hi = 0, n
    while lo < hi:  # binary search on prefix equality: fast in C for long prompts
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def prompt_bytes(body: dict[str, Any]) -> tuple[bytes, int]:
    parts = [orjson.dumps(t) for t in body.get("tools", [])]
    parts += [orjson.dumps(m) for m in body["messages"]]
    return b"".join(parts), len(parts)


def usage_of(
    agent: Agent, prompt: bytes, n_seg: int, read: int, out_tokens: int, reasoning: int
) -> dict[str, Any]:
    input_tokens = len(prompt) // 4 + 3 * n_seg
    read = min(read, input_tokens)
    if agent.provider == "deepseek":
        usage = deepseek_usage(input_tokens, read, out_tokens)
        if agent.reasoning:
            usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
        return usage
    return openai_usage(input_tokens, read, out_tokens)


def stream_body(
    agent: Agent,
    rid: str,
    created: int,
    text: str,
    reasoning_text: str,
    usage: dict[str, Any] | None,
    cut: bool,
    ttft: float,
    rng: random.Random,
) -> tuple[bytes, list[tuple[float, int]]]:
    base = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": agent.model}
    events: list[dict[str, Any]] = []
    ds = agent.provider == "deepseek"
    if ds:
        events.append(
            {
                **base,
                "choices": [
                    {
                        "index": 0,
                        "delta": {
                            "role": "assistant",
                            "content": None if agent.reasoning else "",
                            **({"reasoning_content": ""} if agent.reasoning else {}),
                        },
                        "logprobs": None,
                        "finish_reason": None,
                    }
                ],
                "usage": None,
            }
        )
    else:
        events.append(
            {
                **base,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": "", "refusal": None},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                ],
                "usage": None,
            }
        )
    for word in reasoning_text.split(" ") if reasoning_text else []:
        events.append(
            {
                **base,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"content": None, "reasoning_content": word + " "},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                ],
                "usage": None,
            }
        )
    for word in text.split(" "):
        delta: dict[str, Any] = {"content": word + " "}
        if ds and agent.reasoning:
            delta["reasoning_content"] = None
        events.append(
            {
                **base,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}],
                "usage": None,
            }
        )
    if ds:
        events.append(
            {
                **base,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"content": ""},
                        "logprobs": None,
                        "finish_reason": "stop",
                    }
                ],
                "usage": usage,
            }
        )
    else:
        events.append(
            {
                **base,
                "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}],
                "usage": None,
            }
        )
        events.append({**base, "choices": [], "usage": usage})
    if cut:  # the connection drops before the usage chunk
        events = events[: max(2, len(events) // 2)]
    frames = [b"data: " + orjson.dumps(e) + b"\n\n" for e in events]
    if not cut:
        frames.append(b"data: [DONE]\n\n")
    chunks: list[tuple[float, int]] = []
    t = ttft - 40.0
    for i, frame in enumerate(frames):
        if i == 0:
            t = max(30.0, ttft - 40.0)
        elif i == 1 or (reasoning_text and i == 1):
            t = ttft
        else:
            t += rng.uniform(8.0, 25.0)
        chunks.append((round(t, 3), len(frame)))
    return b"".join(frames), chunks
