"""The loopback provider simulator: an ASGI app speaking Chat Completions (DeepSeek or OpenAI
cache rules) and Anthropic Messages (Anthropic rules). No inference happens; every response
names the simulator (header `x-cacheaudit-simulator`, `server`, id prefix, system fingerprint
and the answer text), so a capture of it is never taken for a real provider.

Latency is modelled so that cache hits are visible in timings: the first chunk waits
`base_latency_ms + prefill_ms_per_1k * uncached_tokens / 1000`, then one chunk per
`chunk_ms`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from pipeline.providers import SIMULATOR_HEADER
from pipeline.simulate import answers, rules
from pipeline.simulate.cache import AnthropicCache, DeepSeekCache, DeepSeekSettings, OpenAICache
from pipeline.simulate.tokens import assistant_body, render_chat, render_messages, tokenize

RULES = ("deepseek", "openai", "anthropic")


@dataclass(slots=True)
class SimulatorSettings:
    rules: str = "deepseek"
    deepseek: DeepSeekSettings = field(default_factory=DeepSeekSettings)
    anthropic_min_tokens: int | None = None  # None: by model name (rules.ANTHROPIC_MIN_TOKENS)
    base_latency_ms: float = 20.0
    prefill_ms_per_1k: float = 40.0
    chunk_ms: float = 2.0
    chunk_tokens: int = 4


class _BadRequest(Exception):
    pass


def _dumps(obj: Any) -> bytes:
    return orjson.dumps(obj)


def _namespace(request: Request, model: str) -> str:
    """Caches are per account and model; the key is hashed in memory and never stored."""
    key = (
        request.headers.get("authorization")
        or request.headers.get("x-api-key")
        or request.headers.get("api-key")
        or ""
    )
    return hashlib.sha256(key.encode()).hexdigest()[:16] + "/" + model


class Simulator:
    def __init__(
        self, settings: SimulatorSettings | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.settings = settings or SimulatorSettings()
        if self.settings.rules not in RULES:
            raise ValueError(f"unknown rules {self.settings.rules!r}")
        self.clock = clock
        self.deepseek = DeepSeekCache(self.settings.deepseek)
        self.openai = OpenAICache()
        self.anthropic = AnthropicCache()
        self.headers = {
            "server": answers.SIMULATOR_NAME,
            SIMULATOR_HEADER: (
                f"{answers.SIMULATOR_NAME}; rules={self.settings.rules}; no inference"
            ),
        }

    # --- plumbing ---------------------------------------------------------------------------

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/", self.identity, methods=["GET"]),
                Route("/v1/models", self.identity, methods=["GET"]),
                Route("/models", self.identity, methods=["GET"]),
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/chat/completions", self.chat, methods=["POST"]),
                Route("/v1/messages", self.messages, methods=["POST"]),
            ]
        )

    def _json(self, obj: Any, status: int = 200) -> Response:
        return Response(_dumps(obj), status, self.headers, "application/json")

    def _stream(self, events: AsyncIterator[bytes]) -> StreamingResponse:
        return StreamingResponse(events, 200, self.headers, "text/event-stream")

    def _chat_error(self, status: int, message: str) -> Response:
        err = {"message": f"{message} ({answers.SIMULATOR_NAME})", "type": "invalid_request_error"}
        return self._json({"error": {**err, "param": None, "code": None}}, status)

    def _anthropic_error(self, status: int, kind: str, message: str) -> Response:
        err = {"type": kind, "message": f"{message} ({answers.SIMULATOR_NAME})"}
        return self._json({"type": "error", "error": err, "request_id": "sim"}, status)

    async def identity(self, request: Request) -> Response:
        return self._json(
            {
                "object": "list",
                "simulator": answers.SIMULATOR_NAME,
                "rules": self.settings.rules,
                "note": "cacheaudit provider simulator: no inference, cache rules only",
                "data": [],
            }
        )

    async def _body(self, request: Request) -> dict[str, Any]:
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError as exc:
            raise _BadRequest(f"body is not JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise _BadRequest("body is not a JSON object")
        if not isinstance(body.get("model"), str):
            raise _BadRequest("`model` is required")
        return body

    def _first_chunk_delay(self, uncached: int) -> float:
        s = self.settings
        return (s.base_latency_ms + s.prefill_ms_per_1k * uncached / 1000) / 1000

    def _pieces(self, text: str) -> list[str]:
        tokens = tokenize(text)
        n = max(1, self.settings.chunk_tokens)
        return ["".join(tokens[i : i + n]) for i in range(0, len(tokens), n)] or [""]

    # --- Chat Completions -------------------------------------------------------------------

    async def chat(self, request: Request) -> Response:
        if self.settings.rules == "anthropic":
            return self._chat_error(404, "this simulator runs anthropic rules: use /v1/messages")
        try:
            body = await self._body(request)
        except _BadRequest as exc:
            return self._chat_error(400, str(exc))
        model = str(body["model"])
        messages = body.get("messages") or []
        tokens = render_chat(body)
        namespace = _namespace(request, model)
        now = self.clock()
        if self.settings.rules == "deepseek":
            cached = self.deepseek.request(namespace, tokens, now)
            usage_of: Callable[[int], dict[str, Any]] = lambda out: answers.deepseek_usage(  # noqa: E731
                len(tokens), cached, out
            )
        else:
            ttl = rules.OPENAI_TTL_IN_MEMORY_S
            if body.get("prompt_cache_retention") == "24h":
                ttl = rules.OPENAI_TTL_24H_S
            cached = self.openai.request(namespace, tokens, now, ttl)
            usage_of = lambda out: answers.openai_usage(len(tokens), cached, out)  # noqa: E731
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
        forced = answers.chat_tool_forced(body)
        answer = (
            answers.tool_answer(messages, forced)
            if forced
            else answers.text_answer(messages, int(max_tokens) if max_tokens else None)
        )
        call_id = f"call_sim_{uuid.uuid4().hex[:12]}"
        calls = (
            [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": answer.tool_name, "arguments": answer.tool_arguments},
                }
            ]
            if answer.is_tool_call
            else None
        )
        finish = "tool_calls" if calls else ("length" if answer.truncated else "stop")
        usage = usage_of(answer.output_tokens)
        completion_id = ("" if self.settings.rules == "deepseek" else "chatcmpl-") + (
            f"sim-{uuid.uuid4()}"
        )
        head = {
            "id": completion_id,
            "created": int(time.time()),
            "model": model,
            "system_fingerprint": answers.SIMULATOR_NAME,
        }
        delay = self._first_chunk_delay(len(tokens) - cached)

        def answered() -> None:
            if self.settings.rules == "deepseek":
                out = tokens + assistant_body(answer.text, calls)
                self.deepseek.answered(namespace, out, self.clock())

        if not body.get("stream"):
            await asyncio.sleep(delay)
            message: dict[str, Any] = {"role": "assistant", "content": answer.text}
            if calls:
                message["tool_calls"] = calls
            answered()
            return self._json(
                {
                    **head,
                    "object": "chat.completion",
                    "choices": [
                        {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
                    ],
                    "usage": usage,
                }
            )
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return self._stream(
            self._chat_events(head, answer, calls, finish, usage, include_usage, delay, answered)
        )

    async def _chat_events(
        self,
        head: dict[str, Any],
        answer: answers.Answer,
        calls: list[dict[str, Any]] | None,
        finish: str,
        usage: dict[str, Any],
        include_usage: bool,
        delay: float,
        answered: Callable[[], None],
    ) -> AsyncIterator[bytes]:
        deepseek = self.settings.rules == "deepseek"

        def chunk(delta: dict[str, Any], reason: str | None = None, **extra: Any) -> bytes:
            obj: dict[str, Any] = {
                **head,
                "object": "chat.completion.chunk",
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
                ],
            }
            if include_usage:
                obj["usage"] = None
            obj.update(extra)
            return b"data: " + _dumps(obj) + b"\n\n"

        await asyncio.sleep(delay)
        yield chunk({"role": "assistant", "content": "" if calls is None else None})
        if calls:
            call = calls[0]
            function = call["function"]
            first = {**call, "index": 0, "function": {"name": function["name"], "arguments": ""}}
            yield chunk({"tool_calls": [first]})
            for piece in self._pieces(function["arguments"]):
                await asyncio.sleep(self.settings.chunk_ms / 1000)
                yield chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
        else:
            for piece in self._pieces(answer.text or ""):
                await asyncio.sleep(self.settings.chunk_ms / 1000)
                yield chunk({"content": piece})
        answered()
        if deepseek:
            # DeepSeek puts usage on the finish chunk, which still has choices[0].
            extra = {"usage": usage} if include_usage else {}
            yield chunk({"content": ""}, finish, **extra)
        else:
            yield chunk({}, finish)
            if include_usage:
                yield chunk({}, None, choices=[], usage=usage)
        yield b"data: [DONE]\n\n"

    # --- Anthropic Messages -----------------------------------------------------------------

    async def messages(self, request: Request) -> Response:
        if self.settings.rules != "anthropic":
            return self._anthropic_error(
                404, "not_found_error", f"this simulator runs {self.settings.rules} rules"
            )
        try:
            body = await self._body(request)
            if not isinstance(body.get("max_tokens"), int):
                raise _BadRequest("max_tokens: Field required")
        except _BadRequest as exc:
            return self._anthropic_error(400, "invalid_request_error", str(exc))
        model = str(body["model"])
        prompt = render_messages(body)
        minimum = self.settings.anthropic_min_tokens or rules.anthropic_min_tokens(model)
        use = self.anthropic.request(_namespace(request, model), prompt, minimum, self.clock())
        total = len(prompt.tokens)
        forced = answers.messages_tool_forced(body)
        messages = body.get("messages") or []
        answer = (
            answers.tool_answer(messages, forced)
            if forced
            else answers.text_answer(messages, int(body["max_tokens"]))
        )
        usage = answers.anthropic_usage(
            total - use.read - use.write, use.read, use.write_5m, use.write_1h, answer.output_tokens
        )
        block: dict[str, Any]
        if answer.is_tool_call:
            block = {
                "type": "tool_use",
                "id": f"toolu_sim_{uuid.uuid4().hex[:12]}",
                "name": answer.tool_name,
                "input": orjson.loads(answer.tool_arguments or "{}"),
            }
        else:
            block = {"type": "text", "text": answer.text}
        stop = (
            "tool_use"
            if answer.is_tool_call
            else ("max_tokens" if answer.truncated else "end_turn")
        )
        message = {
            "id": f"msg_sim_{uuid.uuid4().hex[:20]}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [block],
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage,
        }
        delay = self._first_chunk_delay(total - use.read)
        if not body.get("stream"):
            await asyncio.sleep(delay)
            return self._json(message)
        return self._stream(self._anthropic_events(message, answer, delay))

    async def _anthropic_events(
        self, message: dict[str, Any], answer: answers.Answer, delay: float
    ) -> AsyncIterator[bytes]:
        def event(name: str, data: dict[str, Any]) -> bytes:
            return f"event: {name}\ndata: ".encode() + _dumps(data) + b"\n\n"

        usage = message["usage"]
        start_usage = {**usage, "output_tokens": 1}
        block = message["content"][0]
        await asyncio.sleep(delay)
        start = {**message, "content": [], "stop_reason": None, "usage": start_usage}
        yield event("message_start", {"type": "message_start", "message": start})
        if block["type"] == "tool_use":
            empty = {**block, "input": {}}
            pieces = self._pieces(answer.tool_arguments or "")
            kind, key = "input_json_delta", "partial_json"
        else:
            empty = {"type": "text", "text": ""}
            pieces = self._pieces(answer.text or "")
            kind, key = "text_delta", "text"
        yield event(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": empty},
        )
        yield event("ping", {"type": "ping"})
        for piece in pieces:
            await asyncio.sleep(self.settings.chunk_ms / 1000)
            delta = {"type": "content_block_delta", "index": 0, "delta": {"type": kind, key: piece}}
            yield event("content_block_delta", delta)
        yield event("content_block_stop", {"type": "content_block_stop", "index": 0})
        final_usage = {
            k: v for k, v in usage.items() if k not in ("cache_creation", "service_tier")
        }
        yield event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": final_usage,
            },
        )
        yield event("message_stop", {"type": "message_stop"})


# --- running it ----------------------------------------------------------------------------------


def serve(
    settings: SimulatorSettings,
    host: str,
    port: int,
    on_listening: Callable[[str], None] | None = None,
) -> None:
    """Serve until Ctrl-C. The port is bound first, so a busy port is a NetworkError (a one-line
    error) rather than uvicorn's log line; `on_listening` gets the base URL once bound."""
    import uvicorn

    from pipeline.capture.proxy import listening_socket, url_host

    sock = listening_socket(
        host, port, hint="another process may use the port; pick another with --port"
    )
    try:
        if on_listening is not None:
            on_listening(f"http://{url_host(host)}:{sock.getsockname()[1]}")
        config = uvicorn.Config(Simulator(settings).app(), log_level="warning")
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()


@contextlib.contextmanager
def running(settings: SimulatorSettings, host: str = "127.0.0.1") -> Iterator[str]:
    """Serve on a free loopback port in a background thread; yields the base URL."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(Simulator(settings).app(), log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("simulator did not start")
            time.sleep(0.01)
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
