"""VCR cassettes as an input, end to end: the official OpenAI and Anthropic SDKs call the local
simulator under vcrpy (so every cassette here is vcrpy's own output, YAML or JSON), the test
notes the usage each SDK parsed, `cacheaudit ingest` reads the cassettes, and every row's usage
equals what the SDK saw. Cassettes record no timing: times are NULL, the start is the
response's Date header (or NULL without one), and order is the interaction's position."""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anthropic
import duckdb
import openai
import pytest
import vcr
import yaml

from pipeline.simulate import SimulatorSettings
from pipeline.simulate.server import Simulator
from pipeline.sources import detect_format

OPENAI_KEY = "sk-test-vcrcassette-0123456789abcdef"
ANTHROPIC_KEY = "sk-ant-test-vcrcassette-0123456789"
# ~1500 simulator tokens: past OpenAI's 1024-token minimum, so a repeat reads the cache.
LONG = "The quick brown fox jumps over the lazy dog. " * 150
FAST = {"base_latency_ms": 1.0, "prefill_ms_per_1k": 0.0, "chunk_ms": 0.0}


@contextmanager
def _serve(rules: str, *, gzip_bodies: bool = False, date_header: bool = True) -> Iterator[str]:
    """The simulator on a free 127.0.0.1 port; optionally gzip-compressing its responses (as
    many providers do), or without the Date header uvicorn otherwise sends."""
    import uvicorn
    from starlette.middleware.gzip import GZipMiddleware

    app: Any = Simulator(SimulatorSettings(rules=rules, **FAST)).app()  # type: ignore[arg-type]
    if gzip_bodies:
        app = GZipMiddleware(app, minimum_size=0)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_level="warning", lifespan="off", date_header=date_header)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "simulator did not start"
            time.sleep(0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def _openai_turns(base: str, notes: list[dict[str, Any]]) -> None:
    """A two-turn conversation (the second sends the first's reply back), then the second turn
    again streamed: the usage the SDK parsed for each call is noted in order."""
    client = openai.OpenAI(base_url=base + "/v1", api_key=OPENAI_KEY, max_retries=0)
    history: list[Any] = [
        {"role": "system", "content": LONG},
        {"role": "user", "content": "Say hello"},
    ]
    first = client.chat.completions.create(model="gpt-4o", messages=history)
    assert first.usage is not None
    notes.append({"kind": "openai", "usage": first.usage.model_dump()})
    history += [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "And goodbye"},
    ]
    second = client.chat.completions.create(model="gpt-4o", messages=history)
    assert second.usage is not None
    notes.append({"kind": "openai", "usage": second.usage.model_dump()})
    usage = None
    for chunk in client.chat.completions.create(
        model="gpt-4o", messages=history, stream=True, stream_options={"include_usage": True}
    ):
        if chunk.usage is not None:
            usage = chunk.usage.model_dump()
    notes.append({"kind": "openai-stream", "usage": usage})


def _anthropic_turns(base: str, notes: list[dict[str, Any]]) -> None:
    client = anthropic.Anthropic(base_url=base, api_key=ANTHROPIC_KEY, max_retries=0)
    system: Any = [{"type": "text", "text": LONG, "cache_control": {"type": "ephemeral"}}]
    messages: Any = [{"role": "user", "content": "Say hello"}]
    m = client.messages.create(
        model="claude-sonnet-4-5", max_tokens=64, system=system, messages=messages
    )
    notes.append({"kind": "anthropic", "usage": m.usage.model_dump()})
    with client.messages.stream(
        model="claude-sonnet-4-5", max_tokens=64, system=system, messages=messages
    ) as s:
        final = s.get_final_message()
    notes.append({"kind": "anthropic-stream", "usage": final.usage.model_dump()})


