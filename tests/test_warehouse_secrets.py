"""No secret from any header or URL reaches the warehouse: every byte is searched, raw and with
every Parquet column decoded; the account fingerprint is there instead."""

from __future__ import annotations

import hashlib
from pathlib import Path

import orjson
import pyarrow.parquet as pq
from test_ingest_support import capture_record, har_document, har_entry, line, run

OPENAI = "https://api.openai.com/v1/chat/completions"
# Not key-shaped on purpose: they must be removed because of where they are, not how they look.
SECRETS = {
    "authorization": "tok-AUTHZ-51f0c2",
    "x-api-key": "tok-XAPIKEY-8d21",
    "api-key": "tok-APIKEY-77ae",
    "x-goog-api-key": "tok-GOOG-90b3",
    "cookie": "session=tok-COOKIE-3c4d",
    "set-cookie": "sid=tok-SETCOOKIE-e5f6; Path=/",
    "proxy-authorization": "Basic tok-PROXY-a1b2",
    "key": "tok-QUERYKEY-c7d8",
}


def _fingerprint(key: str) -> str:
    return "acct_" + hashlib.sha256(key.encode()).hexdigest()[:12]


def _header_sets() -> list[tuple[list[tuple[str, str]], str]]:
    """(request headers, url) per record: each secret header alone, with another request."""
    sets = []
    for name in ("x-api-key", "api-key", "x-goog-api-key", "cookie", "proxy-authorization"):
        sets.append(([("content-type", "application/json"), (name, SECRETS[name])], OPENAI))
    sets.append(([("Authorization", "Bearer " + SECRETS["authorization"])], OPENAI))
    sets.append(([("Accept", "application/json")], f"{OPENAI}?key={SECRETS['key']}&v=1"))
    return sets


def _jsonl(path: Path) -> None:
    lines = []
    for i, (headers, url) in enumerate(_header_sets()):
        rec = capture_record(i, headers=[list(h) for h in headers], url=url)
        rec["response"]["headers"].append(["Set-Cookie", SECRETS["set-cookie"]])
        lines.append(line(rec))
    # Unreadable lines keep an excerpt: secrets in their first bytes must be masked there too.
    broken = capture_record(99, headers=[[n, v] for n, v in _header_sets()[0][0]], url=OPENAI)
    broken["request"]["headers"] = [[n, SECRETS[n]] for n in SECRETS if n != "key"]
    broken["request"]["url"] = f"{OPENAI}?key={SECRETS['key']}"
    lines.append(orjson.dumps({"request": broken["request"]})[:-30] + b"\n")
    path.write_bytes(b"".join(lines))


def _har(path: Path) -> None:
    entries = []
    for i, (headers, url) in enumerate(_header_sets()):
        # Other exchanges than the capture's (the same ones would land once, from the capture).
        entry = har_entry(i + 10, url=url, headers=[{"name": n, "value": v} for n, v in headers])
        entry["response"]["headers"].append({"name": "set-cookie", "value": SECRETS["set-cookie"]})
        entry["request"]["cookies"] = [{"name": "session", "value": SECRETS["cookie"]}]
        entries.append(entry)
    bad = har_entry(50, url=f"{OPENAI}?key={SECRETS['key']}")
    bad["startedDateTime"] = "not a time"  # rejected, with an excerpt
    bad["request"]["headers"] = [{"name": n, "value": SECRETS[n]} for n in SECRETS if n != "key"]
    bad["request"]["cookies"] = [{"name": "session", "value": SECRETS["cookie"]}]
    entries.append(bad)
    path.write_bytes(har_document(entries, pretty=True))


def _every_text(wh: Path) -> str:
    """Every byte under the warehouse, raw, plus every Parquet cell decoded to text."""
    parts = []
    for path in sorted(p for p in wh.rglob("*") if p.is_file()):
        parts.append(path.read_bytes().decode("latin-1"))
        if path.suffix == ".parquet":
            table = pq.read_table(path)
            for column in table.columns:
                parts.append(orjson.dumps(column.to_pylist(), default=str).decode())
    return "\n".join(parts)


