from __future__ import annotations

import json
import re

from hypothesis import given
from hypothesis import strategies as st

from pipeline.body_secrets import mask_secrets, mask_texts
from pipeline.redact import (
    REDACTED,
    account_of,
    fingerprint,
    redact_headers,
    redact_text,
    redact_url,
)
from pipeline.sources.capture import excerpt


def test_every_secret_header_is_replaced_whatever_its_case() -> None:
    headers = [
        ("Authorization", "Bearer sk-live-123"),
        ("X-API-Key", "k1"),
        ("api-key", "k2"),
        ("x-goog-api-key", "k3"),
        ("Cookie", "session=abc"),
        ("set-cookie", "a=b"),
        ("Proxy-Authorization", "Basic xyz"),
        ("content-type", "application/json"),
    ]
    out = dict(redact_headers(headers))
    assert out["content-type"] == "application/json"
    for name, _ in headers[:-1]:
        assert out[name] == REDACTED


def test_a_key_query_parameter_is_redacted_and_other_parameters_kept() -> None:
    url = "https://generativelanguage.googleapis.com/v1beta/models/g:generateContent?alt=sse&key=AIzaSECRET"
    out = redact_url(url)
    assert "AIzaSECRET" not in out
    assert "alt=sse" in out
    assert out.startswith(
        "https://generativelanguage.googleapis.com/v1beta/models/g:generateContent?"
    )


def test_a_url_without_secrets_is_returned_unchanged() -> None:
    url = "https://api.openai.com/v1/chat/completions?x=1"
    assert redact_url(url) == url


def test_userinfo_is_dropped_and_the_host_kept_as_written() -> None:
    assert redact_url("http://u:p@[::1]:8080/v1") == "http://[::1]:8080/v1"
    assert redact_url("https://me:pw@Gateway.Example:443/x") == "https://Gateway.Example:443/x"
    assert redact_url("https://me@host/x?key=abc") == "https://host/x?key=[REDACTED]"


def test_the_account_is_a_fingerprint_of_the_bearer_key_not_the_key() -> None:
    acct = account_of([("authorization", "Bearer sk-abc")], "https://x")
    assert acct == fingerprint("sk-abc")
    assert acct is not None and acct.startswith("acct_") and len(acct) == 17
    assert "sk-abc" not in acct


def test_the_same_key_in_different_headers_gives_the_same_account() -> None:
    a = account_of([("x-api-key", "secret-1")], "https://api.anthropic.com/v1/messages")
    b = account_of([("Authorization", "Bearer secret-1")], "https://api.openai.com/")
    c = account_of([], "https://g/v1:generateContent?key=secret-1")
    assert a == b == c


def test_no_key_means_no_account() -> None:
    assert account_of([("content-type", "application/json")], "https://x/y") is None


def test_key_shaped_strings_in_free_text_are_masked() -> None:
    text = "Incorrect API key provided: sk-proj-abcdefghijklmnopqrstuvwx. Bearer abcdefgh12345"
    out = redact_text(text)
    assert "sk-proj-abcdefghijklmnopqrstuvwx" not in out
    assert "abcdefgh12345" not in out


@given(
    st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=8, max_size=40)
)
def test_a_secret_header_value_never_survives_redaction(secret: str) -> None:
    headers = [("authorization", f"Bearer {secret}"), ("x-api-key", secret)]
    values = [value for _, value in redact_headers(headers)]  # names may contain the secret
    assert all(secret not in value or secret in REDACTED for value in values)


CREDENTIAL_HEADERS = (
    "X-Auth-Token",
    "x-access-token",
    "x-amz-security-token",
    "x-client-secret",
    "helicone-auth",
    "cf-aig-authorization",
    "x-portkey-api-key",
    "Ocp-Apim-Subscription-Key",
    "x-user-password",
    "x-functions-key",  # Azure Functions
)
ORDINARY_HEADERS = (
    "x-request-id",
    "content-type",
    "idempotency-key",
    "x-ratelimit-remaining-tokens",
    "anthropic-ratelimit-input-tokens-remaining",
    "x-amzn-bedrock-input-token-count",
    "www-authenticate",
    "openai-organization",
    "x-stainless-retry-count",
)


