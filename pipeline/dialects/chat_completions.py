"""OpenAI Chat Completions and every server that speaks it (DeepSeek, vLLM, SGLang, OpenRouter,
Zhipu GLM, Alibaba DashScope, Groq, Moonshot).

Usage (docs/providers.md; https://platform.openai.com/docs/api-reference/chat/object,
https://api-docs.deepseek.com/guides/kv_cache):
- input_tokens = prompt_tokens, which INCLUDES cached tokens for every server here.
- cache read: DeepSeek `prompt_cache_hit_tokens` (the field its guide tells users to read), else
  `prompt_tokens_details.cached_tokens`, else Moonshot's top-level `cached_tokens` (secondary
  sources disagree on which Moonshot uses, so both are accepted). Absent everywhere -> unknown:
  vLLM/SGLang omit the field unless enabled, and vLLM omits it at 0, so absent is not 0.
- cache write: `prompt_tokens_details.cache_write_tokens` (OpenAI 2026, OpenRouter) or
  DashScope `cache_creation_input_tokens`; absent -> unknown (DeepSeek never reports writes).
- output = completion_tokens (reasoning included); reasoning = completion_tokens_details.
- reported cost: `usage.cost` from any server that sends it (OpenRouter; LiteLLM-style gateways),
  kept as reported. Only OpenRouter's has a known currency (USD), so request_costs uses only
  OpenRouter's as the cost; another server's stays in `reported_cost` and the request is priced
  from the price tables (unpriced_reason reported_cost_currency_unknown when they cannot).

Streams: usage is the LAST non-null `usage` (OpenAI: a `choices: []` chunk; DeepSeek/Zhipu: the
finish chunk that still has choices[0]); `usage: null` on earlier chunks is ignored, and so is an
all-zero placeholder that some gateways put on early chunks (seen from proxies that relay several
APIs): a usage object before the finish chunk whose prompt, completion and total counts are all 0 or
absent is not a count, so a stream cut after it has unknown usage, never 0 tokens. An in-band error
(`event: error` as Groq sends, or an `error` object inside a chunk as OpenRouter sends) makes the
outcome stream_error. A stream with neither `[DONE]` nor a finish_reason nor usage ended early:
interrupted, usage unknown.

Extended retention: `prompt_cache_retention: "24h"` (OpenAI; `in_memory` is the default) is
recorded as `cache_ttls = ["24h"]`, so expected_cache gives the request the rule's extended
lifetime (24 h) instead of the in-memory one. The Responses dialect does the same.

Prompt order assumed for segments: tool definitions, then the response_format schema, then the
messages in order. OpenAI does not document where tools sit in the rendered prompt; it says tools
and the schema are part of the cached prefix, so they are placed before the messages.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

import orjson

from pipeline.dialects.common import (
    as_str,
    compact,
    error_fields,
    http_error,
    loads_lenient,
)
from pipeline.dialects.fields import DialectMap, first, never, read_usage, src
from pipeline.records import RequestInfo, ResponseInfo, SegmentRaw, Usage
from pipeline.redact import cut
from pipeline.streams import (
    is_plain_data_stream,
    is_stream_body,
    iter_sse,
    plain_frame_at,
    plain_frame_starts_reversed,
)

API = "chat_completions"

USAGE_MAP = DialectMap(
    api=API,
    title="OpenAI Chat Completions and compatible servers (DeepSeek, vLLM, SGLang, OpenRouter, "
    "Zhipu, DashScope, Groq, Moonshot)",
    usage_at="`usage` of the body; streamed: the LAST non-null `usage` of any chunk "
    "(OpenAI: a `choices: []` chunk; DeepSeek/Zhipu: the finish chunk)",
    semantics="openai_inclusive",
    columns={
        "input_tokens": first(src("prompt_tokens"), note="Includes cached tokens."),
        "cache_read_tokens": first(
            src("prompt_cache_hit_tokens"),
            src("prompt_tokens_details.cached_tokens"),
            src("cached_tokens"),
            note="DeepSeek's hit field first (usage_semantics = deepseek_hit_miss); Moonshot's "
            "top-level field last (unconfirmed which one it sends, so both are accepted). "
            "vLLM/SGLang omit it unless enabled: absent is unknown, not 0",
        ),
        "cache_write_tokens": first(
            src("prompt_tokens_details.cache_write_tokens"),
            src("prompt_tokens_details.cache_creation_input_tokens"),
            src("cache_creation_input_tokens"),
            note="OpenAI 2026 / OpenRouter, then DashScope (nested, as its responses carry it; "
            "top-level accepted too, unconfirmed). DeepSeek never reports writes",
        ),
        "cache_write_1h_tokens": never("No TTL split in this dialect"),
        "output_tokens": first(src("completion_tokens"), note="Includes reasoning."),
        "reasoning_tokens": first(src("completion_tokens_details.reasoning_tokens")),
        "reported_cost": first(
            src("cost"),
            note="Any server that sends it, as reported. Its currency is known only for "
            "OpenRouter (USD), so request_costs uses only OpenRouter's as the cost; another "
            "server's (a gateway) is priced from the tables instead",
            real=True,
        ),
        "audio_input_tokens": first(
            src("prompt_tokens_details.audio_tokens"), note="Inside prompt_tokens"
        ),
        "audio_cache_read_tokens": first(
            src("prompt_tokens_details.cached_tokens_details.audio_tokens"),
            note="Inside cached_tokens (sent by the Realtime models)",
        ),
        "audio_output_tokens": first(
            src("completion_tokens_details.audio_tokens"),
            note="Inside completion_tokens (gpt-audio: spoken answers, priced above text)",
        ),
    },
    notes=(
        "DeepSeek: prompt_tokens = prompt_cache_hit_tokens + prompt_cache_miss_tokens, so "
        "uncached_input_tokens equals prompt_cache_miss_tokens.",
        "An `error` object inside an HTTP-200 body or chunk (OpenRouter) or an `event: error` "
        "(Groq) makes the outcome stream_error; usage sent alongside is kept.",
        "A stream with neither `[DONE]`, a finish_reason nor usage is `interrupted`, usage NULL.",
        "A `usage` before the finish chunk with prompt, completion and total counts all 0 or "
        "absent is a gateway placeholder, not a count: it is skipped when choosing the last "
        "usage, so a stream that reports nothing else has unknown usage, not 0.",
        "A cut stream whose last usage came before the finish chunk (running totals, vLLM "
        "`continuous_usage_stats`) keeps the prompt counts; output and reasoning are NULL.",
    ),
)


_SYSTEM_ROLES = ("system", "developer")


def parse_request(body: Any, url: str = "") -> RequestInfo:
    request, kinds, roles, data = request_columns(body, url)
    request.segments = list(map(SegmentRaw, kinds, roles, data))
    return request


def request_columns(
    body: Any, url: str = ""
) -> tuple[RequestInfo, list[str], list[str | None], list[bytes]]:
    """`parse_request` with the segments as columns (kinds, roles, exact bytes) and left out of
    the RequestInfo: agent requests carry tens of messages, and ingest wants columns, so no
    object per segment is built (that cost as much as serialising the segment)."""
    tools = body.get("tools") or body.get("functions") or []
    data = list(map(compact, tools))
    kinds = ["tool"] * len(data)
    roles: list[str | None] = [None] * len(data)
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        data.append(compact(fmt))
        kinds.append("schema")
        roles.append(None)
    messages = body.get("messages") or []
    data += map(compact, messages)
    for message in messages:
        role = message.get("role") if isinstance(message, dict) else None
        kinds.append("system" if role in _SYSTEM_ROLES else "message")
        roles.append(role if isinstance(role, str) else None)
    stream = body.get("stream")
    request = RequestInfo(
        model=as_str(body.get("model")),
        stream=bool(stream) if stream is not None else False,
        segments=[],
        cache_ttls=retention_ttls(body),
    )
    return request, kinds, roles, data


def retention_ttls(body: Any) -> list[str]:
    """`["24h"]` when the request asked OpenAI for extended prompt-cache retention
    (`prompt_cache_retention: "24h"`), else none: the in-memory default is not recorded. Goes
    to `cache_ttls`, where expected_cache reads it to choose the rule's extended lifetime."""
    return ["24h"] if body.get("prompt_cache_retention") == "24h" else []


