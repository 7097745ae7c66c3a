"""Secret removal at the boundary, and the account fingerprint.

Every source passes the URL and headers through `redact_url` / `redact_headers` (and takes
`account_of` from the raw ones) before an `Exchange` exists, and the capture tools do the same
before a record is written, so nothing downstream (capture files, dialects, warehouse, rejects,
reports) can see a key; `redact_text` masks what free text (error messages, reject excerpts)
may quote. The fingerprint is a short one-way hash of
the key: enough to group traffic per key (the scope of a provider's cache), useless to call an API.

Which names carry a secret (one rule for headers and query parameters; `is_secret_name`). The
name is lower-cased and cut into words at `-`, `_` and `.`; it is secret when
- its last word ends in `token`, `secret`, `password`/`passwd` or `apikey` (`x-auth-token`,
  `x-amz-security-token`, `access_token`, `accessToken`, `x-client-secret`, `apiKey`), or is
  `auth`, `credential(s)`, `signature`, `sig`, `cookie`, `pass` or `pwd` (`helicone-auth`,
  `x-amz-signature`, `set-cookie`, `DB_PASS`);
- it ends in `key` after a word that says whose key it is: api, access, auth, secret, private,
  client, account, session, subscription, service, master, admin, virtual (`x-api-key`,
  `x-goog-api-key`, `ocp-apim-subscription-key`, `subscriptionKey`);
- any word is `authorization`, `cookie` or `password`/`passwd` (`proxy-authorization`);
- or the whole name is `key` (Gemini's `?key=`); as a query parameter, also `code` (Azure
  Functions' `?code=`, an OAuth authorisation code).
Only the last word counts for `token` and `key`, so ordinary headers keep their values:
`x-request-id`, `content-type`, `idempotency-key`, `x-ratelimit-remaining-tokens`,
`x-amzn-bedrock-input-token-count` (usage read at ingest), `www-authenticate`.

Query parameters are split on `&` and `;`, and on their percent-encoded forms `%26` / `%3B`
(with `%3D` for `=`), so `?x=1;key=...` and `?x=1%3Bkey%3D...` are caught too.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from urllib.parse import SplitResult, unquote_plus, urlsplit, urlunsplit

from pipeline.secret_patterns import (
    KEY_BOUNDARY,
    KEY_SHAPES,
    NAME,
    NAME_BOUNDARY,
    PEM_BODY,
    PEM_HEAD,
    URL_SCHEME,
    USERINFO_VALUE,
    mask_of,
)
from pipeline.secret_patterns import (
    REDACTED as REDACTED,  # re-exported: the mask every module writes
)

# Well-known secret headers. The rule above covers more; these names are also used by the
# excerpt masking of unreadable capture lines (pipeline.sources.capture).
SECRET_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "api-key",
        "x-goog-api-key",
        "cookie",
        "set-cookie",
        "x-amz-security-token",
        "x-auth-token",
        "x-access-token",
        "ocp-apim-subscription-key",
    }
)
# Query parameters whose value is the caller's key (the fingerprint's last resort); every name
# the rule matches is redacted, these are the ones read for the account.
SECRET_QUERY_PARAMS = frozenset({"key", "api_key", "api-key", "apikey", "access_token", "token"})
# Headers whose value identifies the caller's key, in order of preference.
_KEY_HEADERS = (
    "x-api-key",
    "api-key",
    "x-goog-api-key",
    "authorization",
    "x-auth-token",
    "x-access-token",
    "ocp-apim-subscription-key",
)

_SECRET_NAME = re.compile(rf"key|{NAME}")
# Key-shaped strings that may appear in bodies or error text we keep (excerpts, messages).
_KEY_PATTERN = re.compile(
    rf"({KEY_BOUNDARY}(?:{KEY_SHAPES})|(?i:bearer|basic)\s+[A-Za-z0-9._~+/=-]{{8,}})"
)
_KEY_VALUE = re.compile(KEY_SHAPES)
# `?key=...` / `;token=...` / `%3Bkey%3D...` inside free text (an upstream's HTML error page
# quoting the URL, a URL in an error message).
_PARAM_IN_TEXT = re.compile(
    rf"(?i)((?:[?&;]|%26|%3B)(?:key|code|{NAME})(?:=|%3D))(?:(?!%26|%3B)[^&;\s\"'#<>])+"
)
# `api-key: ...` / `"x-api-key": "..."` / `x-auth-token=...` inside free text.
# A value keeps going through a JSON escape (`\/` as some writers send `/`): stopping at the first
# backslash left the rest of a key on disk; it ends at a line's end (`\n`, `\r`, `\t`).
# The value may be the first item of a list, as VCR cassettes write headers: `name: ["..."]` in
# JSON, `name:` then `- ...` in YAML.
_HEADER_IN_TEXT = re.compile(
    rf"(?i)({NAME_BOUNDARY}(?:{NAME})\\*\"?\s*[:=]\s*(?:\[\s*|-\s+)?(?:\\*[\"'])?)"
    rf"(?:[^\s\"'\\,;]|\\+[^\s\"'\\nrt])+"
)
# `DB_PASSWORD="correct horse"`: a quoted value is masked to its closing quote, spaces included.
_QUOTED_IN_TEXT = re.compile(
    rf"""(?i)({NAME_BOUNDARY}(?:{NAME})\\*"?\s*[:=]\s*(?:\\*"|'))(?:[^"'\\]|\\+[^"'\\])+"""
)
# `["x-auth-token", "..."]`: a header pair of a capture record quoted in an excerpt.
_HEADER_PAIR_IN_TEXT = re.compile(rf'(?i)((?<![\w.-])(?:{NAME})\\?"\s*,\s*\\?")(?:[^"\\]|\\.)*')
# user:password@ in a URL.
_USERINFO = re.compile(rf"(\b{URL_SCHEME}){USERINFO_VALUE}@")
_PEM_IN_TEXT = re.compile(f"({PEM_HEAD}){PEM_BODY}")
# Query separators as sent or as percent-encoded by a client (or by an older capture tool).
_QUERY_SEP = re.compile(r"(&|;|%26|%3[Bb])")
_EQUALS = re.compile(r"=|%3[Dd]")
_PATH_PARAM = re.compile(r";([^;/=?#]*)=([^;/?#]*)")