def test_headers_named_for_a_credential_are_redacted_and_ordinary_ones_kept() -> None:
    headers = [(name, f"value-of-{name}") for name in CREDENTIAL_HEADERS + ORDINARY_HEADERS]
    out = dict(redact_headers(headers))
    assert {n for n in CREDENTIAL_HEADERS if out[n] != REDACTED} == set()
    assert {n for n in ORDINARY_HEADERS if out[n] != f"value-of-{n}"} == set()


def test_a_key_after_a_semicolon_or_an_encoded_separator_is_redacted_and_the_rest_kept() -> None:
    base = "https://gw.example/v1/chat/completions"
    cases = {
        f"{base}?alt=sse;key=sk-SEMI1": f"{base}?alt=sse;key={REDACTED}",
        f"{base}?a=1&x=1%3Bkey%3Dsk-SEMI2&b=2": f"{base}?a=1&x=1%3Bkey%3D{REDACTED}&b=2",
        f"{base}?x=1%3btoken%3dsk-SEMI3%26y=2": f"{base}?x=1%3btoken%3d{REDACTED}%26y=2",
        f"{base}?apiKey=sk-SEMI4;max_tokens=5": f"{base}?apiKey={REDACTED};max_tokens=5",
        f"{base};token=sk-SEMI5?alt=sse": f"{base};token={REDACTED}?alt=sse",
    }
    for url, expected in cases.items():
        assert redact_url(url) == expected
        assert "SEMI" not in redact_text(f"GET {url} failed")


def test_an_auth_token_header_or_a_semicolon_key_still_gives_the_account() -> None:
    assert account_of([("X-Auth-Token", "tok-1")], "https://gw/v1") == fingerprint("tok-1")
    assert account_of([], "https://gw/v1?alt=sse;key=tok-2") == fingerprint("tok-2")
    assert account_of([], "https://gw/v1?x=1%3Bkey%3Dtok-3") == fingerprint("tok-3")
    # The key headers keep their precedence: the account does not change for existing traffic.
    both = [("x-auth-token", "tok-4"), ("authorization", "Bearer tok-5")]
    assert account_of(both, "https://gw/v1") == fingerprint("tok-5")


def test_credential_headers_quoted_in_free_text_are_masked() -> None:
    for text in (
        '["X-Auth-Token","tok-FREE1"]',
        '[\\"x-access-token\\", \\"tok-FREE1\\"]',
        "x-auth-token: tok-FREE1",
        '{"x-client-secret": "tok-FREE1"}',
    ):
        assert "FREE1" not in redact_text(text), text
    assert redact_text("x-ratelimit-remaining-tokens: 999") == "x-ratelimit-remaining-tokens: 999"


def _torn(line: str) -> bytes:
    """A capture line cut short (so it is only ever excerpted), written by a JSON writer that
    escapes `/` as `\\/` (PHP, some Java libraries)."""
    return line.replace("/", "\\/").encode()[:-3]


@given(st.text(alphabet='QXZ79/"\\+= ', min_size=12, max_size=40))
def test_no_part_of_a_secret_header_value_survives_in_an_excerpt_whatever_its_escapes(
    secret: str,
) -> None:
    value = json.dumps(secret)
    lines = [
        f'{{"request": {{"headers": [["x-amz-security-token", {value}], ["accept", "*/*"]]}}}}',
        f'{{"request": {{"headers": [{{"name": "api-key", "value": {value}}}]}}}}',
    ]
    if not set(secret) & set('"\\ '):  # key-shaped: quoted in free text as it is
        lines.append(f'{{"error": "upstream said x-api-key: {secret} was refused"}}')
    runs = re.findall(r"[QXZ79]{6,}", secret)
    for line in lines:
        out = excerpt(_torn(line) + b"~" * 30)
        assert not any(run in out for run in runs), (line, out)


def test_a_secret_after_an_escaped_slash_is_masked_to_its_end() -> None:
    line = _torn('{"request": {"headers": [["x-amz-security-token", "IQoJb/PLANTEDTAIL+abc=="]]}}')
    assert "PLANTEDTAIL" not in excerpt(line + b"~" * 30)
    har = b'{"name":"api-key","value":"x\\/PLANTED19"},{"name":"accept","value":"*\\/*"}'
    assert "PLANTED19" not in excerpt(har)