def _secret_fragments() -> list[str]:
    # The distinctive part of each secret: a partial leak must be caught too.
    return [v.split("tok-")[1].split(";")[0] for v in SECRETS.values()]


def test_no_planted_secret_reaches_any_byte_of_the_warehouse(tmp_path: Path) -> None:
    jsonl, har = tmp_path / "capture.jsonl", tmp_path / "browser.har"
    _jsonl(jsonl)
    _har(har)
    wh = tmp_path / "wh"
    result = run([jsonl, har], wh)
    n = len(_header_sets())
    assert [(f.accepted, f.rejected) for f in result.files] == [(n, 1), (n, 1)]
    text = _every_text(wh)
    assert "tok-" not in text
    for fragment in _secret_fragments():
        assert fragment not in text
    for name in ("x-api-key", "api-key", "x-goog-api-key", "key"):
        assert _fingerprint(SECRETS[name]) in text
    assert _fingerprint(SECRETS["authorization"]) in text  # the token after "Bearer "
    assert "[REDACTED]" in text  # the reject excerpts kept their shape, masked


# Gateway conventions: a token header and keys in `;`-separated (or percent-encoded) parameters.
GATEWAY = {
    "x-auth-token": "tok-GWAUTH-4e1a",
    "x-gateway-token": "tok-GWOTHER-b7c2",  # not a well-known name: caught by the rule
    "semicolon": "tok-GWSEMI-0f93",
    "encoded": "tok-GWENC-62d8",  # how an older capture recorded `x=1;key=...`
}
GATEWAY_URLS = [
    OPENAI,
    f"{OPENAI}?alt=sse;key={GATEWAY['semicolon']}",
    f"{OPENAI}?x=1%3Bkey%3D{GATEWAY['encoded']}",
]
GATEWAY_HEADERS = [
    [("X-Auth-Token", GATEWAY["x-auth-token"]), ("x-request-id", "rid-1")],
    [("content-type", "application/json")],
    [("X-Gateway-Token", GATEWAY["x-gateway-token"])],
]


def test_no_gateway_token_header_or_semicolon_key_reaches_the_warehouse(tmp_path: Path) -> None:
    broken_url = f"{OPENAI}?alt=sse;key={GATEWAY['semicolon']}&x=1%3Bkey%3D{GATEWAY['encoded']}"
    broken_headers = [[n, GATEWAY[n]] for n in ("x-gateway-token", "x-auth-token")]
    lines, entries = [], []
    for i, (headers, url) in enumerate(zip(GATEWAY_HEADERS, GATEWAY_URLS, strict=True)):
        lines.append(line(capture_record(i, headers=[list(h) for h in headers], url=url)))
        har_headers = [{"name": n, "value": v} for n, v in headers]
        # Other exchanges than the capture's (the same ones would land once, from the capture).
        entries.append(har_entry(i + 10, url=url, headers=har_headers))
    # Unreadable records keep a redacted excerpt: the secrets near their start must go too.
    broken = capture_record(99, headers=broken_headers, url=broken_url)
    lines.append(orjson.dumps({"request": broken["request"]})[:-30] + b"\n")
    bad = har_entry(
        50, url=broken_url, headers=[{"name": n, "value": v} for n, v in broken_headers]
    )
    bad["startedDateTime"] = "not a time"
    entries.append(bad)
    jsonl, har = tmp_path / "gateway.jsonl", tmp_path / "gateway.har"
    jsonl.write_bytes(b"".join(lines))
    har.write_bytes(har_document(entries, pretty=True))

    wh = tmp_path / "wh"
    result = run([jsonl, har], wh)
    assert [(f.accepted, f.rejected) for f in result.files] == [(3, 1), (3, 1)]
    text = _every_text(wh)
    for secret in GATEWAY.values():
        assert secret.split("tok-")[1] not in text, secret
    for name in ("x-auth-token", "semicolon", "encoded"):
        assert _fingerprint(GATEWAY[name]) in text  # the account is still the key's hash