def normalise_usage(raw: Any, provider: str = "") -> Usage | None:
    if not isinstance(raw, dict):
        return None
    hit_miss = "prompt_cache_hit_tokens" in raw
    return read_usage(raw, USAGE_MAP, "deepseek_hit_miss" if hit_miss else None)


_PLACEHOLDER_COUNTS = ("prompt_tokens", "completion_tokens", "total_tokens")


def _is_placeholder(raw: Any) -> bool:
    """A usage object with no count in it: prompt, completion and total all 0 or absent. Some
    gateways put one on early chunks (seen from proxies that relay several APIs); before the finish
    chunk it is not a usage report. (After it, it is what the server reported as final.)"""
    return isinstance(raw, dict) and not any(raw.get(key) for key in _PLACEHOLDER_COUNTS)


def _message_text(choice: dict[str, Any]) -> tuple[bool, bool]:
    message = choice.get("message") or choice.get("delta") or {}
    if not isinstance(message, dict):
        return False, False
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    # A refusal is the answer text of a refused request (`delta.refusal` / `message.refusal`,
    # content null), as `response.refusal.delta` is in the Responses dialect.
    content = message.get("content") or message.get("refusal")
    has_tool = bool(message.get("tool_calls")) or bool(message.get("function_call"))
    return bool(reasoning), bool(content) or has_tool


