"""Typed records at the ingest boundary.

`Exchange` is one HTTP exchange as read from any source, already redacted. Dialects turn its
bytes into `RequestInfo` / `ResponseInfo`; `normalise` joins them into a `RequestRow` and its
`Segment`s. `Reject` is a record that could not be read, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

HTTP_STATUSES = range(100, 600)  # RFC 9110, section 15: three digits, 1xx to 5xx

# The starts a request can have: no LLM API answered before 2000 (the OTLP reader's bound too),
# and a start past 2099 is a clock gone wrong. Outside them a start is a placeholder
# (0001-01-01, 9999-12-31), a broken clock or a unit mistake; and at the ends of what a date can
# hold, the week and the margin of days before it that every report reads cannot be computed.
EARLIEST_START = datetime(2000, 1, 1, tzinfo=UTC)
STARTS_END = datetime(2100, 1, 1, tzinfo=UTC)  # exclusive


@dataclass(slots=True)
class Exchange:
    source: str  # path of the file the record came from
    index: int  # 1-based line number (JSONL) or 0-based entry index (HAR, OTLP span)
    started_at: datetime | None  # request start, UTC; None: not recorded (a VCR cassette)
    method: str
    url: str
    request_headers: list[tuple[str, str]]  # redacted
    request_body: bytes
    status: int | None  # None: no response arrived (upstream unreachable)
    response_headers: list[tuple[str, str]]
    response_body: bytes
    record_id: str | None = None
    account: str | None = None  # fingerprint of the API key, never the key
    session_id: str | None = None
    agent: str | None = None
    tags: list[str] = field(default_factory=list)
    response_headers_ms: float | None = None
    first_byte_ms: float | None = None
    end_ms: float | None = None
    # (arrival offset in ms since request start, byte length) for each body chunk as received;
    # the offset is None when the capture did not say (or said something impossible).
    chunks: list[tuple[float | None, int]] | None = None
    capture_outcome: str | None = None  # set by capture tools: interrupted, upstream_error, ...
    capture_error: str | None = None
    # Why the record cannot be read, when that matters only for an LLM call: a source that
    # cannot tell one from a page load (a HAR) leaves the verdict to normalise, which skips
    # what is not one and rejects what is.
    defect: str | None = None
    # Pre-normalised usage (OTel spans carry usage but no HTTP bodies).
    span: dict[str, Any] | None = None


@dataclass(slots=True)
class Usage:
    """Normalised usage. None means the provider did not report it (unknown), never 0."""

    input_tokens: int | None = None  # ALL prompt tokens, cached included
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None  # every write, 5-minute and 1-hour together
    cache_write_1h_tokens: int | None = None  # the 1-hour part of cache_write_tokens
    output_tokens: int | None = None  # reasoning included
    reasoning_tokens: int | None = None
    reported_cost: float | None = None
    # Prompt tokens of the provider's own server-side tool calls (Gemini search grounding, URL
    # context, code execution): billed as input and inside input_tokens.
    tool_prompt_tokens: int | None = None
    audio_input_tokens: int | None = None  # the audio part of input_tokens
    audio_cache_read_tokens: int | None = None  # the audio part of cache_read_tokens
    audio_output_tokens: int | None = None  # the audio part of output_tokens
    web_search_requests: int | None = None  # server-side web searches the provider billed
    # The whole prompt (input + cache) of each sampling pass when one response made several
    # (Anthropic compaction): a long-context price tier is chosen per pass, not on the sum.
    pass_prompt_tokens: list[int] | None = None
    semantics: str = ""  # how the raw fields were read, e.g. "openai_inclusive"
    raw: Any = None  # the provider's usage object verbatim

    @property
    def uncached_input_tokens(self) -> int | None:
        # A write the provider does not report counts as none here (contract in schemas/requests).
        if self.input_tokens is None or self.cache_read_tokens is None:
            return None
        return self.input_tokens - self.cache_read_tokens - (self.cache_write_tokens or 0)


@dataclass(slots=True)
class SegmentRaw:
    kind: str  # tool, system, message, ...
    role: str | None
    data: bytes  # exact compact JSON bytes of the segment as sent


@dataclass(slots=True)
class RequestInfo:
    model: str | None
    stream: bool | None
    segments: list[SegmentRaw]
    cache_breakpoints: list[int] = field(default_factory=list)  # positions with cache_control
    cache_ttls: list[str] = field(default_factory=list)


@dataclass(slots=True)
class ResponseInfo:
    outcome: str  # ok, http_error, stream_error, interrupted
    usage: Usage | None
    model: str | None = None
    error_type: str | None = None
    error_message: str | None = None
    finish_reason: str | None = None
    # Byte offsets into the body where the first reasoning / answer text event ends.
    first_reasoning_at: int | None = None
    first_text_at: int | None = None


@dataclass(slots=True)
class Segment:
    request_id: str
    position: int
    kind: str
    role: str | None
    segment_hash: str
    prefix_hash: str
    bytes: int


@dataclass(slots=True)
class Reject:
    source: str
    index: int
    reason: str
    excerpt: str