# Key shapes pasted into a prompt, each where JSON escaping puts a letter right before it: on a
# line of its own (`\n`), after a tab (`\t`), after a quote written as `\u0022`.
PASTED = {
    "openai": "sk-proj-" + "Qw3rTy7uIoP9aSdF" * 3,
    "google": "AIza" + "SyB4cD5eF6gH7iJ8kL9mN0oP1qR2sT3u",
    "github": "ghp_" + "Zx9Cv8Bn7Mm6Ll5Kk4Jj3Hh2Gg1Ff0Dd",
}


def _stored_text_of(body: bytes, tmp_path: Path) -> str:
    """Every byte of the warehouse one capture record with `body` makes, as text."""
    capture = tmp_path / "pasted.jsonl"
    capture.write_bytes(line(capture_record(0, body=body)))
    wh = tmp_path / "wh"
    result = run([capture], wh)
    assert [(f.accepted, f.rejected) for f in result.files] == [(1, 0)]
    return _every_text(wh)


def test_a_key_on_its_own_line_of_a_prompt_is_masked_in_the_stored_text(tmp_path: Path) -> None:
    content = (
        f"Credentials:\n{PASTED['openai']}\nand\t{PASTED['google']}\n"
        f"quoted \\u0022{PASTED['github']}"
    )
    body = orjson.dumps(
        {"model": "gpt-4o", "messages": [{"role": "user", "content": content}]}
    ).replace(b"\\\\u0022", b"\\u0022")  # the quote as a JSON escape, as some clients write it
    text = _stored_text_of(body, tmp_path)
    assert "Credentials:" in text  # the prompt text is stored, masked
    for key in PASTED.values():
        assert key[8:24] not in text, key


def test_a_key_cut_by_an_excerpt_or_a_message_leaves_no_part_of_it(tmp_path: Path) -> None:
    # byte 200 of each falls inside the key: a rejected body's excerpt, a 401 page's message
    key = PASTED["google"]
    prefix = b"x" * (200 - 10) + b" "  # the key starts at byte 191 and runs past 200
    not_json = prefix + key.encode() + b" and more"
    rejected = capture_record(0, body=not_json)
    page = capture_record(1)
    page["response"] = {
        "status": 401,
        "headers": [["content-type", "text/html"]],
        "body": (prefix + key.encode() + b" more</p>").decode(),
        "body_encoding": "utf-8",
        "chunks": None,
    }
    capture = tmp_path / "cut.jsonl"
    capture.write_bytes(line(rejected) + line(page))
    wh = tmp_path / "wh"
    result = run([capture], wh)
    assert [(f.accepted, f.rejected) for f in result.files] == [(1, 1)]
    text = _every_text(wh)
    assert "xxxxxxxxxx" in text  # the excerpt and the message are there, without the key
    assert key[4:9] not in text, key


def test_a_key_written_as_the_account_a_hint_or_a_url_path_is_not_stored(tmp_path: Path) -> None:
    key = PASTED["openai"]
    rec = capture_record(0, url=f"https://llm-proxy.example.com/{key}/v1/chat/completions")
    rec["account"] = key  # a hook that wrote the caller's key where the account goes
    rec["hints"] = {"session_id": f"s-{key}", "agent": f"agent {key}", "tags": ["ok", key]}
    capture = tmp_path / "named.jsonl"
    capture.write_bytes(line(rec))
    wh = tmp_path / "wh"
    result = run([capture], wh)
    assert [(f.accepted, f.rejected) for f in result.files] == [(1, 0)]
    text = _every_text(wh)
    assert key[8:24] not in text
    assert _fingerprint(key) in text  # the account still groups that key's traffic
    assert "/v1/chat/completions" in text and '"ok"' in text