@lru_cache(maxsize=4096)  # the same few header names come back on every record
def is_secret_name(name: str) -> bool:
    """Whether a header or query parameter called `name` carries a credential (rule above)."""
    return _SECRET_NAME.fullmatch(name.strip().lower()) is not None


def fingerprint(secret: str) -> str:
    """`acct_` + 12 hex chars of sha256: stable per key, not reversible for a real key."""
    return "acct_" + hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def _key_from_authorization(value: str) -> str:
    scheme, _, rest = value.partition(" ")
    # AWS SigV4 carries the access key id in Credential=AKIA.../date/...; group by that.
    if scheme.upper().startswith("AWS4-HMAC"):
        match = re.search(r"Credential=([^/,\s]+)", value)
        return match.group(1) if match else value
    return rest.strip() if rest else value.strip()


def _query_params(query: str) -> list[tuple[str, str, int]]:
    """(decoded name, raw value, index in `_QUERY_SEP.split(query)`) per `name=value` part."""
    out = []
    for i, part in enumerate(_QUERY_SEP.split(query)):
        if i % 2:
            continue  # a separator
        match = _EQUALS.search(part)
        if match is not None:
            out.append((unquote_plus(part[: match.start()]), part[match.end() :], i))
    return out


# Words that stand for a key someone already hid; with them and punctuation removed, such a
# value has no letter or digit left ("[REDACTED]", "<redacted>", "***", "Bearer <hidden>").
_PLACEHOLDER_WORDS = re.compile(r"(?i)redacted|hidden|masked|removed|omitted")


def is_placeholder(key: str) -> bool:
    """Whether a key value is a stand-in for a key hidden before capture: it says nothing about
    whose key it was, so every such request would otherwise share one made-up account."""
    return not any(ch.isalnum() for ch in _PLACEHOLDER_WORDS.sub("", key))


def account_of(headers: list[tuple[str, str]], url: str) -> str | None:
    """Fingerprint of the caller's key from headers, else from a `key=` query parameter; None
    when there is none, or only a placeholder for one (`is_placeholder`)."""
    lowered = {name.lower(): value for name, value in headers}
    for name in _KEY_HEADERS:
        value = lowered.get(name)
        if value and value != REDACTED:
            key = _key_from_authorization(value) if name == "authorization" else value.strip()
            return fingerprint(key) if key and not is_placeholder(key) else None
    for name, raw, _ in _query_params(urlsplit(url).query):
        value = unquote_plus(raw)
        if name.lower() in SECRET_QUERY_PARAMS and value and not is_placeholder(value):
            return fingerprint(value)
    return None