def test_credential_headers_in_otlp_span_attributes_are_masked_in_an_excerpt() -> None:
    span = {
        "name": "chat gpt-4o",
        "attributes": [
            {"key": "http.request.header.x-goog-api-key",
             "value": {"stringValue": "plainsecretvalue123456789"}},
            {"key": "gen_ai.request.model", "value": {"stringValue": "gpt-4o"}},
            {"key": "http.request.header.api-key",
             "value": {"arrayValue": {"values": [{"stringValue": "0123456789abcdef0123"}]}}},
        ],
    }  # fmt: skip
    text = json.dumps(span)
    for cut in (len(text), len(text) - 40):  # whole, or a line cut short
        out = excerpt(text[:cut].encode())
        assert "plainsecret" not in out and "0123456789abcdef" not in out, out
    assert "gpt-4o" in excerpt(text.encode())  # what is not a credential stays readable


def test_a_key_hidden_before_capture_is_no_account() -> None:
    url = "https://api.openai.com/v1/chat/completions"
    for hidden in ("Bearer [REDACTED]", "Bearer <redacted>", "Bearer ***", "Bearer <hidden>"):
        assert account_of([("authorization", hidden)], url) is None, hidden
    assert account_of([("x-api-key", "REDACTED")], url) is None
    assert (
        account_of([], "https://generativelanguage.googleapis.com/v1/m?key=%5BREDACTED%5D") is None
    )
    # a real key, even one holding such a word, still is one
    assert account_of([("authorization", "Bearer sk-hidden-abc123")], url) == fingerprint(
        "sk-hidden-abc123"
    )


def test_a_key_after_a_json_escape_is_masked_at_every_level_of_escaping() -> None:
    # a key on its own line of a prompt: in a body it follows `\n`, in a capture line (the body
    # as a JSON string) `\\n`; the letter n must not pass for part of the key
    key = "sk-proj-" + "Lm4Nb5Vc6Xz7Qa8W" * 3
    body = json.dumps({"messages": [{"role": "user", "content": f"Key:\n{key}\tend"}]})
    capture_line = json.dumps({"request": {"body": body}})
    for data in (body, capture_line):
        masked = mask_secrets(data.encode()).decode()
        assert key[8:] not in masked and len(masked) == len(data)
        assert json.loads(masked)  # still JSON, byte counts kept
    assert key[8:] not in mask_texts([body])[0].as_py()
    assert key[8:] not in redact_text(capture_line)


def test_a_cut_inside_a_key_drops_the_part_of_it_before_the_cut() -> None:
    from pipeline.redact import cut, cut_text

    key = "AIza" + "Qx7Wv6Ut5Sr4Pq3On2Ml1Kj0Ih9Gf8Ed7"  # 38 characters
    data = ("x" * 150 + " key: " + key + " tail").encode()
    # cut 10 characters into the key: too short to be recognised, so none of it is kept
    assert cut(data, 166) == ("x" * 150 + " key: ").encode()
    assert cut_text(data.decode(), 166) == "x" * 150 + " key: "
    # a cut right after the key or on a separator keeps what is before it
    assert cut(data, 156 + len(key)) == data[: 156 + len(key)]
    assert cut(b"abc def", 4) == b"abc " and cut(b"abc def", 3) == b"abc"
    assert cut(b"short", 200) == b"short"
    assert cut(b"x" * 300, 200) == b""  # one run without a separator: nothing to quote safely


def test_a_header_written_as_a_list_as_vcr_cassettes_do_is_masked_in_free_text() -> None:
    value = "068bb4d2e9f1a3c5b7d9e0f2a4c6e8b0"
    yaml = f"headers:\n  api-key:\n  - {value}\n  cookie:\n  - session-{value}\n"
    as_json = json.dumps({"headers": {"api-key": [value], "X-Api-Token": [value]}})
    for text in (yaml, as_json, as_json.replace('": ["', '":["')):
        masked = redact_text(text)
        assert value not in masked and REDACTED in masked, masked