def test_secrets_pasted_as_plain_text_into_a_prompt_are_not_stored(tmp_path: Path) -> None:
    # not key-shaped: a `.env` excerpt, a curl line, a connection string, a PEM private key
    secrets = ("wJalrXUtnFEMIK7MDENG", "7f3a9c2e5b1d4f6a8c0e", "s3cr/et-pa55", "MIIEpAIBAAKCAQEA")
    content = (
        f"My setup:\nAWS_SECRET_ACCESS_KEY={secrets[0]}\n"
        f'curl -H "x-api-key: {secrets[1]}" https://api.example.com\n'
        f"DATABASE_URL=postgres://app:{secrets[2]}@db:5432/app\n"
        f"-----BEGIN PRIVATE KEY-----\n{secrets[3]}7bq0Xk\n-----END PRIVATE KEY-----\n"
        "What is wrong?"
    )
    body = orjson.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": content}]})
    text = _stored_text_of(body, tmp_path)
    assert "What is wrong?" in text and "AWS_SECRET_ACCESS_KEY=" in text
    for secret in secrets:
        assert secret not in text, secret


def test_a_key_an_answer_quotes_back_or_a_hint_holds_as_text_is_not_stored(
    tmp_path: Path,
) -> None:
    # not key-shaped: only where it came from (the request's own header) says it is the key
    key, portkey = "9f8e7d6c5b4a39281706f5e4d3c2b1a0", "pk_live_abcdef123456"
    rec = capture_record(0, headers=[["api-key", key], ["x-portkey-api-key", portkey]])
    answer = {"error": {"message": f"Incorrect API key provided: {key}.", "type": "invalid"}}
    rec["response"].update(status=401, body=orjson.dumps(answer).decode())
    rec["error"] = f"upstream refused X-Portkey-Api-Key {portkey}"
    rec["hints"] = {"session_id": "sess password=hunter2", "agent": "a", "tags": ["token=Tag123x"]}
    capture = tmp_path / "quoted.jsonl"
    capture.write_bytes(line(rec))
    wh = tmp_path / "wh"
    result = run([capture], wh)
    assert [(f.accepted, f.rejected) for f in result.files] == [(1, 0)]
    text = _every_text(wh)
    assert "Incorrect API key provided" in text  # the message is kept, the key is not
    for secret in (key, portkey, "hunter2", "Tag123x"):
        assert secret not in text, secret


def test_a_key_in_the_answers_usage_object_or_finish_reason_is_not_stored(
    tmp_path: Path,
) -> None:
    # the usage object is kept as received (`raw_usage`), with whatever a gateway added to it
    shaped, named = "sk-proj-" + "Hw4Jd8Lq2Vn6Rb1Xz9Mc3Tk7", "gw-7Qm2Xv9Lp4Rz8Nc1"
    rec = capture_record(0)
    answer = orjson.loads(rec["response"]["body"])
    answer["usage"].update(gateway_note=f"billed to {shaped}", api_key=named)
    answer["choices"][0]["finish_reason"] = f"stop {shaped}"
    rec["response"]["body"] = orjson.dumps(answer).decode()
    capture = tmp_path / "usage.jsonl"
    capture.write_bytes(line(rec))
    wh = tmp_path / "wh"
    assert [(f.accepted, f.rejected) for f in run([capture], wh).files] == [(1, 0)]
    text = _every_text(wh)
    for secret in (shaped[8:], named):
        assert secret not in text, secret
    (row,) = pq.read_table(next((wh / "requests").rglob("*.parquet"))).to_pylist()
    usage = orjson.loads(row["raw_usage"])  # still JSON, the counts as they were
    assert usage["prompt_tokens"] == 1000 and usage["api_key"] == "[REDACTED]"
    assert row["finish_reason"] == "stop [REDACTED]"