def _record(
    path: Path, calls: Callable[[list[dict[str, Any]]], None], **options: Any
) -> tuple[list[dict[str, Any]], datetime, datetime]:
    """Run `calls` under vcrpy recording into `path`; the SDK usage and the time span."""
    notes: list[dict[str, Any]] = []
    before = datetime.now(UTC).replace(microsecond=0)
    with vcr.use_cassette(str(path), record_mode="all", **options):
        calls(notes)
    return notes, before, datetime.now(UTC)


def _rows(warehouse: Path) -> list[dict[str, Any]]:
    files = sorted(str(p) for p in (warehouse / "requests").rglob("*.parquet"))
    rel = duckdb.connect().read_parquet(files, hive_partitioning=True)
    rows = [dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()]
    return sorted(rows, key=lambda r: (r["source"], r["source_index"]))


def _check_openai(row: dict[str, Any], usage: dict[str, Any]) -> None:
    assert row["provider"] == "openai"
    assert row["input_tokens"] == usage["prompt_tokens"]
    assert row["output_tokens"] == usage["completion_tokens"]
    assert row["cache_read_tokens"] == usage["prompt_tokens_details"]["cached_tokens"]


def _check_anthropic(row: dict[str, Any], usage: dict[str, Any]) -> None:
    # Anthropic's input_tokens exclude cached ones; the row's input is every prompt token.
    read, write = usage["cache_read_input_tokens"], usage["cache_creation_input_tokens"]
    assert row["provider"] == "anthropic"
    assert row["input_tokens"] == usage["input_tokens"] + read + write
    assert row["uncached_input_tokens"] == usage["input_tokens"]
    assert row["cache_read_tokens"] == read
    assert row["cache_write_tokens"] == write
    assert row["output_tokens"] == usage["output_tokens"]


def _no_secrets(*dirs: Path) -> None:
    for d in dirs:
        for f in d.rglob("*"):
            if f.is_file():
                data = f.read_bytes()
                assert OPENAI_KEY.encode() not in data, f
                assert ANTHROPIC_KEY.encode() not in data, f


def _recorded_dates(cassette: Path) -> list[datetime]:
    """The Date header of each response, read from the YAML by this test."""
    data = yaml.safe_load(cassette.read_text())
    out = []
    for interaction in data["interactions"]:
        headers = {k.lower(): v for k, v in interaction["response"]["headers"].items()}
        out.append(
            datetime.strptime(headers["date"][0], "%a, %d %b %Y %H:%M:%S GMT").replace(tzinfo=UTC)
        )
    return out


