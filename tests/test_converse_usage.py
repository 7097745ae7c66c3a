"""Bedrock Converse usage when the cache fields are left out: totalTokens includes the cache
(as real responses show, whatever the API reference says), so it says what the absent counts
were."""

from __future__ import annotations

from typing import Any

from pipeline.dialects.converse import FROM_TOTAL, normalise_usage


def _read(**usage: Any) -> tuple[Any, ...]:
    u = normalise_usage(usage)
    assert u is not None
    return u.input_tokens, u.cache_read_tokens, u.cache_write_tokens, u.semantics


def test_a_total_equal_to_input_plus_output_means_no_cache_tokens_not_unknown() -> None:
    assert _read(inputTokens=1500, outputTokens=20, totalTokens=1520) == (1500, 0, 0, FROM_TOTAL)


def test_one_absent_cache_field_is_the_rest_of_the_total() -> None:
    got = _read(inputTokens=2, outputTokens=5, totalTokens=1329, cacheReadInputTokens=1322)
    assert got == (1324, 1322, 0, FROM_TOTAL)
    got = _read(inputTokens=2, outputTokens=5, totalTokens=1329, cacheWriteInputTokens=22)
    assert got == (1324, 1300, 22, FROM_TOTAL)


def test_cache_tokens_without_their_split_keep_the_prompt_total_and_unknown_reads() -> None:
    assert _read(inputTokens=2, outputTokens=5, totalTokens=1329) == (1324, None, None, FROM_TOTAL)


def test_without_a_usable_total_absent_cache_fields_stay_unknown() -> None:
    plain = "bedrock_exclusive"
    assert _read(inputTokens=13, outputTokens=82) == (13, None, None, plain)
    assert _read(inputTokens=13, outputTokens=82, totalTokens=90) == (13, None, None, plain)
    assert _read(inputTokens=13, outputTokens=82, totalTokens="95") == (13, None, None, plain)


def test_reported_cache_fields_are_taken_as_they_are() -> None:
    got = _read(
        inputTokens=2, outputTokens=5, totalTokens=1329, cacheReadInputTokens=1322,
        cacheWriteInputTokens=0,
    )  # fmt: skip
    assert got == (1324, 1322, 0, "bedrock_exclusive")


def test_the_one_hour_writes_are_read_from_cache_details_and_unknown_without_them() -> None:
    # https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_TokenUsage.html:
    # one entry per TTL written, 1h before 5m; empty when nothing was written
    usage = {"inputTokens": 1000, "outputTokens": 500, "totalTokens": 8500,
             "cacheReadInputTokens": 5000, "cacheWriteInputTokens": 2000}  # fmt: skip
    split = [{"ttl": "1h", "inputTokens": 1500}, {"ttl": "5m", "inputTokens": 500}]
    cases = [(split, 1500), ([{"ttl": "5m", "inputTokens": 2000}], 0), (None, None)]
    for details, one_hour in cases:
        raw = usage if details is None else {**usage, "cacheDetails": details}
        u = normalise_usage(raw)
        assert u is not None
        assert (u.input_tokens, u.cache_write_tokens, u.cache_write_1h_tokens) == (
            8000,
            2000,
            one_hour,
        ), details
    nothing = normalise_usage({"inputTokens": 9, "outputTokens": 1, "totalTokens": 10,
                               "cacheWriteInputTokens": 0, "cacheDetails": []})  # fmt: skip
    assert nothing is not None and nothing.cache_write_1h_tokens == 0
