"""Deterministic demo traffic: several agents, sessions of 10-80 turns, KB-sized system prompts,
tool definitions and results, growing histories, streamed and not, DeepSeek and OpenAI shapes.

Usage numbers follow a simple model of each provider's cache (tokens = bytes / 4):
- OpenAI: the longest byte prefix shared with an earlier prompt of the same model and key seen
  within 10 minutes; nothing under 1024 tokens, then 128-token steps.
- DeepSeek: only persisted units hit: an earlier request's whole input, its input plus reply, or
  a prefix two earlier requests shared; units live 6 hours.

Planted cache breakers (written to `<out>.planted.csv`, one row per affected request, so tests
can measure precision and recall; CSV, not JSON lines, so that ingesting the demo folder does not
read the answer key as traffic): a timestamp in the system prompt (research-agent), a tool list
whose order changes (ops-agent), an idle gap longer than the cache lifetime (code-agent), a
rewritten history (summariser-agent). Same seed, same bytes.
"""

from __future__ import annotations

import csv
import hashlib
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from pipeline.capture_format import dumps_record, make_record

START = datetime(2026, 11, 16, 8, 0, tzinfo=UTC)
PLANTED_COLUMNS = ("request_id", "cause", "detail", "agent", "session_id")
WORDS = (
    "cache prefix token agent tool request latency budget deploy service query index user "
    "result retry window model policy schema context history message stable volatile order "
    "invoice ticket refund customer order shipment warehouse region metric alert runbook"
).split()


@dataclass
class Agent:
    name: str
    provider: str
    host: str
    model: str
    system_kb: int
    tools: int
    breaker: str | None  # timestamp_in_system, tools_reordered, idle_gap, history_rewritten
    stream_share: float
    reasoning: bool = False


AGENTS = (
    Agent("support-bot", "deepseek", "api.deepseek.com", "deepseek-v4-flash", 6, 3, None, 0.5),
    Agent(
        "research-agent",
        "deepseek",
        "api.deepseek.com",
        "deepseek-v4-flash",
        5,
        4,
        "timestamp_in_system",
        0.7,
    ),
    Agent(
        "summariser-agent",
        "deepseek",
        "api.deepseek.com",
        "deepseek-v4-pro",
        4,
        2,
        "history_rewritten",
        0.8,
        reasoning=True,
    ),
    Agent("code-agent", "openai", "api.openai.com", "gpt-4.1-2025-04-14", 8, 8, "idle_gap", 0.6),
    Agent(
        "ops-agent",
        "openai",
        "api.openai.com",
        "gpt-4.1-mini-2025-04-14",
        5,
        6,
        "tools_reordered",
        0.5,
    ),
)


def _text(rng: random.Random, n_bytes: int) -> str:
    out: list[str] = []
    size = 0
    while size < n_bytes:
        sentence = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14))).capitalize()
        out.append(sentence + ".")
        size += len(sentence) + 2
    return " ".join(out)


def _tool(rng: random.Random, i: int) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": f"tool_{i}_{rng.choice(WORDS)}",
            "description": _text(rng, 300),
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": _text(rng, 80)},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 100},
                },
                "required": ["query"],
            },
        },
    }


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
                best = max(best, _lcp(earlier, prompt))
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
        shared = max((_lcp(u, prompt) for _, u in live), default=0)
        if shared > best and shared >= 256:
            live.append((now, prompt[:shared]))
        live.append((now, prompt))
        self.units = live

    def _live_units(self, now: datetime) -> list[tuple[datetime, bytes]]:
        return [(ts, u) for ts, u in self.units if now - ts <= timedelta(hours=6)]

    def add_unit(self, now: datetime, unit: bytes) -> None:
        self.units.append((now, unit))