def redact_headers(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Secret header names lose their value, and so does any header whose value holds a key
    shape, whatever it is called (`X-LLM-Key: sk-...` from a gateway no rule knows)."""
    return [
        (name, REDACTED if is_secret_name(name) or _KEY_VALUE.search(value) else value)
        for name, value in headers
    ]


# Secret as a query parameter only: Azure Functions' `?code=`, an OAuth authorisation code.
_QUERY_SECRETS = frozenset({"code"})


def _redact_query(query: str) -> str:
    parts = _QUERY_SEP.split(query)
    for name, raw, i in _query_params(query):
        if raw and raw != REDACTED and (is_secret_name(name) or name.lower() in _QUERY_SECRETS):
            parts[i] = parts[i][: len(parts[i]) - len(raw)] + REDACTED
    return "".join(parts)


def _redact_path_param(match: re.Match[str]) -> str:
    name, value = match.group(1), match.group(2)
    if value and is_secret_name(unquote_plus(name)):
        return f";{name}={REDACTED}"
    return match.group(0)


def _userinfo_with_slash(parts: SplitResult) -> SplitResult:
    """`https://user:pa/ss@host/...` as user:password@host: an unencoded `/` in the password
    ends the netloc early (`user:pa`, whose port is no number) and leaves the rest in the path."""
    if ":" not in parts.netloc or "@" in parts.netloc or "@" not in parts.path:
        return parts
    try:
        parts.port  # noqa: B018 (a number: a real host:port, and the `@` is the path's own)
    except ValueError:
        host, slash, path = parts.path.partition("@")[2].partition("/")
        return parts._replace(netloc=f"{parts.netloc}@{host}", path=slash + path)
    return parts


def redact_query(query: str) -> str:
    """A query string (`a=1&key=...`, without its `?`) with the values of secret parameters
    replaced by [REDACTED]."""
    return _redact_query(query)


def redact_url(url: str) -> str:
    """`url` with user:password@ removed and the values of secret query (and `;` path)
    parameters replaced by [REDACTED]; everything else is kept byte for byte."""
    parts = _userinfo_with_slash(urlsplit(url))
    changed = False
    if "@" in parts.netloc:
        # user:password@host carries a credential: keep only host[:port], as written (an
        # IPv6 host keeps its brackets, a host its case).
        parts, changed = parts._replace(netloc=parts.netloc.rpartition("@")[2]), True
    if ";" in parts.path:
        path = _PATH_PARAM.sub(_redact_path_param, parts.path)
        parts, changed = parts._replace(path=path), changed or path != parts.path
    if parts.query:
        query = _redact_query(parts.query)
        parts, changed = parts._replace(query=query), changed or query != parts.query
    return urlunsplit(parts) if changed else url


def shown_url(url: str) -> str:
    """`url` as a log line or an error message shows it: `redact_url`, and a key-shaped part of
    its path masked as well (`/v1/models/sk-proj-...`, a gateway's `/key/AIza.../`), which the
    capture record masks by shape but a line printed from the URL as sent would keep."""
    return redact_text(redact_url(url))


# The end of what a cut kept when it fell inside a run of characters without a separator: a key cut
# in two no longer has the length or shape the masks look for, so its first part would be kept.
_TRAILING_RUN = r"""[^\s"'`,;:{}\[\]()<>|]+\Z"""
_TRAILING_RUN_TEXT = re.compile(_TRAILING_RUN)
_TRAILING_RUN_BYTES = re.compile(_TRAILING_RUN.encode())


def cut(data: bytes, limit: int) -> bytes:
    """The first `limit` bytes of `data` to quote in an excerpt or a message, less a token the
    cut falls inside: mask what is kept afterwards (`redact_text`) and no part of a key is left."""
    if len(data) <= limit:
        return data
    head = data[:limit]
    if _TRAILING_RUN_BYTES.match(data, limit, limit + 1) is None:
        return head  # the cut is on a separator: the last token ended with the head
    found = _TRAILING_RUN_BYTES.search(head)
    return head[: found.start()] if found else head


def cut_text(text: str, limit: int) -> str:
    """`cut` for text."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    if _TRAILING_RUN_TEXT.match(text, limit, limit + 1) is None:
        return head
    found = _TRAILING_RUN_TEXT.search(head)
    return head[: found.start()] if found else head


def redact_text(text: str) -> str:
    """Mask key-shaped substrings in free text (reject excerpts, error messages)."""
    text = _KEY_PATTERN.sub(REDACTED, text)
    text = _USERINFO.sub(rf"\1{REDACTED}@", text)
    text = _PEM_IN_TEXT.sub(rf"\1{REDACTED}", text)
    for pattern in (_PARAM_IN_TEXT, _QUOTED_IN_TEXT, _HEADER_IN_TEXT, _HEADER_PAIR_IN_TEXT):
        text = pattern.sub(_masked_after_name, text)
    return text


def _masked_after_name(match: re.Match[str]) -> str:
    """The name kept and its value masked, unless it is masked already (a redacted URL quoted
    in a message: `;api_key=[REDACTED]` must not become `[[REDACTED]`)."""
    value = match.group(0)[match.end(1) - match.start(0) :]
    if value.lstrip("[").startswith("REDACTED"):
        return match.group(0)
    return match.group(1) + REDACTED


# The value has a digit (`password=hunter2`, not `token:budget`), or is as long as a key: one
# random key in a hundred of 26 letters and digits has no digit.
_HINT_CREDENTIAL = re.compile(
    rf"(?i)((?<![A-Za-z0-9])(?:{NAME})\s*[:=]\s*)"
    r"((?=[^\s,;&]*[0-9])[^\s,;&]{6,}|[^\s,;&]{16,})"
)


@lru_cache(maxsize=4096)  # a capture repeats its paths, sessions and agents on every record
def without_keys(value: str | None) -> str | None:
    """A name a capture gives (a session, an agent, a tag, a URL path) with a key-shaped part
    masked, and a credential written as text in it (`password=hunter2`): a tool that put a key
    there must not have it stored."""
    if value is None:
        return value
    # a key shape anywhere (`s-sk-proj-...` is a key after `s-`), and a value with a digit
    # after a credential name (`password=hunter2`, not `pass:1` or `token:budget`) become the
    # value's fingerprint (or one of 16 characters or more, digits or not): masked, and two
    # sessions or tags that differed still differ
    value = _KEY_VALUE.sub(lambda m: fingerprint(m.group(0)), value)
    return _HINT_CREDENTIAL.sub(lambda m: m.group(1) + fingerprint(m.group(2)), value)


def secret_values(headers: list[tuple[str, str]], url: str) -> list[bytes]:
    """The values of a request's credential headers and query parameters as sent (the token
    after `Bearer`), to mask wherever the exchange quotes them back: a provider's 401 answer
    ("Incorrect API key provided: 9f8e...") holds a key no shape rule knows. Short values and
    values already masked are left out."""
    found = []
    for name, value in headers:
        if is_secret_name(name) and name.lower() not in _COOKIE_HEADERS:
            scheme, _, token = value.strip().partition(" ")
            found.append(token.strip() if scheme.lower() in _SCHEMES and token else value.strip())
    found += [unquote_plus(raw) for name, raw, _ in _query_params(urlsplit(url).query)
              if is_secret_name(name)]  # fmt: skip
    return [v.encode() for v in found if _could_be_a_key(v)]


# A cookie is a session, not a key an answer quotes back (and its pairs are no one value).
_COOKIE_HEADERS = frozenset({"cookie", "set-cookie"})
_SCHEMES = frozenset({"bearer", "basic", "token", "digest"})


def _could_be_a_key(value: str) -> bool:
    """Long enough, with letters and digits: a placeholder such as `lm-studio` or `not-needed`
    is no key, and a value of digits alone would match numbers in the answer."""
    return (
        len(value) >= 8
        and any(c.isdigit() for c in value)
        and any(c.isalpha() for c in value)
        and not is_placeholder(value)
    )


def mask_values(data: bytes, values: list[bytes]) -> bytes:
    """`data` with each of `values` masked (same length) where it stands alone, not inside a
    longer run of letters and digits (a number, another token)."""
    for value in values:
        if value in data:
            alone = rb"(?<![A-Za-z0-9])" + re.escape(value) + rb"(?![A-Za-z0-9])"
            data = re.sub(alone, mask_of(len(value)), data)
    return data


@lru_cache(maxsize=4096)
def account_label(value: str | None) -> str | None:
    """An account as a capture names it, or the key's fingerprint where a key was written
    there: the account still groups the traffic of one key, and the key is not stored."""
    if value is None or not _KEY_VALUE.search(value):
        return value
    return fingerprint(value)
