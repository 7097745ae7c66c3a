"""Keys recognised by their value, not only by a header name: 50 planted keys of every shape, in
every place a user's traffic can carry one (non-standard key headers, credential fields of a
request body, prompt text, tool arguments, a provider's 401 body quoting the key, a capture
tool's error text, an OTLP span's status and attributes, a line too broken to read), through
the recording proxy and through ingest, build, summary, findings, diagnose and the weekly
report. Not one of them may be found in any byte written: capture files, every Parquet row,
the warehouse's DuckDB file, the report pages, rejects, stdout and stderr."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import httpx
import orjson
from fixtures.capture.harness import recording_proxy, serving
from test_ingest_support import capture_record, har_document, har_entry, line

OTLP_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "otlp" / "genai_spans.jsonl"


def _keys(n: int) -> dict[str, list[str]]:
    """n planted keys of each shape; every one contains `planted` and a number of its own."""
    return {
        "openai": [f"sk-proj-planted{i:02d}Ab3dEf6hIj9kLm" for i in range(n)],
        "openai_legacy": [f"sk-planted{i:02d}Qw3rTy6uI9oP1aS" for i in range(n)],
        "anthropic": [f"sk-ant-api03-planted{i:02d}Zx8cV7bN" for i in range(n)],
        "google": [f"AIzaSyPlanted{i:02d}aBcDeFgHiJkLmNoPqRsTuVw" for i in range(n)],
        "aws": [f"AKIAPLANTED{i:09d}" for i in range(n)],
        "groq": [f"gsk_planted{i:02d}aBcDeFgHiJkLmNoPq" for i in range(n)],
        "jwt": [
            f"eyJhbGciOiJIUzI1NiJ9.eyJwbGFudGVk{i:02d}fQ.c2lnplanted{i:02d}xyz" for i in range(n)
        ],
        # no shape at all: only the field or header name says it is a credential
        "named": [f"plainsecret-planted-{i:02d}" for i in range(n)],
    }


KEYS = _keys(8)
ALL = [k for group in KEYS.values() for k in group]


def _chat_body(i: int) -> bytes:
    """A request whose credential fields, prompt text and tool arguments each carry a key."""
    return orjson.dumps(
        {
            "model": "gpt-4o",
            "api_key": KEYS["named"][i],
            "apiKey": KEYS["google"][i],
            "messages": [
                {"role": "system", "content": f"Deploy with {KEYS['aws'][i]} and {KEYS['jwt'][i]}"},
                {"role": "user", "content": f"my keys: {KEYS['anthropic'][i]} {KEYS['groq'][i]}"},
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {
                                "name": "login",
                                "arguments": orjson.dumps(
                                    {"password": KEYS["named"][i + 1], "user": "ann"}
                                ).decode(),
                            },
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": KEYS["openai_legacy"][i]},
            ],
        }
    )


def _unauthorized(key: str) -> bytes:
    return orjson.dumps(
        {
            "error": {
                "message": f"Incorrect API key provided: {key}. You can find your API key at"
                " https://platform.openai.com/account/api-keys.",
                "type": "invalid_request_error",
                "code": "invalid_api_key",
            }
        }
    )


def _foreign_capture(path: Path) -> None:
    """A capture written by some other tool, keys and all."""
    records = []
    for i in range(3):
        record = capture_record(
            i,
            headers=[
                ["content-type", "application/json"],
                ["X-LLM-Key", KEYS["named"][i + 2]],
                ["x-openai-key", KEYS["named"][i + 3]],
                ["X-Trace-Note", f"caller {KEYS['openai'][i]}"],
            ],
            body=_chat_body(i),
        )
        records.append(record)
    refused = capture_record(3, body=_chat_body(3))
    refused["response"].update(status=401, body=_unauthorized(KEYS["openai"][3]).decode())
    records.append(refused)
    cut = capture_record(4, body=_chat_body(4))
    cut["outcome"], cut["error"] = (
        "interrupted",
        f"upstream closed; sent Bearer {KEYS['openai'][4]}",
    )
    cut["response"] = None
    records.append(cut)
    broken = b'{"schema_version": 1, "request": {"headers": [["x-llm-key", "%s"]' % (
        KEYS["openai"][5].encode()
    )
    path.write_bytes(b"".join(line(r) for r in records) + broken + b"\n")


def _har(path: Path) -> None:
    entry = har_entry(
        7,
        headers=[
            {"name": "content-type", "value": "application/json"},
            {"name": "X-LLM-Key", "value": KEYS["google"][5]},
        ],
    )
    entry["request"]["postData"]["text"] = _chat_body(5).decode()
    path.write_bytes(har_document([entry]))


def _otlp(path: Path) -> None:
    text = OTLP_FIXTURE.read_text()
    assert "Rate limit reached" in text and "be brief" in text
    text = text.replace("Rate limit reached", f"Incorrect API key provided: {KEYS['openai'][6]}")
    text = text.replace("be brief", f"be brief, use {KEYS['anthropic'][6]}")
    path.write_text(text)


async def _refusing_upstream(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """A provider answering 401 and quoting the key it was sent, as OpenAI does."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            kind = "startup" if message["type"] == "lifespan.startup" else "shutdown"
            await send({"type": f"lifespan.{kind}.complete"})
            if kind == "shutdown":
                return
    while (await receive()).get("more_body"):
        pass
    auth = dict(scope["headers"]).get(b"authorization", b"").decode()
    body = _unauthorized(auth.removeprefix("Bearer "))
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": 401, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _through_the_proxy(out: Path, log: list[str]) -> None:
    with (
        serving(_refusing_upstream) as up,
        recording_proxy(up.url, out, log=log) as (proxy, _app),
        httpx.Client() as client,
    ):
        response = client.post(
            f"{proxy.url}/v1/chat/completions",
            headers={
                "authorization": f"Bearer {KEYS['openai'][6]}",
                "X-LLM-Key": KEYS["named"][5],
                "x-openai-key": KEYS["named"][6],
                "X-Debug": KEYS["aws"][6],
            },
            content=_chat_body(6),
        )
        assert response.status_code == 401
        assert KEYS["openai"][6] in response.text  # the client still sees what was sent