def _masked_everywhere(content: str) -> list[str]:
    """`content` as a prompt after each masking it meets on its way to disk: a body and a capture
    line (the proxy's writer, same length, still JSON), the stored prompt text, an excerpt."""
    body = json.dumps({"messages": [{"role": "user", "content": content}]})
    capture_line = json.dumps({"request": {"body": body}})
    out = []
    for data in (body, capture_line):
        masked = mask_secrets(data.encode()).decode()
        assert len(masked) == len(data) and json.loads(masked), masked
        out.append(masked)
    out.append(mask_texts([body])[0].as_py())
    out.append(redact_text(body))
    out.append(redact_text(capture_line))
    return out


def test_a_credential_field_alone_in_a_body_is_masked() -> None:
    # nothing else in these bodies looks like a secret: the screen that spares a body without a
    # candidate must still find each field name the rule says is a credential
    for name in ("password", "authorization", "password_hash", "proxy-authorization", "pwd"):
        body = json.dumps({"user": "ann", name: "Hunter2-Hunter2-Hunter2"})
        masked = mask_secrets(body.encode()).decode()
        assert "Hunter2" not in masked and len(masked) == len(body), masked
        assert "Hunter2" not in mask_texts([body])[0].as_py(), name


PLAIN_SECRETS = {
    "env": ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLE", "wJalrXUtnFEMI"),
    "env quoted": ('DB_PASSWORD="c0rrect-h0rse-battery"', "c0rrect-h0rse"),
    "curl": ('curl -H "x-api-key: 7f3a9c2e5b1d4f6a8c0e" https://api.example.com', "7f3a9c2e5b1d"),
    "bearer": ("Authorization: Bearer 4f1e8d2c7b3a9e6f5d0c", "4f1e8d2c7b3a"),
    "flag": ("tool --api-key=9d8c7b6a5f4e3d2c1b0a run", "9d8c7b6a5f4e"),
    "url password": ("postgres://app:s3cr/et-pa55@db.internal:5432/app", "s3cr/et-pa55"),
    "azure code": ("https://fn.azurewebsites.net/api/run?code=Zm9vYmFyYmF6cXV4==&x=1", "Zm9vYmFy"),
    "pem": (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7bq0Xk\nq9Zp3Lr8Tn2Vw5Yc1\n"
        "-----END RSA PRIVATE KEY-----",
        "MIIEpAIBAAKCAQEA7bq0Xk",
    ),
}


def test_secrets_written_as_plain_text_in_a_prompt_are_masked_everywhere_they_are_stored() -> None:
    for what, (secret, part) in PLAIN_SECRETS.items():
        content = f"Here is my config:\n{secret}\nnext line stays"
        for masked in _masked_everywhere(content):
            assert part not in masked, (what, masked)
            assert "next line stays" in masked, (what, masked)  # the value ends with its line
    pem = PLAIN_SECRETS["pem"][0]
    assert "q9Zp3Lr8Tn2Vw5Yc1" not in mask_texts([json.dumps({"c": pem})])[0].as_py()


def test_a_private_key_field_is_masked_through_its_escaped_line_ends() -> None:
    body = json.dumps({"client_secret": "line1\nline2-secret-tail", "private_key": "AB\\CD\nEF"})
    for masked in (mask_secrets(body.encode()).decode(), mask_texts([body])[0].as_py()):
        assert "line2-secret-tail" not in masked and "EF" not in masked, masked


def test_ordinary_text_next_to_credential_like_words_is_kept() -> None:
    kept = (
        "x-request-id: req-8d9f",
        "idempotency-key: 5f2b",
        "prompt_tokens=120 completion_tokens=30",
        "see https://us-east5-aiplatform.googleapis.com/v1/models/claude@20240620:rawPredict",
        "a monkey: banana",
    )
    for text in kept:
        body = json.dumps({"c": text})
        assert mask_secrets(body.encode()).decode() == body, text
        assert mask_texts([body])[0].as_py() == body, text
    url = json.dumps({"url": "https://h.example.com:443/v1/models/claude@2024:raw"})
    assert mask_secrets(url.encode()).decode() == url  # a port, not a password