def test_a_yaml_cassette_with_gzip_bodies_ingests_with_the_usage_each_sdk_parsed(
    tmp_path: Path, cli
) -> None:  # type: ignore[no-untyped-def]
    cassettes = tmp_path / "cassettes"
    with _serve("openai", gzip_bodies=True) as oa, _serve("anthropic", gzip_bodies=True) as an:
        notes, before, after = _record(
            cassettes / "test_agent.yaml",
            lambda n: (_openai_turns(oa, n), _anthropic_turns(an, n)),
        )
    text = (cassettes / "test_agent.yaml").read_text()
    assert "!!binary" in text and "gzip" in text  # bodies stored compressed, as vcrpy does
    assert OPENAI_KEY in text  # vcrpy kept the key (no filter_headers): ingest must drop it
    assert detect_format(cassettes / "test_agent.yaml") == "vcr_cassette"

    out = cli("ingest", str(cassettes), "-w", str(tmp_path / "wh"))
    assert out.returncode == 0, out.stderr
    assert "[vcr_cassette]: 5 records = 5 accepted" in out.stderr
    rows = _rows(tmp_path / "wh")
    assert [r["source_index"] for r in rows] == [0, 1, 2, 3, 4]
    assert [(r["provider"], r["stream"]) for r in rows] == [
        ("openai", False),
        ("openai", False),
        ("openai", True),
        ("anthropic", False),
        ("anthropic", True),
    ]
    for row, note in zip(rows[:3], notes[:3], strict=True):
        _check_openai(row, note["usage"])
    for row, note in zip(rows[3:], notes[3:], strict=True):
        _check_anthropic(row, note["usage"])
    # The simulator's cache: the first turn read nothing, the next ones the shared prefix.
    assert rows[0]["cache_read_tokens"] == 0 and rows[1]["cache_read_tokens"] > 1000
    assert rows[3]["cache_write_tokens"] > 1000
    assert rows[4]["cache_read_tokens"] == rows[3]["cache_write_tokens"]
    # No timing in a cassette: unknown, never 0. The start is the response's Date header.
    for row in rows:
        assert row["ttfb_ms"] is None and row["duration_ms"] is None and row["ttft_ms"] is None
    dates = _recorded_dates(cassettes / "test_agent.yaml")
    assert [r["started_at"] for r in rows] == dates
    # uvicorn refreshes its Date header once a second (on every tenth tick of its loop), so a
    # response may carry the second before the one the recording started in
    assert all(before - timedelta(seconds=1) <= d <= after for d in dates)
    assert {r["day"] for r in rows} == {d.date() for d in dates}
    _no_secrets(tmp_path / "wh")

    # The turns link into one conversation in cassette order, even within one second.
    convo = cli(
        "sql", "-w", str(tmp_path / "wh"), "--format", "json",
        "select r.source_index, c.turn, c.link_method from conversations c"
        " join requests r using (request_id) where r.provider = 'openai'"
        " order by r.source_index",
    )  # fmt: skip
    assert convo.returncode == 0, convo.stderr
    # turn 2 sends turn 1's reply back; the streamed call repeats turn 2 within the cache
    # lifetime (known from the Date headers): a re-send, not a new turn
    assert [tuple(t.values()) for t in json.loads(convo.stdout)] == [
        (0, 1, "new"),
        (1, 2, "history"),
        (2, 3, "resend"),
    ]


