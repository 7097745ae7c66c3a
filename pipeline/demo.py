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
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from pipeline.capture_format import dumps_record, make_record
from pipeline.demo_provider import CacheModel, prompt_bytes, stream_body, usage_of

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
                prompt, n_seg = prompt_bytes(body)
                if agent.provider == "openai":
                    read = cache.openai_read(now, prompt)
                else:
                    read = cache.deepseek_read(now, prompt)
                text = _text(rng, rng.randint(120, 700))
                reasoning_text = _text(rng, rng.randint(200, 600)) if agent.reasoning else ""
                out_tokens = (len(text) + len(reasoning_text)) // 4
                usage = usage_of(agent, prompt, n_seg, read, out_tokens, len(reasoning_text) // 4)
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
                    resp, chunks = stream_body(
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
                        cache.add_unit(now, prompt_bytes(unit_body)[0])
                now += timedelta(seconds=rng.randint(4, 90))
    return written
