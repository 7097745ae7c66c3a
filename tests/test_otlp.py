"""OTLP/JSON GenAI spans as the third input format."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pipeline.normalise import Normalised, RejectRecord, Skip, normalise
from pipeline.records import Exchange, Reject
from pipeline.sources import detect_format
from pipeline.sources.otlp import iter_otlp

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "otlp" / "genai_spans.jsonl"


def normalised() -> list[Normalised | str]:
    out: list[Normalised | str] = []
    for item in iter_otlp(FIXTURE):
        if isinstance(item, Reject):
            out.append("reject")
            continue
        assert isinstance(item, Exchange)
        try:
            out.append(normalise(item, f"span{item.index}"))
        except Skip:
            out.append("skip")
        except RejectRecord:
            out.append("reject")
    return out


def test_the_otlp_file_exporter_format_is_detected_from_content() -> None:
    assert detect_format(FIXTURE) == "otlp_json"


def test_spans_are_read_in_order_with_non_genai_spans_skipped_and_bad_lines_rejected() -> None:
    kinds = [x if isinstance(x, str) else "row" for x in normalised()]
    # line 1: anthropic span, HTTP span, bedrock span; line 2: not JSON; line 3: error span.
    assert kinds == ["row", "skip", "row", "reject", "row"]


def test_a_current_convention_span_gives_inclusive_usage_and_timing() -> None:
    first = normalised()[0]
    assert isinstance(first, Normalised)
    row = first.row
    expected = {
        "provider": "anthropic",
        "api": "otel",
        "host": "api.anthropic.com",
        "model": "claude-sonnet-4-5-20250929",
        "requested_model": "claude-sonnet-4-5",
        "outcome": "ok",
        "usage_status": "reported",
        "input_tokens": 1532,
        "cache_read_tokens": 1111,
        "cache_write_tokens": 418,
        "cache_write_1h_tokens": None,
        "uncached_input_tokens": 3,
        "output_tokens": 33,
        "reasoning_tokens": None,
        "stream": True,
        "ttft_ms": 350.0,
        "duration_ms": 1250.0,
        "finish_reason": "end_turn",
        "segment_count": 0,
        "usage_semantics": "otel_inclusive_assumed",  # anthropic: exclusive-era spans look alike
        "tags": ["service:support-bot"],
    }
    assert {k: row[k] for k in expected} == expected
    assert row["started_at"] == datetime(2026, 7, 1, 12, 0, tzinfo=UTC)
    assert first.segments == []  # no content capture: no prompt bytes, no segments
    assert row["request_id"] == "span1000000"


def test_older_names_and_an_exclusive_input_count_are_corrected() -> None:
    third = normalised()[2]
    assert isinstance(third, Normalised)
    row = third.row
    # prompt_tokens 2 < cache read 1322: the emitter copied Bedrock's exclusive inputTokens.
    assert (row["provider"], row["input_tokens"], row["cache_read_tokens"]) == (
        "bedrock",
        1324,
        1322,
    )
    assert (row["uncached_input_tokens"], row["output_tokens"]) == (2, 5)
    assert row["usage_semantics"] == "otel_exclusive_fixed"
    assert row["model"] == "us.anthropic.claude-sonnet-4-5-20250929-v1:0"


def test_an_error_span_with_captured_content_has_segments_and_no_usage() -> None:
    last = normalised()[4]
    assert isinstance(last, Normalised)
    row = last.row
    assert (row["outcome"], row["usage_status"], row["error_type"], row["status_code"]) == (
        "http_error",
        "missing",
        "rate_limit_exceeded",
        429,
    )
    assert row["error_message"] == "Rate limit reached"
    assert row["input_tokens"] is None
    assert [(s.kind, s.role) for s in last.segments] == [
        ("tool", None),
        ("system", "system"),
        ("message", "user"),
        ("message", "assistant"),
    ]


def test_otlp_ingests_through_the_cli(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    wh = tmp_path / "wh"
    result = cli("ingest", str(FIXTURE), "--warehouse", str(wh))
    assert result.returncode == 0, result.stderr
    out = cli(
        "sql",
        "select provider, input_tokens, cache_read_tokens from requests order by provider",
        "--format",
        "json",
        "--warehouse",
        str(wh),
    )
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [(r["provider"], r["input_tokens"], r["cache_read_tokens"]) for r in rows] == [
        ("anthropic", 1532, 1111),
        ("bedrock", 1324, 1322),
        ("openai", None, None),
    ]


def _one_span(tmp_path: Path, attributes: dict[str, str], status_code: object) -> Exchange:
    """The exchange of one OTLP span (an OpenAI call at 2026-07-01 12:00 UTC) with these string
    attributes beside its provider, and this status code."""
    attrs = {"gen_ai.provider.name": "openai", **attributes}
    span = {
        "traceId": "a",
        "spanId": "b",
        "startTimeUnixNano": "1782907200000000000",
        "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()],
        "status": {"code": status_code},
    }
    doc = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(doc) + "\n")
    (item,) = list(iter_otlp(path))
    assert isinstance(item, Exchange)
    return item


@pytest.mark.parametrize("code", [2, "STATUS_CODE_ERROR"])
def test_span_status_error_is_read_from_the_enum_number_or_name(
    code: object, tmp_path: Path
) -> None:
    item = _one_span(tmp_path, {}, code)
    assert normalise(item, "x").row["outcome"] == "http_error"


def test_a_key_quoted_in_a_failed_spans_error_type_is_not_stored(tmp_path: Path) -> None:
    # instrumentations put the exception's text in `error.type` as often as its class name
    key = "sk-proj-" + "Zq7Wv2Lm9Xc4Rt8Yb1Nd6Hs3Kf5Gj0Pa"
    item = _one_span(tmp_path, {"error.type": f"401 Incorrect API key: {key}"}, 2)
    error_type = normalise(item, "x").row["error_type"]
    assert error_type == "401 Incorrect API key: [REDACTED]"


def test_spans_without_prompt_content_get_no_cache_break_row(tmp_path: Path) -> None:
    from pipeline import sql as sqlmod
    from pipeline.ingest import ingest
    from pipeline.warehouse import Warehouse

    wh = Warehouse(tmp_path / "wh")
    ingest([FIXTURE], wh)
    con = sqlmod.connect(wh)
    [(without_content,)] = con.sql(
        "SELECT count(*) FROM requests WHERE segment_count = 0"
    ).fetchall()
    assert without_content > 0
    [(breaks,)] = con.sql(
        "SELECT count(*) FROM cache_breaks JOIN requests USING (request_id)"
        " WHERE requests.segment_count = 0"
    ).fetchall()
    assert breaks == 0  # not one cold start per span: nothing to analyse


def _span_row(
    tmp_path: Path, attrs: dict[str, object], start: object = "1782907200000000000"
) -> dict[str, object] | Reject:
    """The requests row of one span with these attributes, or its reject."""
    values = []
    for key, value in attrs.items():
        if isinstance(value, bool):
            values.append({"key": key, "value": {"boolValue": value}})
        elif isinstance(value, int):
            values.append({"key": key, "value": {"intValue": str(value)}})
        else:
            values.append({"key": key, "value": {"stringValue": value}})
    span: dict[str, object] = {"traceId": "a", "spanId": "b", "attributes": values}
    if start is not None:
        span["startTimeUnixNano"] = start
    doc = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(doc) + "\n")
    (item,) = list(iter_otlp(path))
    return item if isinstance(item, Reject) else normalise(item, "x").row


def test_provider_names_are_lower_cased_and_a_known_api_host_names_the_provider(
    tmp_path: Path,
) -> None:
    usage = {"gen_ai.request.model": "gpt-4o", "gen_ai.usage.input_tokens": 10}
    openllmetry = _span_row(tmp_path, {"gen_ai.system": "OpenAI", **usage})
    assert isinstance(openllmetry, dict) and openllmetry["provider"] == "openai"
    anthropic = _span_row(tmp_path, {"gen_ai.system": "Anthropic", **usage})
    assert isinstance(anthropic, dict) and anthropic["provider"] == "anthropic"
    deepseek = _span_row(
        tmp_path, {"gen_ai.system": "openai", "server.address": "api.deepseek.com", **usage}
    )
    assert isinstance(deepseek, dict) and deepseek["provider"] == "deepseek"
    gateway = _span_row(
        tmp_path, {"gen_ai.system": "openai", "server.address": "llm.internal", **usage}
    )
    assert isinstance(gateway, dict) and gateway["provider"] == "openai"


def test_whether_a_span_streamed_is_unknown_unless_an_attribute_says_so(tmp_path: Path) -> None:
    base = {"gen_ai.system": "openai", "gen_ai.usage.input_tokens": 10}
    rows = [
        _span_row(tmp_path, base),
        _span_row(tmp_path, {**base, "gen_ai.request.stream": True}),
        _span_row(tmp_path, {**base, "llm.is_streaming": False}),
    ]
    assert [r["stream"] for r in rows if isinstance(r, dict)] == [None, True, False]


@pytest.mark.parametrize("start", [None, "0", 0, "soon"])
def test_a_span_without_a_start_time_is_a_reject_not_a_row_in_1970(
    tmp_path: Path, start: object
) -> None:
    item = _span_row(tmp_path, {"gen_ai.system": "openai"}, start=start)
    assert isinstance(item, Reject)
    assert "startTimeUnixNano" in item.reason


def test_a_span_that_ends_before_it_starts_has_an_unknown_duration(tmp_path: Path) -> None:
    doc = {"resourceSpans": [{"scopeSpans": [{"spans": [{
        "traceId": "a", "spanId": "b", "startTimeUnixNano": "1782907200000000000",
        "endTimeUnixNano": "1782907199000000000",
        "attributes": [{"key": "gen_ai.system", "value": {"stringValue": "openai"}}],
    }]}]}]}  # fmt: skip
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(doc) + "\n")
    (item,) = list(iter_otlp(path))
    assert isinstance(item, Exchange) and item.end_ms is None


def test_a_pretty_printed_otlp_export_is_refused_with_a_hint_that_names_otlp(
    cli,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    path = tmp_path / "traces.json"
    path.write_text(json.dumps({"resourceSpans": []}, indent=2) + "\n")
    out = cli("ingest", str(path), "-w", str(tmp_path / "wh"))
    assert out.returncode == 3
    assert "format not recognised" in out.stderr and "resourceSpans" in out.stderr


def test_an_agent_span_is_skipped_so_the_chat_spans_under_it_are_counted_once(
    tmp_path: Path,
) -> None:
    # an invoke_agent span carries the summed usage of its chat spans (GenAI conventions)
    usage = {"gen_ai.system": "openai", "gen_ai.request.model": "gpt-4o"}
    chat = _span_row(
        tmp_path, {**usage, "gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 100}
    )
    assert isinstance(chat, dict) and chat["input_tokens"] == 100
    for operation in ("invoke_agent", "invoke_workflow", "execute_tool", "create_agent"):
        attrs = {**usage, "gen_ai.operation.name": operation, "gen_ai.usage.input_tokens": 300}
        with pytest.raises(Skip):
            _span_row(tmp_path, attrs)