def test_a_json_cassette_ingests_with_the_usage_the_sdk_parsed(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "chat.json"
    with _serve("openai") as oa:
        notes, _, _ = _record(path, lambda n: _openai_turns(oa, n), serializer="json")
    assert json.loads(path.read_text())["version"] == 1
    assert detect_format(path) == "vcr_cassette"
    out = cli("ingest", str(path), "-w", str(tmp_path / "wh"))
    assert out.returncode == 0, out.stderr
    rows = _rows(tmp_path / "wh")
    assert len(rows) == 3
    for row, note in zip(rows, notes, strict=True):
        _check_openai(row, note["usage"])
    _no_secrets(tmp_path / "wh")


def test_a_cassette_without_date_headers_has_unknown_start_and_still_links_in_order(
    tmp_path: Path, cli
) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "nodate.yaml"
    with _serve("openai", date_header=False) as oa:
        notes, _, _ = _record(path, lambda n: _openai_turns(oa, n))
    assert "date:" not in path.read_text().lower()
    wh = tmp_path / "wh"
    out = cli("ingest", str(path), "-w", str(wh))
    assert out.returncode == 0, out.stderr
    assert [p.name for p in (wh / "requests").iterdir()] == ["day=__HIVE_DEFAULT_PARTITION__"]
    rows = _rows(wh)
    for row, note in zip(rows, notes, strict=True):
        _check_openai(row, note["usage"])
        assert row["started_at"] is None and row["day"] is None
    sql = (
        "select r.source_index, r.started_at, r.day, c.turn, c.link_method from requests r"
        " join conversations c using (request_id) order by r.source_index"
    )
    got = cli("sql", "-w", str(wh), "--format", "json", sql)
    assert got.returncode == 0, got.stderr
    table = json.loads(got.stdout)
    assert [(t["source_index"], t["started_at"], t["day"]) for t in table] == [
        (0, None, None),
        (1, None, None),
        (2, None, None),
    ]
    # turn 2 sends turn 1's reply back: linked by its history, in cassette order. The repeat
    # of turn 2 cannot be told a re-send without times (the cache lifetime is a time window):
    # it is a third turn, linked by the same history
    assert [(t["turn"], t["link_method"]) for t in table] == [
        (1, "new"),
        (2, "history"),
        (3, "history"),
    ]
    summary = cli("summary", "-w", str(wh))
    assert summary.returncode == 0, summary.stderr
    assert "requests:            3" in summary.stdout


BAD = {
    "not_yaml.yaml": "interactions:\n  - request: [unclosed\n",
    "no_uri.yaml": "interactions:\n- request:\n    method: POST\n  response:\n"
    "    status: {code: 200, message: OK}\nversion: 1\n",
    "object.yaml": "interactions:\n- request:\n    uri: http://x/v1/chat/completions\n"
    "    method: POST\n    body: !!python/object/apply:os.system ['true']\n"
    "  response: {status: {code: 200}}\nversion: 1\n",
    "bad_gzip.yaml": "interactions:\n- request:\n    uri: http://x/v1/chat/completions\n"
    "    method: POST\n    body: '{}'\n"
    "    headers: {Authorization: [Bearer sk-secret-abcdef0123456789]}\n"
    "  response:\n    status: {code: 200, message: OK}\n"
    "    headers: {Content-Encoding: [gzip]}\n    body: {string: 'not gzip'}\nversion: 1\n",
    "bad.json": '{"version": 1, "interactions": [{"request": {"uri": 5}}, ',
}


def test_bad_cassettes_are_rejects_with_reasons_and_the_good_one_still_lands(
    tmp_path: Path, cli
) -> None:  # type: ignore[no-untyped-def]
    for name, text in BAD.items():
        (tmp_path / name).write_text(text)
    good = {
        "interactions": [
            {
                "request": {
                    "uri": "https://api.deepseek.com/chat/completions",
                    "method": "POST",
                    "headers": {"Content-Type": ["application/json"]},
                    "body": json.dumps(
                        {"model": "deepseek-chat", "messages": [{"role": "user", "content": "hi"}]}
                    ),
                },
                "response": {
                    "status": {"code": 200, "message": "OK"},
                    "headers": {
                        "Content-Encoding": ["gzip"],
                        "Date": ["Tue, 01 Dec 2026 10:00:00 GMT"],
                    },
                    "body": {
                        "string": gzip.compress(
                            json.dumps(
                                {
                                    "id": "c1",
                                    "model": "deepseek-chat",
                                    "choices": [],
                                    "usage": {
                                        "prompt_tokens": 70,
                                        "completion_tokens": 5,
                                        "total_tokens": 75,
                                        "prompt_cache_hit_tokens": 64,
                                        "prompt_cache_miss_tokens": 6,
                                    },
                                }
                            ).encode()
                        )
                    },
                },
            }
        ],
        "version": 1,
    }
    (tmp_path / "good.yaml").write_text(yaml.safe_dump(good))
    wh = tmp_path / "wh"
    out = cli("ingest", str(tmp_path), "-w", str(wh))
    assert out.returncode == 0, out.stderr
    [row] = _rows(wh)
    assert (row["input_tokens"], row["cache_read_tokens"], row["output_tokens"]) == (70, 64, 5)
    assert row["started_at"] == datetime(2026, 12, 1, 10, tzinfo=UTC)
    got = cli("sql", "-w", str(wh), "--format", "json", "select * from rejects order by source")
    reasons = {Path(r["source"]).name: r["reason"] for r in json.loads(got.stdout)}
    assert reasons.keys() == BAD.keys()
    assert reasons["not_yaml.yaml"].startswith("cassette is not valid YAML")
    assert "no request.uri" in reasons["no_uri.yaml"]
    assert "python/object/apply:os.system" in reasons["object.yaml"]  # refused, never run
    assert "content-encoding could not be decoded" in reasons["bad_gzip.yaml"]
    assert reasons["bad.json"].startswith("cassette is not valid JSON")
    _no_secrets(wh)
    assert b"sk-secret-abcdef0123456789" not in b"".join(
        f.read_bytes() for f in wh.rglob("*") if f.is_file()
    )


def _one_call_cassette(n: int) -> str:
    body = json.dumps({"model": "deepseek-chat", "messages": [{"role": "user", "content": f"{n}"}]})
    usage = {"prompt_tokens": 10 + n, "completion_tokens": 1, "prompt_cache_hit_tokens": 0}
    answer = {"id": f"c{n}", "model": "deepseek-chat", "choices": [], "usage": usage}
    interaction = {
        "request": {"uri": "https://api.deepseek.com/chat/completions", "method": "POST",
                    "headers": {}, "body": body},
        "response": {"status": {"code": 200, "message": "OK"},
                     "headers": {"Date": ["Tue, 01 Dec 2026 10:00:00 GMT"]},
                     "body": {"string": json.dumps(answer)}},
    }  # fmt: skip
    return yaml.safe_dump({"interactions": [interaction], "version": 1})


def test_a_worker_writes_and_forgets_finished_cassettes_once_together_they_pass_its_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hashlib

    from pipeline import ingest_buffers, ingest_plan, ingest_worker

    # the budget: 3 buffered requests, for the worker's total and for each source's buffers
    monkeypatch.setattr(ingest_worker, "FLUSH_REQUESTS", 3)
    monkeypatch.setattr(ingest_buffers, "FLUSH_REQUESTS", 3)
    worker = ingest_worker.Worker(str(tmp_path / "wh"), ingest_worker.Options(), 0)
    held, parts = [], []
    for n in range(5):
        path = tmp_path / f"c{n}.yaml"
        path.write_text(_one_call_cassette(n))
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        assert worker.run(ingest_plan.Task(str(path), "vcr_cassette", digest)) == (1, 1, 0, 0)
        held.append(len(worker.buffers))
        parts.append(len(list((tmp_path / "wh").rglob("requests/**/*.parquet"))))
    # Each cassette alone is far below the budget; the third brings the worker's total to it:
    # all three are written and, read to the end, forgotten
    assert held == [1, 2, 0, 1, 2]
    assert parts == [0, 0, 3, 3, 3]
    worker.finish()
    assert len(list((tmp_path / "wh").rglob("requests/**/*.parquet"))) == 5


@pytest.mark.parametrize(
    "head",
    [
        "interactions:\n- request: {}\n",
        "---\n# recorded by hand\n\nversion: 1\ninteractions: []\n",
        "version: 1\r\ninteractions:\r\n- request: {}\r\n",
        '{\n    "version": 1,\n    "interactions": []\n}\n',
        '{"interactions": [], "version": 1}',
    ],
)
def test_a_cassette_is_recognised_by_its_interactions_key_however_it_starts(
    tmp_path: Path, head: str
) -> None:
    path = tmp_path / "any.name"
    path.write_text(head)
    assert detect_format(path) == "vcr_cassette"


def test_yaml_that_is_not_a_cassette_is_not_taken_for_one(tmp_path: Path) -> None:
    from pipeline.errors import InputError

    path = tmp_path / "config.yaml"
    path.write_text("name: ci\ninteractions:\n- request: {}\n")  # not a top-level first key
    with pytest.raises(InputError, match="not a capture JSONL, HAR, OTLP/JSON file or VCR"):
        detect_format(path)


def _three_calls() -> dict[str, Any]:
    interactions = [yaml.safe_load(_one_call_cassette(n))["interactions"][0] for n in (1, 2, 3)]
    return {"interactions": interactions, "version": 1}


def test_a_damaged_interaction_is_one_reject_and_the_ones_around_it_land(
    tmp_path: Path, cli
) -> None:  # type: ignore[no-untyped-def]
    text = yaml.safe_dump(_three_calls())
    items = text.split("\n- ")
    assert len(items) == 4  # `interactions:`, then each item at column 0 (`- request:`)
    items[2] = "request: {uri: [unclosed\n  response: x"  # the second interaction, torn
    path = tmp_path / "torn.yaml"
    path.write_text("\n- ".join(items))
    wh = tmp_path / "wh"
    out = cli("ingest", str(path), "-w", str(wh))
    assert out.returncode == 0, out.stderr
    assert "3 records = 2 accepted + 1 rejected" in out.stderr
    assert [(r["source_index"], r["input_tokens"]) for r in _rows(wh)] == [(0, 11), (2, 13)]
    got = cli("sql", "-w", str(wh), "--format", "json", "select source_index, reason from rejects")
    [reject] = json.loads(got.stdout)
    assert reject["source_index"] == 1
    assert reject["reason"].startswith("cassette interaction is not valid YAML")


def test_a_cassette_whose_interactions_share_an_anchor_is_read_whole_and_alike(
    tmp_path: Path, cli
) -> None:  # type: ignore[no-untyped-def]
    data = _three_calls()
    shared = data["interactions"][0]["response"]["headers"]
    for interaction in data["interactions"]:
        interaction["response"]["headers"] = shared  # one object: PyYAML writes an alias
    text = yaml.dump(data, Dumper=yaml.SafeDumper)
    assert "&id001" in text and "*id001" in text
    path = tmp_path / "aliased.yaml"
    path.write_text(text)
    out = cli("ingest", str(path), "-w", str(tmp_path / "wh"))
    assert out.returncode == 0, out.stderr
    rows = _rows(tmp_path / "wh")
    assert [r["input_tokens"] for r in rows] == [11, 12, 13]
    assert {r["started_at"] for r in rows} == {datetime(2026, 12, 1, 10, tzinfo=UTC)}


def test_a_timestamp_in_the_system_prompt_of_a_recorded_test_fails_the_ci_gate(
    tmp_path: Path, cli
) -> None:  # type: ignore[no-untyped-def]
    """The use the cassettes are for: a test suite's recorded agent run, no production access,
    and `cacheaudit check` failing the build on the change that broke the cached prefix."""

    def two_turns(notes: list[dict[str, Any]]) -> None:
        with _serve("openai") as base:
            client = openai.OpenAI(base_url=base + "/v1", api_key=OPENAI_KEY, max_retries=0)
            history: list[Any] = [{"role": "user", "content": "Say hello"}]
            for now in ("10:00:01", "10:00:02"):
                system = {"role": "system", "content": f"Time: {now}. {LONG}"}
                r = client.chat.completions.create(model="gpt-4o", messages=[system, *history])
                assert r.usage is not None
                notes.append(r.usage.model_dump())
                reply = r.choices[0].message.content
                history += [
                    {"role": "assistant", "content": reply},
                    {"role": "user", "content": "more"},
                ]

    cassette = tmp_path / "cassettes" / "test_agent_turns.yaml"
    notes, _, _ = _record(cassette, two_turns)
    # The simulator's cache: the second turn's prompt starts with another time, so reads nothing
    assert [n["prompt_tokens_details"]["cached_tokens"] for n in notes] == [0, 0]
    wh = tmp_path / "wh"
    assert cli("ingest", str(cassette.parent), "-w", str(wh)).returncode == 0
    found = cli("findings", "-w", str(wh), "--format", "json")
    [finding] = json.loads(found.stdout)
    assert (finding["cause"], finding["change_class"]) == ("system_changed", "timestamp")
    assert finding["fix"] == "move the timestamp after the history"
    # what turn 2 could have read from turn 1's entry: past the 1024-token minimum, within
    # turn 1's whole prompt
    assert 1024 <= finding["tokens_lost"] <= notes[0]["prompt_tokens"]
    gate = cli("check", "-w", str(wh), "--max-lost-share", "0.05")
    assert gate.returncode == 7, gate.stderr
    assert "system_changed, timestamp" in gate.stdout
