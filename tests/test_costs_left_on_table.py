"""left_on_table is money ideal caching would have saved, so it is never negative: a request whose
provider read more than expected_cache expected (a cache warmed outside the window, an estimate
below the real read) has 0 left and cost_if_ideal = cost_total, and sums over requests do not net
such over-delivery against real losses elsewhere. Prices from openai.csv for gpt-4.1 (2.00 miss,
0.50 hit, 8.00 output per million tokens)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from test_ingest_support import chat_line, chat_usage

from pipeline import sql
from pipeline.ingest import ingest
from pipeline.warehouse import Warehouse

T0 = datetime(2026, 11, 16, 9, 0, tzinfo=UTC)
MODEL = "gpt-4.1-2025-04-14"
SYSTEM = "Follow the runbook exactly. " * 220  # about 1500 tokens at 4 bytes a token


def _exchange(
    at: datetime, rid: str, messages: list[dict[str, Any]], prompt: int, cached: int
) -> bytes:
    return chat_line(at, rid, {"model": MODEL, "messages": messages}, chat_usage(prompt, cached))


def _turn(desk: str, user: str) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": f"Desk {desk}. {SYSTEM}"},
        {"role": "user", "content": user},
    ]


@pytest.fixture(scope="module")
def con(tmp_path_factory: pytest.TempPathFactory) -> Any:
    base = tmp_path_factory.mktemp("left")
    capture = base / "capture.jsonl"
    first = _turn("b", "Check order 1234.")
    capture.write_bytes(
        b"".join(
            [
                # a first request that read 1536 cached tokens warmed before the capture:
                # nothing earlier to expect from, expected 0
                _exchange(T0, "over", _turn("a", "Check order 1234."), 1553, 1536),
                # a real loss: 30 s after "miss-1", the same system prompt read nothing
                _exchange(T0, "miss-1", first, 1553, 0),
                _exchange(
                    T0 + timedelta(seconds=30),
                    "miss-2",
                    [
                        *first,
                        {"role": "assistant", "content": "Done."},
                        {"role": "user", "content": "1235?"},
                    ],
                    1567,
                    0,
                ),
            ]
        )
    )
    warehouse = Warehouse(base / "wh")
    ingest([capture], warehouse, workers=1)
    return sql.connect(warehouse)


def _row(con: Any, rid: str) -> dict[str, Any]:
    rel = con.sql("SELECT * FROM request_costs WHERE request_id = ?", params=[rid])
    [row] = rel.fetchall()
    return dict(zip(rel.columns, row, strict=True))


def test_a_request_that_read_more_than_expected_left_nothing_on_the_table(con: Any) -> None:
    row = _row(con, "over")
    assert (row["expected_read_tokens"], row["cache_read_tokens"]) == (0, 1536)
    assert row["left_on_table"] == 0  # was -0.002304: 1536 x (2.00 - 0.50) per million
    assert row["cost_if_ideal"] == pytest.approx(row["cost_total"])


def test_summed_left_on_table_is_the_real_loss_not_netted_against_over_delivery(con: Any) -> None:
    loss = _row(con, "miss-2")
    # turn 1's whole prompt was reusable (1553 tokens; OpenAI caches whole 128-token steps over
    # 1024: 1536) and nothing was read: 1536 x (2.00 miss - 0.50 hit) per million
    assert loss["expected_read_tokens"] == 1536
    assert loss["left_on_table"] == pytest.approx(1536 * (2.00 - 0.50) / 1e6)
    assert loss["cost_if_ideal"] == pytest.approx(loss["cost_total"] - loss["left_on_table"])
    [(total,)] = con.sql("SELECT left_on_table FROM cost_summary WHERE currency = 'USD'").fetchall()
    assert total == pytest.approx(loss["left_on_table"])