def parse_response(
    status: int,
    body: bytes,
    provider: str,
    stream: bool,
    headers: list[tuple[str, str]] | None = None,
) -> ResponseInfo:
    if status >= 400:
        return http_error(body)
    if is_stream_body(body, stream):
        return _parse_stream(body, provider)
    obj = loads_lenient(body)
    if not isinstance(obj, dict):
        raise ValueError("response body is not a JSON object")
    if "error" in obj and "choices" not in obj:
        etype, message = error_fields(obj)
        return ResponseInfo(
            "stream_error",
            normalise_usage(obj.get("usage"), provider),
            error_type=etype,
            error_message=message,
        )
    choices = obj.get("choices") or []
    head = choices[0] if choices and isinstance(choices[0], dict) else {}
    has_reasoning, has_text = _message_text(head)
    end = len(body)
    return ResponseInfo(
        outcome="ok",
        usage=normalise_usage(obj.get("usage"), provider),
        model=as_str(obj.get("model")),
        finish_reason=as_str(head.get("finish_reason")),
        first_reasoning_at=end if has_reasoning else None,
        first_text_at=end if has_text else None,
    )


def _choices(chunk: dict[str, Any]) -> list[dict[str, Any]]:
    """The chunk's choices that are objects; anything but a list holds none (a malformed
    `choices` costs that chunk, not the whole record)."""
    choices = chunk.get("choices")
    if not isinstance(choices, list):
        return []
    return [c for c in choices if isinstance(c, dict)]


def _finish_of(chunk: dict[str, Any]) -> tuple[bool, str | None]:
    """(a choice has a truthy finish_reason, the value as the reader keeps it: the last one)."""
    found, value = False, None
    for choice in _choices(chunk):
        if choice.get("finish_reason"):
            found, value = True, as_str(choice["finish_reason"])
    return found, value


def _parse_stream(body: bytes, provider: str) -> ResponseInfo:
    fast = _parse_plain_stream(body, provider)
    return fast if fast is not None else _parse_any_stream(body, provider)


