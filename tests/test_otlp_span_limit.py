"""A line with more spans than SPAN_INDEX_STRIDE can number: the first STRIDE - 1 spans are read,
the rest become ONE reject at the line's last index, and no index reaches the next line's.
The stride is patched down to 4 so the test builds lines of a few spans, not a million."""

from __future__ import annotations

import orjson
import pytest

from pipeline.records import Exchange, Reject
from pipeline.sources import otlp

STRIDE = 4


@pytest.fixture(autouse=True)
def small_stride(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(otlp, "SPAN_INDEX_STRIDE", STRIDE)


def line(spans: int, tag: str) -> bytes:
    doc = {
        "resourceSpans": [
            {
                "resource": {"attributes": []},
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "ab" * 16,
                                "spanId": f"{tag}{i:04d}",
                                "name": "chat",
                                "startTimeUnixNano": "1764000000000000000",
                            }
                            for i in range(spans)
                        ]
                    }
                ],
            }
        ]
    }
    return orjson.dumps(doc) + b"\n"


def read(*lines: bytes) -> list[Exchange | Reject]:
    return list(otlp.iter_otlp_lines(lines, "spans.jsonl", 1))


def test_a_line_over_the_stride_gives_one_reject_at_its_last_index_and_no_overlap() -> None:
    items = read(line(9, "a"), line(2, "b"))
    rejects = [x for x in items if isinstance(x, Reject)]
    assert len(rejects) == 1
    (reject,) = rejects
    assert reject.index == 1 * STRIDE + STRIDE - 1
    assert "6 spans after the first 3 dropped" in reject.reason
    spans = [x for x in items if isinstance(x, Exchange)]
    assert [(x.index, x.record_id) for x in spans] == [
        (4, f"otel:{'ab' * 16}:a0000"),
        (5, f"otel:{'ab' * 16}:a0001"),
        (6, f"otel:{'ab' * 16}:a0002"),
        (8, f"otel:{'ab' * 16}:b0000"),
        (9, f"otel:{'ab' * 16}:b0001"),
    ]
    indices = [x.index for x in items]
    assert len(set(indices)) == len(indices)
    assert [i // STRIDE for i in indices] == [1, 1, 1, 1, 2, 2]


def test_a_line_of_exactly_the_stride_keeps_every_span() -> None:
    items = read(line(STRIDE, "a"), line(1, "b"))
    assert all(isinstance(x, Exchange) for x in items)
    assert [x.index for x in items] == [4, 5, 6, 7, 8]


def test_one_span_over_the_stride_drops_two_with_one_reject() -> None:
    items = read(line(STRIDE + 1, "a"))
    assert [type(x).__name__ for x in items] == ["Exchange"] * 3 + ["Reject"]
    reject = items[-1]
    assert isinstance(reject, Reject)
    assert reject.index == 7
    assert "2 spans after the first 3 dropped" in reject.reason
