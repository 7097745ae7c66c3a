"""The Spark engine derives the same ids as the local one for records without an id: Spark deals
a file's byte ranges to its tasks by size, not in file order, and the ids still number the
exchanges of identical content in file order.

Needs Java and pyspark; skipped with the reason otherwise (as tests/test_spark_conformance.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_ingest_support import capture_record, har_document, har_entry, line, run, table
from test_spark_support import skip_module_without_spark

from pipeline.ingest_plan import CHUNK_BYTES, TAIL_SPLIT
from pipeline.warehouse import Warehouse

skip_module_without_spark("Spark fallback id tests")

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from pipeline.engines.spark_session import get_session

    session = get_session(
        "local[2]",
        app_name="cacheaudit-fallback-ids",
        shuffle_partitions=2,
        extra_conf={"spark.driver.memory": "1g", "spark.sql.adaptive.enabled": "false"},
        java_options="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    )
    yield session
    session.stop()


def _rows(wh: Path) -> list[tuple[str, int, str]]:
    return sorted((r["request_id"], r["source_index"], r["source"]) for r in table(wh, "requests"))


def test_spark_numbers_repeated_content_in_file_order_like_the_local_engine(
    spark: Any, tmp_path: Path
) -> None:
    from pipeline.engines.spark_ingest import ingest as spark_ingest

    # Turn 3 four times, spread over the byte ranges of a file split into several tasks.
    turns = [*range(0, 20), 3, 3, *range(20, 40), 3]
    records = [capture_record(t) for t in turns]
    for r in records:
        r["hints"]["tags"] = ["x" * 250_000]
    capture = tmp_path / "c.jsonl"
    capture.write_bytes(b"".join(line(r) for r in records))
    assert capture.stat().st_size > 2 * CHUNK_BYTES // TAIL_SPLIT  # more than one range
    har = tmp_path / "s.har"
    har.write_bytes(har_document([har_entry(t) for t in (1, 2, 1, 1)]))
    local, on_spark = tmp_path / "local", tmp_path / "spark"
    run([capture, har], local, workers=1)
    spark_ingest(spark, [capture, har], Warehouse(on_spark))
    assert _rows(on_spark) == _rows(local)
    threes = sorted(
        (r["source_index"], r["request_id"])
        for r in table(on_spark, "requests")
        if r["source"] == str(capture) and r["started_at"].second == 3
    )
    assert [rid.rsplit(":", 1)[1] for _, rid in threes] == ["0", "1", "2", "3"]
    segments = sorted((r["request_id"], r["position"]) for r in table(on_spark, "segments"))
    assert segments == sorted((r["request_id"], r["position"]) for r in table(local, "segments"))
