"""Google Gemini `models/{model}:generateContent` and `:streamGenerateContent` (AI Studio and
Vertex AI paths).

The model comes from the URL path (`.../models/gemini-2.5-flash:streamGenerateContent`); the
response's `modelVersion`, when present, is what the `model` column shows.

Usage (docs/providers.md; https://ai.google.dev/api/generate-content#UsageMetadata), from
`usageMetadata`:
- input = `promptTokenCount`, which INCLUDES `cachedContentTokenCount`;
- output = `candidatesTokenCount` + `thoughtsTokenCount`: thoughts are billed as output but
  are NOT inside candidatesTokenCount; reasoning = thoughtsTokenCount;
- proto3 JSON omits zero-valued fields, so a count missing from a PRESENT usageMetadata is 0,
  while a missing usageMetadata is unknown (NULL). A usageMetadata with neither
  `promptTokenCount` nor `totalTokenCount` (Vertex sends `{"trafficType": "ON_DEMAND"}` on
  every frame but the last) is no usage report at all: it is skipped, never read as 0 tokens;
- Gemini reports no cache writes (explicit caches are created by a separate cachedContents
  call), so cache_write is NULL;
- `toolUsePromptTokenCount`, the prompts of server-side tools (search grounding, URL context),
  is not inside promptTokenCount and is billed as input: input adds it (tool_prompt_tokens
  keeps it apart); audio input and audio cache reads come from the AUDIO entries of
  `promptTokensDetails` / `toolUsePromptTokensDetails` and `cacheTokensDetails`.

Streams: with `?alt=sse`, SSE events separated by `\\r\\n\\r\\n`; without it, one JSON array of the
same objects. Every chunk carries RUNNING totals that can even go down (promptTokenCount 15 in early
chunks, 13 in the last, in a real Gemini 2.0 stream), so the LAST usage report is taken, never a sum
or a max, and only when it is final: on the chunk with the `finishReason` or after it. Counts from
an earlier chunk are not final, prompt side included, so a stream whose last usage report came
before its finish chunk (cut, ended by an error, or a finish chunk without usageMetadata) has
unknown usage (NULL), not the running totals. A stream with no `finishReason` was cut (interrupted).
An `error` object in a chunk, or a bare JSON error body after the last SSE event (Vertex ends a 200
stream that way), makes it a stream_error.

Prompt order for segments (not documented by Google, ASSUMED): `cachedContent` (the explicit
cache is the prefix), then tools, then `systemInstruction`, then `contents` in order.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit

from pipeline.dialects.common import as_str, error_fields, http_error, loads_lenient, segment
from pipeline.dialects.fields import DialectMap, first, never, read_usage, src, total
from pipeline.records import RequestInfo, ResponseInfo, SegmentRaw, Usage
from pipeline.streams import is_stream_body, iter_json_array, iter_sse_json, trailing_json

API = "generate_content"

USAGE_MAP = DialectMap(
    api=API,
    title="Google Gemini generateContent / streamGenerateContent",
    usage_at="`usageMetadata` of the response; streamed (SSE or JSON array): the LAST "
    "`usageMetadata` holding counts, if it came on or after the `finishReason` chunk (earlier "
    "ones are running totals: never summed, and not final)",
    semantics="gemini_inclusive",
    columns={
        "input_tokens": total(
            src("promptTokenCount", "zero"),
            src("toolUsePromptTokenCount", "zero"),
            note="promptTokenCount includes cachedContentTokenCount; the server-side tools' "
            "prompts are billed as input too",
        ),
        "cache_read_tokens": first(src("cachedContentTokenCount", "zero")),
        "cache_write_tokens": never("Gemini does not report cache writes"),
        "cache_write_1h_tokens": never("No TTL split"),
        "output_tokens": total(
            src("candidatesTokenCount", "zero"),
            src("thoughtsTokenCount", "zero"),
            note="Thoughts are output but not inside candidatesTokenCount",
        ),
        "reasoning_tokens": first(src("thoughtsTokenCount", "zero")),
        "reported_cost": never("Google returns no cost"),
        "tool_prompt_tokens": first(src("toolUsePromptTokenCount", "zero")),
        "audio_input_tokens": total(
            src("promptTokensDetails.[modality=AUDIO].tokenCount", "zero"),
            src("toolUsePromptTokensDetails.[modality=AUDIO].tokenCount", "zero"),
            note="0 when no AUDIO entry is listed",
        ),
        "audio_cache_read_tokens": first(
            src("cacheTokensDetails.[modality=AUDIO].tokenCount", "zero")
        ),
        "audio_output_tokens": first(
            src("candidatesTokensDetails.[modality=AUDIO].tokenCount", "zero"),
            note="Inside candidatesTokenCount (native-audio and speech models)",
        ),
    },
    notes=(
        "proto3 JSON omits zero counts: a field missing from a present usageMetadata is 0; a "
        "missing usageMetadata leaves every column NULL, and so does one with neither "
        '`promptTokenCount` nor `totalTokenCount` (Vertex\'s `{"trafficType": "ON_DEMAND"}` '
        "frames): it is no usage report and is skipped when choosing the last one.",
        "Streamed: counts can change until the last chunk (promptTokenCount can even drop), so "
        "usage reported only before the `finishReason` chunk (a cut stream, one ended by an "
        "error, or a finish chunk without usageMetadata) leaves every column NULL.",
        "`toolUsePromptTokenCount` (the prompts of server-side tools such as search grounding, "
        "URL context or code execution) is inside `totalTokenCount` but not inside "
        "`promptTokenCount`, and is billed at the input rate: it is added to input_tokens and "
        "kept apart in tool_prompt_tokens (docs/providers.md gives the evidence).",
        "Grounding fees (per grounded prompt on Gemini 2.x, per search query on Gemini 3) are "
        "not reported as a count in usageMetadata, so web_search_requests is NULL here.",
    ),
)


def model_from_url(url: str) -> str | None:
    path = unquote(urlsplit(url).path)
    marker = path.rfind("/models/")
    if marker < 0:
        return None
    name = path[marker + len("/models/") :]
    return name.split(":", 1)[0] or None


def parse_request(body: Any, url: str = "") -> RequestInfo:
    segments: list[SegmentRaw] = []
    cached = body.get("cachedContent") or body.get("cached_content")
    if cached:
        segments.append(segment("cached_content", None, cached))
    for tool in body.get("tools") or ():
        segments.append(segment("tool", None, tool))
    system = body.get("systemInstruction") or body.get("system_instruction")
    if system:
        segments.append(segment("system", "system", system))
    for content in body.get("contents") or ():
        role = as_str(content.get("role")) if isinstance(content, dict) else None
        segments.append(segment("message", role, content))
    path = urlsplit(url).path
    return RequestInfo(
        model=model_from_url(url) or as_str(body.get("model")),
        stream=path.endswith(":streamGenerateContent"),
        segments=segments,
    )


def is_usage_report(raw: Any) -> bool:
    """Whether a usageMetadata reports counts. proto3 omits zero counts, so "absent = 0" holds
    only for an object that carries the prompt or total count; one without both (Vertex's
    `{"trafficType": "ON_DEMAND"}` on every frame but the last) says nothing about tokens.
    Rulebook 8.4: take the last non-null usage, and a count-less object is not one."""
    return isinstance(raw, dict) and (
        raw.get("promptTokenCount") is not None or raw.get("totalTokenCount") is not None
    )


def normalise_usage(raw: Any, provider: str = "") -> Usage | None:
    if not is_usage_report(raw):
        return None  # unknown, never 0 tokens from an object that holds no count
    return read_usage(raw, USAGE_MAP)


def _part_flags(chunk: dict[str, Any]) -> tuple[bool, bool, str | None]:
    reasoning = text = False
    finish: str | None = None
    for candidate in chunk.get("candidates") or ():
        if not isinstance(candidate, dict):
            continue
        finish = as_str(candidate.get("finishReason")) or finish
        content = candidate.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        for part in parts or ():
            if not isinstance(part, dict):
                continue
            if part.get("thought") is True:
                reasoning = reasoning or bool(part.get("text"))
            elif part.get("text") or part.get("functionCall") or part.get("executableCode"):
                text = True
    feedback = chunk.get("promptFeedback")
    if isinstance(feedback, dict) and feedback.get("blockReason"):
        finish = finish or f"blocked:{feedback['blockReason']}"
    return reasoning, text, finish


def _chunks(body: bytes, stream: bool) -> tuple[list[tuple[Any, int]], bool]:
    """(decoded chunks with end offsets, whether the body is a stream)."""
    head = body.lstrip()[:1]
    if head == b"[":
        return list(iter_json_array(body)), True
    if is_stream_body(body, stream):
        chunks = [(obj, end) for _, obj, end in iter_sse_json(body) if isinstance(obj, dict)]
        # Vertex may end a 200 stream with its error body written bare, without `data:`
        # (errors after HTTP 200 arrive in-band). SSE framing drops such lines,
        # so the text after the last SSE line is read here, for this dialect only, and kept
        # only when it is an error object.
        tail = trailing_json(body)
        if isinstance(tail, dict) and tail.get("error") is not None:
            chunks.append((tail, len(body)))
        return chunks, True
    return [(loads_lenient(body), len(body))], False


def parse_response(
    status: int,
    body: bytes,
    provider: str,
    stream: bool,
    headers: list[tuple[str, str]] | None = None,
) -> ResponseInfo:
    if status >= 400:
        return http_error(body)
    chunks, streamed = _chunks(body, stream)
    if not streamed and not isinstance(chunks[0][0], dict):
        raise ValueError("response body is not a JSON object")
    usage_raw: Any = None
    usage_final = False  # the last usage report came on or after the finish chunk
    model: str | None = None
    finish: str | None = None
    first_reasoning: int | None = None
    first_text: int | None = None
    error_type: str | None = None
    error_message: str | None = None
    for chunk, end in chunks:
        if not isinstance(chunk, dict):
            continue
        if chunk.get("error") is not None:
            error_type, error_message = error_fields(chunk)
            error_type = error_type or "error"
            continue
        model = as_str(chunk.get("modelVersion")) or model
        reasoning, text, chunk_finish = _part_flags(chunk)
        finish = chunk_finish or finish
        if is_usage_report(chunk.get("usageMetadata")):  # the last usage report wins
            usage_raw = chunk["usageMetadata"]
            usage_final = finish is not None
        if reasoning and first_reasoning is None:
            first_reasoning = end
        if text and first_text is None:
            first_text = end
    if streamed and not usage_final:
        # Rulebook section 5: every chunk's counts are running totals that can still change,
        # the prompt count too (15 in early chunks, 13 in the last), so only the usage of the
        # finish chunk or a later one is final. Before it (a cut stream, one ended by an error,
        # a finish chunk without usageMetadata) every count is unknown, not a running total.
        usage_raw = None
    usage = normalise_usage(usage_raw)
    if error_type is not None:
        outcome = "stream_error"
    elif streamed and finish is None:
        outcome = "interrupted"
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