def test_a_password_with_a_slash_in_a_url_is_removed_with_its_user() -> None:
    assert redact_url("https://app:pa/ss@db.example.com/v1?x=1") == "https://db.example.com/v1?x=1"
    assert redact_url("https://app:p/a/s@h:8080/x") == "https://h:8080/x"
    kept = "https://h.example.com:443/v1/models/claude@2024:raw"
    assert redact_url(kept) == kept
    assert redact_url("https://fn.example.net/api/x?code=abc%3D%3D&v=1") == (
        f"https://fn.example.net/api/x?code={REDACTED}&v=1"
    )
    assert "pa/ss" not in redact_text("connect to mysql://app:pa/ss@db:3306/x failed")


def test_a_credential_name_is_found_whatever_comes_before_it_or_inside_it() -> None:
    # the name after a JSON escape's letter or digits, after `--` or `_`, holding two name words
    cases = {
        "quote": ("say \\u0022password=Sw0rdfish-99\\u0022", "Sw0rdfish"),
        "flag": ("--client-secret=Sw0rdfish-99 next", "Sw0rdfish"),
        "private": ("_auth_token: Sw0rdfish-99", "Sw0rdfish"),
        "upper": ("X-AUTH-TOKEN: Sw0rdfish-99", "Sw0rdfish"),
        "dotted": ("settings.db.password = Sw0rdfish-99;", "Sw0rdfish"),
    }
    for what, (text, secret) in cases.items():
        data = json.dumps({"c": text}).encode().replace(b"\\\\u0022", b"\\u0022")
        masked = mask_secrets(data)
        assert secret.encode() not in masked and len(masked) == len(data), (what, masked)
    kept = json.dumps({"c": "tokenizer: ready; keyboard = us; monkey: banana"}).encode()
    assert mask_secrets(kept) == kept


# Pieces of prompt text around which a mask could break the JSON it is in: names and their
# separators, quotes and escapes at the end of a line, PEM blocks cut short.
_PIECES = [
    "password", "token", "_auth_token", "DB_PASSWORD", "api-key", "Authorization", "secret",
    ":", "=", " = ", "==", ": ", "\n", "\t", '"', "'", "\\", "\\n", "\u0022", "[", "-", " ",
    "Bearer 9f8e7d6c5b4a", "basic", "abc123", "correct horse", "-----BEGIN PRIVATE KEY-----",
    "MIIEvQ+/=", "-----END PRIVATE KEY-----", "postgres://app:p/w@db", "?key=", "&code=", "x",
]  # fmt: skip


@given(st.lists(st.sampled_from(_PIECES), min_size=1, max_size=14), st.integers(1, 3))
def test_masking_never_breaks_the_json_a_secret_is_in_at_any_level(
    pieces: list[str], levels: int
) -> None:
    text = "".join(pieces)
    doc = json.dumps({"messages": [{"role": "user", "content": text}], "n": 1})
    for _ in range(levels - 1):
        doc = json.dumps({"body": doc, "n": 2})
    masked = mask_secrets(doc.encode()).decode()
    assert len(masked) == len(doc)
    inner = json.loads(masked)
    for _ in range(levels - 1):
        inner = json.loads(inner["body"])
    assert inner["n"] == 1 and inner["messages"][0]["role"] == "user"
    stored = mask_texts([json.dumps({"role": "user", "content": text})])[0].as_py()
    assert json.loads(stored)["role"] == "user"


def test_a_value_at_the_end_of_a_line_or_quoted_is_masked_without_breaking_the_json() -> None:
    cases = {
        "line end": ("if not password:\n    raise Missing()", None),
        "tab": ("token=\tabc", None),
        "pem cut": ("x\n-----BEGIN PRIVATE KEY-----\nMIIEvQ8f3a", "MIIEvQ8f3a"),
        "quoted": ('DB_PASSWORD="correct horse battery staple"', "horse battery"),
        "single": ("password='correct horse battery'", "horse battery"),
        "closing quote": ("the password:", None),
        "comparison": ("if password == expected:", None),
    }
    for what, (text, secret) in cases.items():
        for masked in _masked_everywhere(text):
            if secret is not None:
                assert secret not in masked, (what, masked)
        body = json.dumps({"c": text, "n": 1})
        assert json.loads(mask_secrets(body.encode()))["n"] == 1, what
    assert "== expected" in mask_texts([json.dumps({"c": "if password == expected:"})])[0].as_py()
    # a name after `_` is masked in stored text as in capture lines
    assert "Sw0rdfish" not in mask_texts([json.dumps({"c": "_auth_token: Sw0rdfish99"})])[0].as_py()
    # ordinary words after bearer/basic are kept: a credential has a digit
    kept = json.dumps({"c": "I have a basic question about the bearer instrument"})
    assert mask_texts([kept])[0].as_py() == kept and mask_secrets(kept.encode()) == kept.encode()


