"""The examples in `--help` are the first thing a reader copies: they must follow the project's
rules and show what they are meant to show.

- `cacheaudit sql --help`: the hit ratio is sum(read) / sum(input) over the requests where both
  are known, and the requests left out are counted (unknown is NULL, never 0).
- `cacheaudit experiment run --help`: the simulator example waits longer than the simulator's
  default build delay, else no cache entry is ready and every step reads 0.
"""

from __future__ import annotations

import inspect
import re
from datetime import UTC, datetime

from fixtures.prices import tiny_warehouse as tiny

from pipeline import sql as sqlmod
from pipeline.cli import sql as sql_command
from pipeline.commands.experiment import run as experiment_run
from pipeline.commands.simulate import serve as simulate_serve

AT = datetime(2026, 11, 24, 10, 0, tzinfo=UTC)


def _example_query(doc: str) -> str:
    found = re.search(r'cacheaudit sql "(.*?)"', doc, re.DOTALL)
    assert found, doc
    return " ".join(found.group(1).split())


def test_the_sql_help_example_computes_the_hit_ratio_over_known_rows_and_counts_the_rest(
    tmp_path,
) -> None:
    rows = [
        # openai: one request with both counts known (500 of 1,000 read), one whose read is
        # unknown. The token-weighted ratio is 0.5; with the unknown row's input in the denominator
        # it would read 0.25.
        tiny.request("o1", AT, "openai", "gpt-4.1", input_tokens=1_000, cache_read_tokens=500,
                     output_tokens=5),
        tiny.request("o2", AT, "openai", "gpt-4.1", input_tokens=1_000, cache_read_tokens=None,
                     output_tokens=5),
        tiny.request("d1", AT, "deepseek", "deepseek-chat", input_tokens=1_000,
                     cache_read_tokens=250, output_tokens=5),
    ]  # fmt: skip
    wh = tiny.write(tmp_path / "warehouse", rows)
    query = _example_query(sql_command.__doc__ or "")
    _con, rel = sqlmod.run_user_sql(wh, query)
    got = {r[0]: r[1:] for r in rel.fetchall()}
    assert got == {"deepseek": (0.25, 0), "openai": (0.5, 1)}


def test_the_experiment_help_simulator_example_waits_longer_than_the_build_delay() -> None:
    doc = experiment_run.__doc__ or ""
    example = doc[doc.index("Example (the local simulator") :]
    found = re.search(r"--wait (\d+(?:\.\d+)?)", example)
    assert found, example
    build_delay = inspect.signature(simulate_serve).parameters["build_delay"].default
    assert float(found.group(1)) > build_delay
    assert "--build-delay" in example  # and it says why


def test_the_forget_help_example_names_a_file_as_the_capture_proxy_names_it(tmp_path) -> None:
    # the example read `capture/proxy-2026-12-01T10Z.jsonl`, a name no capture tool writes, so a
    # reader copying it had the path of nothing ingested (and `forget` removes nothing then)
    from pipeline.capture.writer import CaptureWriter
    from pipeline.commands.forget import forget

    hour = datetime(2026, 12, 1, 10, 5, tzinfo=UTC)
    with CaptureWriter(tmp_path / "capture", clock=lambda: hour) as writer:
        writer.write(b'{"schema_version": 1}\n')
        written = writer.current_path
    assert written is not None
    example = re.search(r"cacheaudit forget (\S+)", inspect.getdoc(forget) or "")
    assert example, inspect.getdoc(forget)
    # the same name but for the process id, which differs from run to run
    shape = re.sub(r"-p\d+", r"-p\\d+", re.escape(f"capture/{written.name}"))
    assert re.fullmatch(shape, example.group(1)), (example.group(1), written.name)