def _parse_any_stream(body: bytes, provider: str) -> ResponseInfo:
    """The reference reader: every event framed and decoded, in order."""
    usage_raw: Any = None
    model: str | None = None
    finish: str | None = None
    done = False
    first_reasoning: int | None = None
    first_text: int | None = None
    error_type: str | None = None
    error_message: str | None = None
    errored = False
    usage_final = False  # usage seen on or after the finish chunk
    for event in iter_sse(body):
        data = event.data.strip()
        if data == b"[DONE]":
            done = True
            continue
        if not data:
            continue
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            if event.event == "error":
                errored = True
                error_type, error_message = "error", cut(data, 200).decode("utf-8", "replace")
            continue
        if not isinstance(chunk, dict):
            continue
        if event.event == "error" or chunk.get("error") is not None:
            errored = True
            error_type, error_message = error_fields(chunk)
            error_type = error_type or "error"
        if chunk.get("usage") is not None:
            final = finish is not None or _finish_of(chunk)[0]
            # Rulebook 8.4: the last non-null usage, an early zero placeholder not counting.
            if final or not _is_placeholder(chunk["usage"]):
                usage_raw, usage_final = chunk["usage"], final
        if isinstance(chunk.get("model"), str):
            model = chunk["model"]
        for choice in _choices(chunk):
            reasoning, text = _message_text(choice)
            if reasoning and first_reasoning is None:
                first_reasoning = event.end
            if text and first_text is None:
                first_text = event.end
            if choice.get("finish_reason"):
                finish = as_str(choice["finish_reason"])
    usage = normalise_usage(usage_raw, provider)
    if errored:
        outcome = "stream_error"
    elif not done and not usage_final:
        outcome = "interrupted"
        if usage is not None:  # running totals of a cut stream: output not final
            usage.output_tokens = usage.reasoning_tokens = None
    else:
        outcome = "ok"
    return ResponseInfo(
        outcome=outcome,
        usage=usage,
        model=model,
        error_type=error_type,
        error_message=error_message,
        finish_reason=finish,
        first_reasoning_at=first_reasoning,
        first_text_at=first_text,
    )


# --- the same result from a few events (plain streams) -----------------------------------------
#
# `_parse_any_stream` decodes every event, but its result depends on few of them: the last one
# with a non-null `usage` that is not an early placeholder (`_is_placeholder`), the last with a
# truthy `finish_reason` (and the last such before the usage one), the first with reasoning, the
# first with answer text (content or refusal) or a tool call, the last with a string `model`,
# and whether a `[DONE]` event came. On a plain data stream
# (`is_plain_data_stream`) each is found by searching the body for its key and decoding only the
# event around a hit, then judging that event with the same per-chunk rules. A hit is only a
# candidate (the key may be nested, or sit in an event that is not JSON): a candidate that does
# not qualify is passed over and the search goes on, so a search may over-match but must never
# miss. Searches pass over only values that cannot count (null, false, "", [], {}). Bodies where
# a search could miss, or where the reference reader does more than read these keys, go to the
# reference reader: any `"error"` (in-band errors), and a key letter written as a `\u00XX`
# escape, which a byte search cannot see.
_COUNTS = rb"\s*+:\s*+(?!null|false|\"\"|\[\s*+\]|\{\s*+\})"
_USAGE_KEY = re.compile(rb'"usage"\s*+:\s*+(?!null)')
_FINISH_KEY = re.compile(rb'"finish_reason"' + _COUNTS)
_TEXT_KEYS = tuple(
    (key, re.compile(key + _COUNTS))
    for key in (b'"content"', b'"refusal"', b'"tool_calls"', b'"function_call"')
)
_REASONING_KEYS = tuple(
    (key, re.compile(key + _COUNTS)) for key in (b'"reasoning_content"', b'"reasoning"')
)
_ESCAPED_KEY_LETTER = re.compile(rb"\\u00(?:[46][1-9a-fA-F]|[57][0-9aA]|5[fF])")
_SKIPPED: dict[str, Any] = {}  # an event the reference reader skips: [DONE], empty, not an object


