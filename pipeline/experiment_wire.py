"""What the prefix-cache experiment (pipeline/experiment.py) sends, and how it sends one request.

The request bodies of its two APIs (OpenAI-style chat completions and Anthropic messages) with
the fixed system prompt and tool, the headers that carry the key, and one streamed POST timed
to its first byte while its SSE events are read for the answer's text and tool call (the tool
round's follow-up needs them). Kept apart from the plan and the run, which decide what to send
and when.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx
import orjson

from pipeline import providers
from pipeline.errors import UsageError
from pipeline.records import ResponseInfo

if TYPE_CHECKING:
    from pipeline.experiment import ExperimentConfig

CHAT, MESSAGES = "chat_completions", "messages"

# --- building requests ---------------------------------------------------------------------------

SYSTEM_PROMPT = (
    "You answer questions about the document the user sends. Answer in at most two sentences."
    " Use the lookup_glossary tool only when you are told to."
)
TOOL_NAME = "lookup_glossary"
TOOL_DESCRIPTION = "Look up a term in the document's glossary."
TOOL_PARAMETERS = {
    "type": "object",
    "properties": {"query": {"type": "string", "description": "The term to look up."}},
    "required": ["query"],
}
TOOL_RESULT = '{"result": "No glossary entry found for that term."}'


def api_for(base_url: str, api: str | None) -> str:
    if api:
        if api not in (CHAT, MESSAGES):
            raise UsageError(f"unknown --api {api!r}", hint=f"{CHAT} or {MESSAGES}")
        return api
    return MESSAGES if "anthropic" in (urlsplit(base_url).hostname or "") else CHAT


def endpoint(base_url: str, api: str) -> str:
    base = base_url.rstrip("/")
    if api == MESSAGES:
        return base + ("/messages" if base.endswith("/v1") else "/v1/messages")
    return base + "/chat/completions"


def headers_for(api: str, key: str | None) -> dict[str, str]:
    headers = {"content-type": "application/json"}
    if api == MESSAGES:
        headers["anthropic-version"] = "2023-06-01"
        if key:
            headers["x-api-key"] = key
    elif key:
        headers["authorization"] = f"Bearer {key}"
    return headers


@dataclass(slots=True)
class Turn:
    """What an answer added to the conversation, for the tool round's second request."""

    text: str = ""
    tool_id: str | None = None
    tool_name: str | None = None
    tool_arguments: str = ""