def _every_byte(root: Path) -> str:
    """Everything written under root, Parquet and DuckDB files read as their rows (their bytes
    are compressed, so a raw grep could miss a key that is there)."""
    texts = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if path.suffix == ".parquet":
            rows = duckdb.sql("SELECT * FROM read_parquet(?)", params=[str(path)]).fetchall()
            texts.append(repr(rows))
        elif path.suffix == ".duckdb":
            with duckdb.connect(str(path), read_only=True) as con:
                tables = con.sql(
                    "SELECT table_name FROM information_schema.tables"
                    " WHERE table_type = 'BASE TABLE'"
                ).fetchall()
                for (name,) in tables:
                    texts.append(repr(con.table(name).fetchall()))
        texts.append(path.read_bytes().decode("utf-8", "replace"))
    return "\n".join(texts)


def test_fifty_planted_keys_reach_no_byte_written_by_capture_ingest_or_reports(
    cli: Any, tmp_path: Path
) -> None:
    assert len(ALL) >= 50 and len(set(ALL)) == len(ALL)
    inputs, proxied = tmp_path / "in", tmp_path / "capture"
    inputs.mkdir()
    _foreign_capture(inputs / "foreign.jsonl")
    _har(inputs / "browser.har")
    _otlp(inputs / "spans.jsonl")
    log: list[str] = []
    _through_the_proxy(proxied, log)
    planted_in_inputs = _every_byte(inputs)
    used = [k for k in ALL if k in planted_in_inputs or k in KEYS["named"][5:7] + KEYS["aws"][6:]]
    assert len(used) >= 40, "the inputs must carry the keys this test looks for"

    wh, reports = tmp_path / "wh", tmp_path / "reports"
    outputs = ["\n".join(log)]
    commands = [
        ("ingest", str(inputs), str(proxied), "-w", str(wh)),
        ("build", "-w", str(wh)),
        ("summary", "-w", str(wh)),
        ("findings", "-w", str(wh)),
        ("diagnose", "--worst", "5", "-w", str(wh)),
        ("report", "weekly", "--all", "-w", str(wh), "-o", str(reports)),
        ("sql", "select * from rejects", "-w", str(wh)),
    ]
    for args in commands:
        result = cli(*args)
        assert result.returncode == 0, (args, result.stderr)
        outputs += [result.stdout, result.stderr]
    ((rows,),) = duckdb.sql(
        "SELECT count(*) FROM read_parquet(?)", params=[str(wh / "requests" / "**" / "*.parquet")]
    ).fetchall()
    assert rows >= 6  # the exchanges landed: only their keys are gone
    ((rejects,),) = duckdb.sql(
        "SELECT count(*) FROM read_parquet(?)", params=[str(wh / "rejects" / "*.parquet")]
    ).fetchall()
    assert rejects >= 1  # the broken line is a reject, with a masked excerpt

    written = "\n".join([*outputs, _every_byte(proxied), _every_byte(wh), _every_byte(reports)])
    leaked = [k for k in ALL if k in written]
    assert leaked == []
    assert "[REDACTED" in written