def _lcp(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    lo, hi = 0, n
    while lo < hi:  # binary search on prefix equality: fast in C for long prompts
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _prompt_bytes(body: dict[str, Any]) -> tuple[bytes, int]:
    parts = [orjson.dumps(t) for t in body.get("tools", [])]
    parts += [orjson.dumps(m) for m in body["messages"]]
    return b"".join(parts), len(parts)


def _usage(
    agent: Agent, prompt: bytes, n_seg: int, read: int, out_tokens: int, reasoning: int
) -> dict[str, Any]:
    input_tokens = len(prompt) // 4 + 3 * n_seg
    read = min(read, input_tokens)
    if agent.provider == "deepseek":
        usage: dict[str, Any] = {
            "prompt_tokens": input_tokens,
            "completion_tokens": out_tokens,
            "total_tokens": input_tokens + out_tokens,
            "prompt_tokens_details": {"cached_tokens": read},
            "prompt_cache_hit_tokens": read,
            "prompt_cache_miss_tokens": input_tokens - read,
        }
        if agent.reasoning:
            usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
        return usage
    return {
        "prompt_tokens": input_tokens,
        "completion_tokens": out_tokens,
        "total_tokens": input_tokens + out_tokens,
        "prompt_tokens_details": {"cached_tokens": read, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _stream_body(
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


def _build_body(
    agent: Agent,
    system: str,
    tools: list[dict[str, Any]],
    history: list[dict[str, Any]],
    stream: bool,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": agent.model,
        "messages": [{"role": "system", "content": system}, *history],
    }
    if tools:
        body["tools"] = tools
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def write_demo(
    out: Path, *, seed: int = 7, sessions: int = 24, min_turns: int = 10, max_turns: int = 80
) -> int:
    """Write the demo capture to `out` and the planted breakers next to it; returns exchanges."""
    rng = random.Random(seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    planted_path = out.with_name(out.name.split(".")[0] + ".planted.csv")
    keys = ["sk-demo-" + hashlib.sha256(f"{seed}-{i}".encode()).hexdigest()[:32] for i in range(3)]
    caches: dict[tuple[str, str], CacheModel] = {}
    written = 0
    agent_prompts = {
        a.name: (_text(rng, a.system_kb * 1024), [_tool(rng, i) for i in range(a.tools)])
        for a in AGENTS
    }
    with (
        out.open("wb") as fh,
        planted_path.open("w", encoding="utf-8", newline="") as planted_file,
    ):
        planted = csv.writer(planted_file, lineterminator="\n")
        planted.writerow(PLANTED_COLUMNS)
        for s in range(sessions):
            agent = AGENTS[s % len(AGENTS)]
            key = keys[s % 2] if agent.provider == "openai" else keys[2]
            session_id = f"{agent.name}-{s:03d}"
            base_system, base_tools = agent_prompts[agent.name]
            tools = list(base_tools)
            turns = rng.randint(min_turns, max_turns)
            now = START + timedelta(
                days=(s * 13) % 15, hours=rng.randint(0, 9), minutes=rng.randint(0, 59)
            )
            history: list[dict[str, Any]] = [{"role": "user", "content": _text(rng, 400)}]
            cache = caches.setdefault((agent.model, key), CacheModel())
            gap_turn = turns // 2 if agent.breaker == "idle_gap" else -1
            rewrite_turn = max(4, turns // 2) if agent.breaker == "history_rewritten" else -1
            # a change planted on a refused turn also breaks the next processed turn, which is
            # compared with the last turn that wrote the cache: the answer key lists both
            pending: tuple[str, str | None] | None = None
            for turn in range(turns):
                cause: str | None = "cold_start" if turn == 0 else None
                detail: str | None = None
                if turn == gap_turn:
                    now += timedelta(minutes=rng.randint(25, 50))
                    cause, detail = "expired", "idle_gap"
                system = base_system
                if agent.breaker == "timestamp_in_system":
                    system = f"Current time: {now.isoformat(timespec='seconds')}\n" + base_system
                    if turn > 0:
                        cause, detail = "system_changed", "timestamp"
                if agent.breaker == "tools_reordered" and turn > 0 and turn % 5 == 0:
                    before = list(tools)
                    rng.shuffle(tools)
                    if tools != before:
                        cause, detail = "tools_changed", "reordered"
                if turn == rewrite_turn:
                    summary = {
                        "role": "user",
                        "content": "Summary of the conversation so far: " + _text(rng, 600),
                    }
                    history = [summary, *history[-2:]]
                    cause, detail = "history_rewritten", "summarised"
                if cause is None and pending is not None:
                    cause, detail = pending
                stream = rng.random() < agent.stream_share
                body = _build_body(agent, system, tools, history, stream)
                prompt, n_seg = _prompt_bytes(body)
                if agent.provider == "openai":
                    read = cache.openai_read(now, prompt)
                else:
                    read = cache.deepseek_read(now, prompt)
                text = _text(rng, rng.randint(120, 700))
                reasoning_text = _text(rng, rng.randint(200, 600)) if agent.reasoning else ""
                out_tokens = (len(text) + len(reasoning_text)) // 4
                usage = _usage(agent, prompt, n_seg, read, out_tokens, len(reasoning_text) // 4)
                uncached = usage["prompt_tokens"] - read
                ttft = 180.0 + uncached * 0.06 + rng.uniform(0, 120)
                rid = f"demo-{s:03d}-{turn:03d}"
                created = int(now.timestamp())
                status = 200
                cut = stream and rng.random() < 0.01
                if rng.random() < 0.01:
                    status = 429
                    resp = orjson.dumps(
                        {
                            "error": {
                                "message": "Rate limit reached, retry later",
                                "type": "rate_limit_error",
                                "param": None,
                                "code": "rate_limit_exceeded",
                            }
                        }
                    )
                    chunks = [(ttft / 3, len(resp))]
                    headers = [("content-type", "application/json")]
                elif stream:
                    resp, chunks = _stream_body(
                        agent, rid, created, text, reasoning_text, usage, cut, ttft, rng
                    )
                    headers = [("content-type", "text/event-stream; charset=utf-8")]
                else:
                    message: dict[str, Any] = {"role": "assistant", "content": text}
                    if agent.reasoning:
                        message["reasoning_content"] = reasoning_text
                    resp = orjson.dumps(
                        {
                            "id": rid,
                            "object": "chat.completion",
                            "created": created,
                            "model": agent.model,
                            "choices": [
                                {
                                    "index": 0,
                                    "message": message,
                                    "logprobs": None,
                                    "finish_reason": "stop",
                                }
                            ],
                            "usage": usage,
                        }
                    )
                    chunks = [(ttft + out_tokens * 12.0, len(resp))]
                    headers = [("content-type", "application/json")]
                end = chunks[-1][0] + 2.0
                record = make_record(
                    started_at=now,
                    method="POST",
                    url=f"https://{agent.host}/v1/chat/completions"
                    if agent.provider == "openai"
                    else f"https://{agent.host}/chat/completions",
                    request_headers=[
                        ("content-type", "application/json"),
                        ("authorization", f"Bearer {key}"),
                        ("user-agent", f"{agent.name}/1.4"),
                    ],
                    request_body=orjson.dumps(body),
                    status=status,
                    response_headers=headers,
                    response_body=resp,
                    chunks=chunks,
                    response_headers_ms=chunks[0][0] - 5.0,
                    first_byte_ms=chunks[0][0],
                    end_ms=end,
                    outcome="interrupted" if cut else None,
                    record_id=rid,
                    session_id=session_id,
                    agent=agent.name,
                    tags=["demo"],
                )
                fh.write(dumps_record(record))
                written += 1
                if cause:
                    planted.writerow([rid, cause, detail or "", agent.name, session_id])
                pending = (
                    (cause, detail) if status != 200 and cause not in (None, "cold_start") else None
                )
                if status == 200:
                    cache.write(agent.provider, now, prompt)
                    assistant: dict[str, Any] = {"role": "assistant", "content": text}
                    if agent.tools and rng.random() < 0.5:
                        call_id = f"call_{s}_{turn}"
                        tool_name = tools[rng.randrange(len(tools))]["function"]["name"]
                        assistant = {
                            "role": "assistant",
                            "content": None,
                            "tool_calls": [
                                {
                                    "id": call_id,
                                    "type": "function",
                                    "function": {
                                        "name": tool_name,
                                        "arguments": orjson.dumps(
                                            {"query": rng.choice(WORDS)}
                                        ).decode(),
                                    },
                                }
                            ],
                        }
                        history.append(assistant)
                        history.append(
                            {
                                "role": "tool",
                                "tool_call_id": call_id,
                                "content": _text(rng, rng.randint(300, 3000)),
                            }
                        )
                    else:
                        history.append(assistant)
                        history.append(
                            {"role": "user", "content": _text(rng, rng.randint(80, 500))}
                        )
                    if agent.provider == "deepseek":
                        unit_body = _build_body(agent, system, tools, history[:-1], stream)
                        cache.add_unit(now, _prompt_bytes(unit_body)[0])
                now += timedelta(seconds=rng.randint(4, 90))
    return written