def chat_body(
    cfg: ExperimentConfig, document: str, question: str, turn: Turn | None, force: bool
) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": document},
        {"role": "user", "content": question},
    ]
    if turn is not None:
        call = {
            "id": turn.tool_id,
            "type": "function",
            "function": {"name": turn.tool_name, "arguments": turn.tool_arguments},
        }
        messages.append({"role": "assistant", "content": turn.text or None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": turn.tool_id, "content": TOOL_RESULT})
    tool = {
        "type": "function",
        "function": {
            "name": TOOL_NAME,
            "description": TOOL_DESCRIPTION,
            "parameters": TOOL_PARAMETERS,
        },
    }
    body: dict[str, Any] = {
        "model": cfg.model,
        "messages": messages,
        "tools": [tool],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    # OpenAI's newer models refuse max_tokens; everyone else documents it.
    host = urlsplit(cfg.base_url).hostname or ""
    body["max_completion_tokens" if host.endswith("openai.com") else "max_tokens"] = cfg.max_tokens
    if force:
        body["tool_choice"] = {"type": "function", "function": {"name": TOOL_NAME}}
    return body


def messages_body(
    cfg: ExperimentConfig, document: str, question: str, turn: Turn | None, force: bool
) -> dict[str, Any]:
    """Breakpoints on the system prompt, the document and the last block (3 of the 4 allowed)."""
    ephemeral = {"type": "ephemeral"}
    last: dict[str, Any] = {"type": "text", "text": question}
    messages: list[dict[str, Any]] = [
        {
            "role": "user",
            "content": [{"type": "text", "text": document, "cache_control": ephemeral}, last],
        }
    ]
    if turn is not None:
        use: dict[str, Any] = {
            "type": "tool_use",
            "id": turn.tool_id,
            "name": turn.tool_name,
            "input": orjson.loads(turn.tool_arguments or "{}"),
        }
        assistant = ([{"type": "text", "text": turn.text}] if turn.text else []) + [use]
        messages.append({"role": "assistant", "content": assistant})
        last = {"type": "tool_result", "tool_use_id": turn.tool_id, "content": TOOL_RESULT}
        messages.append({"role": "user", "content": [last]})
    last["cache_control"] = ephemeral
    body: dict[str, Any] = {
        "model": cfg.model,
        "max_tokens": cfg.max_tokens,
        "system": [{"type": "text", "text": SYSTEM_PROMPT, "cache_control": ephemeral}],
        "tools": [
            {"name": TOOL_NAME, "description": TOOL_DESCRIPTION, "input_schema": TOOL_PARAMETERS}
        ],
        "messages": messages,
        "stream": True,
    }
    if force:
        body["tool_choice"] = {"type": "tool", "name": TOOL_NAME}
    return body


# --- sending one request -------------------------------------------------------------------------


class StreamWatch:
    """Reads SSE events as they arrive: when the first answer text came, and what the answer
    added to the conversation (text, tool call), for the tool round's follow-up."""

    def __init__(self, api: str) -> None:
        self.api = api
        self.turn = Turn()
        self.first_text_ms: float | None = None
        self._buf = b""

    def feed(self, data: bytes, now_ms: float) -> None:
        self._buf += data
        while True:
            self._buf = self._buf.replace(b"\r\n", b"\n")
            head, sep, rest = self._buf.partition(b"\n\n")
            if not sep:
                return
            self._buf = rest
            payload = b"".join(
                line[5:].strip() for line in head.split(b"\n") if line.startswith(b"data:")
            )
            if payload and payload != b"[DONE]":
                try:
                    event = orjson.loads(payload)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(event, dict):
                    self._event(event, now_ms)

    def _text(self, text: Any, now_ms: float) -> None:
        if isinstance(text, str) and text:
            self.turn.text += text
            if self.first_text_ms is None:
                self.first_text_ms = now_ms

    def _event(self, event: dict[str, Any], now_ms: float) -> None:
        turn = self.turn
        if self.api == MESSAGES:
            block = event.get("content_block") or {}
            delta = event.get("delta") or {}
            if block.get("type") == "tool_use":
                turn.tool_id, turn.tool_name = block.get("id"), block.get("name")
            elif delta.get("type") == "text_delta":
                self._text(delta.get("text"), now_ms)
            elif delta.get("type") == "input_json_delta":
                turn.tool_arguments += str(delta.get("partial_json") or "")
            return
        for choice in event.get("choices") or []:
            delta = (choice or {}).get("delta") or {}
            self._text(delta.get("content"), now_ms)
            for call in delta.get("tool_calls") or []:
                function = call.get("function") or {}
                turn.tool_id = call.get("id") or turn.tool_id
                turn.tool_name = function.get("name") or turn.tool_name
                turn.tool_arguments += str(function.get("arguments") or "")


def response_info(api: str, status: int, body: bytes, host: str) -> ResponseInfo:
    from pipeline.dialects import DIALECTS

    try:
        info: ResponseInfo = DIALECTS[api].parse_response(status, body, host, True)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return ResponseInfo("stream_error", None, error_message=f"unreadable response: {exc}")
    return info


@dataclass(slots=True)
class Sent:
    status: int | None
    info: ResponseInfo
    watch: StreamWatch
    ttfb_ms: float | None
    duration_ms: float
    server: str | None
    error: str | None


def send(client: httpx.Client, url: str, api: str, headers: dict[str, str], body: bytes) -> Sent:
    watch = StreamWatch(api)
    t0 = time.perf_counter()
    ttfb: float | None = None
    received = bytearray()
    status: int | None = None
    server: str | None = None
    try:
        with client.stream("POST", url, content=body, headers=headers) as response:
            status = response.status_code
            server = response.headers.get(providers.SIMULATOR_HEADER) or response.headers.get(
                "server"
            )
            for data in response.iter_bytes():
                now = (time.perf_counter() - t0) * 1000
                ttfb = now if ttfb is None else ttfb
                received += data
                watch.feed(data, now)
    except httpx.HTTPError as exc:
        duration = (time.perf_counter() - t0) * 1000
        state = "interrupted" if status is not None else "network_error"
        info = ResponseInfo(state, None, error_message=str(exc))
        return Sent(status, info, watch, ttfb, duration, server, f"{type(exc).__name__}: {exc}")
    duration = (time.perf_counter() - t0) * 1000
    info = response_info(api, status, bytes(received), urlsplit(url).hostname or "")
    return Sent(status, info, watch, ttfb, duration, server, info.error_message)