class _PlainEvents:
    """The events of a plain data stream, each decoded on demand and at most once."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.decoded: dict[int, tuple[dict[str, Any], int]] = {}

    def at(self, pos: int) -> tuple[int, dict[str, Any], int]:
        """(start, chunk or `_SKIPPED`, end offset) of the event holding byte `pos`."""
        sep = self.body.rfind(b"\n\n", 0, pos)
        start = 0 if sep < 0 else sep + 2
        known = self.decoded.get(start)
        if known is not None:
            return start, known[0], known[1]
        _, data, end = plain_frame_at(self.body, start)
        chunk: Any = _SKIPPED
        if data and data != b"[DONE]":
            with contextlib.suppress(orjson.JSONDecodeError):
                chunk = orjson.loads(data)
            if not isinstance(chunk, dict):
                chunk = _SKIPPED
        self.decoded[start] = (chunk, end)
        return start, chunk, end

    def last(self, key: bytes, pattern: re.Pattern[bytes], before: int) -> Iterator[int]:
        """Offsets of `key` hits whose value may count, last first, below `before`."""
        pos = before
        while (pos := self.body.rfind(key, 0, pos)) >= 0:
            if pattern.match(self.body, pos):
                yield pos

    def first(self, keys: tuple[tuple[bytes, re.Pattern[bytes]], ...], flag: int) -> int | None:
        """End offset of the first event where a choice has `_message_text(choice)[flag]`."""
        body, found = self.body, None
        for key, pattern in keys:  # each key's first qualifying event; the earliest wins
            limit = len(body) if found is None else found
            pos = body.find(key, 0, limit)  # a literal scan is 2x faster than a pattern scan
            while pos >= 0 and (hit := pattern.search(body, pos, limit)) is not None:
                _, chunk, end = self.at(hit.start())
                if any(_message_text(c)[flag] for c in _choices(chunk)):
                    found = end
                    break
                pos = end
        return found

    def last_finish(self, before: int) -> str | None:
        """The reference reader's `finish` after every event that starts before `before`."""
        seen = -1
        for pos in self.last(b'"finish_reason"', _FINISH_KEY, len(self.body)):
            start, chunk, _ = self.at(pos)
            if start < before and start != seen:
                found, value = _finish_of(chunk)
                if found:
                    return value
                seen = start
        return None

    def done(self) -> bool:
        body = self.body
        pos = len(body)
        while (pos := body.rfind(b"[DONE]", 0, pos)) >= 0:
            if plain_frame_at(body, pos)[1] == b"[DONE]":
                return True
        return False


def _parse_plain_stream(body: bytes, provider: str) -> ResponseInfo | None:
    """What `_parse_any_stream` returns, read from a few events; None when the body is not a
    plain data stream or may need the reference reader (see above)."""
    if (
        not is_plain_data_stream(body)
        or b'"error"' in body
        # (a lone backslash is found by memchr, 20x faster than the four-byte search)
        or (b"\\" in body and b"\\u00" in body and _ESCAPED_KEY_LETTER.search(body))
    ):
        return None
    events = _PlainEvents(body)
    usage_raw: Any = None
    usage_final = False
    for pos in events.last(b'"usage"', _USAGE_KEY, len(body)):
        start, chunk, _ = events.at(pos)
        if chunk.get("usage") is not None:
            final = _finish_of(chunk)[0] or events.last_finish(start) is not None
            if final or not _is_placeholder(chunk["usage"]):  # as the reference reader does
                usage_raw, usage_final = chunk["usage"], final
                break
    model: str | None = None
    if b'"model"' in body:
        for start in plain_frame_starts_reversed(body):
            chunk = events.at(start)[1]
            if isinstance(chunk.get("model"), str):
                model = chunk["model"]
                break
    usage = normalise_usage(usage_raw, provider)
    outcome = "ok"
    if not events.done() and not usage_final:
        outcome = "interrupted"
        if usage is not None:  # running totals of a cut stream: output not final
            usage.output_tokens = usage.reasoning_tokens = None
    return ResponseInfo(
        outcome=outcome,
        usage=usage,
        model=model,
        finish_reason=events.last_finish(len(body) + 1),
        # Most streams have no reasoning: one literal scan instead of two pattern scans.
        first_reasoning_at=events.first(_REASONING_KEYS, 0) if b'"reasoning' in body else None,
        first_text_at=events.first(_TEXT_KEYS, 1),
    )