def test_a_name_a_capture_gives_keeps_its_words_and_two_names_stay_two() -> None:
    from pipeline.redact import without_keys

    kept = ["eval pass=1", "pass:2", "auth:v1", "basic experiments", "Basic smoke-tests",
            "token:budget", "/api/v1/auth/token:refresh", "bearer instrument"]  # fmt: skip
    assert [without_keys(v) for v in kept] == kept
    one, two = without_keys("sess password=hunter22"), without_keys("sess password=hunter23")
    assert one is not None and two is not None
    assert "hunter2" not in one + two and one != two  # masked by fingerprint, not merged
    # a key as long as keys are, though it has no digit (one random key in a hundred)
    agent = without_keys("agent api_key=qasrMnVDChiuIHvwgpdAjhctnzmx")
    assert agent is not None and agent.startswith("agent api_key=acct_")


def test_a_request_key_is_masked_where_an_answer_quotes_it_and_nowhere_else() -> None:
    from pipeline.redact import mask_values, secret_values

    headers = [("cookie", "sid=abcdef12; theme=dark"), ("api-key", "lm-studio"),
               ("authorization", "Bearer 12345678"), ("x-api-key", "9f8e7d6c5b4a3928")]  # fmt: skip
    # a cookie is no key quoted back; a placeholder or a number of digits alone is none either
    assert secret_values(headers, "https://h/v1/x?token=anything") == [b"9f8e7d6c5b4a3928"]
    answer = b'{"created": 19f8e7d6c5b4a3928, "m": "key 9f8e7d6c5b4a3928."}'
    assert mask_values(answer, [b"9f8e7d6c5b4a3928"]) == (
        b'{"created": 19f8e7d6c5b4a3928, "m": "key [REDACTED******]."}'
    )


def test_the_cheap_prefilter_passes_every_text_the_screen_matches() -> None:
    # mask_secrets_each skips Arrow's screen (0.5 ms to compile) for a text none of whose
    # words could start a match: that must never skip a text the screen would have matched
    import random

    import pyarrow as pa
    import pyarrow.compute as pc

    from pipeline.body_secrets import _SCREEN, could_hold_a_secret

    parts = [
        "sk-", "SK-", "ant-", "proj-", "gsk_", "xai-", "AKIA", "ASIA", "AIza", "ghp_",
        "github_pat_", "xoxb-", "hf_", "eyJ", "Q7rT2mX9vLp4Wd8sKz3N", "0123456789ABCDEF",
        "Authorization", "COOKIE", "passwd", "Password", "bearer ", "Basic ", "PRIVATE KEY",
        "https://", "u:p@", "api_", "KEY", "token", "Secret", "auth", "credentials", "sig",
        "signature", "pwd", "pass", "?", "&", ";", "%26", "%3B", "code", "=", "%3D", ":",
        '\\"', '"', " ", ".", "-", "_", "hello", "world",
    ]  # fmt: skip
    rng = random.Random(7)
    texts = ["".join(rng.choice(parts) for _ in range(rng.randint(1, 4))).encode()
             for _ in range(60_000)]  # fmt: skip
    matched = pc.match_substring_regex(pa.array(texts, pa.binary()), _SCREEN).to_pylist()
    assert sum(matched) > 5_000  # the screen matched many: the check below is not vacuous
    pairs = zip(texts, matched, strict=True)
    assert [t for t, hit in pairs if hit and not could_hold_a_secret(t)] == []
