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
  `auth`, `credential(s)`, `signature`, `sig` or `cookie` (`helicone-auth`, `x-amz-signature`,
  `set-cookie`);
- it ends in `key` after a word that says whose key it is: api, access, auth, secret, private,
  client, account, session, subscription, service, master, admin, virtual (`x-api-key`,
  `x-goog-api-key`, `ocp-apim-subscription-key`, `subscriptionKey`);
- any word is `authorization`, `cookie` or `password`/`passwd` (`proxy-authorization`);
- or the whole name is `key` (Gemini's `?key=`).
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
from typing import TYPE_CHECKING
from urllib.parse import unquote_plus, urlsplit, urlunsplit

if TYPE_CHECKING:  # imported where used: the mitmproxy addon runs without pyarrow
    import pyarrow as pa

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
REDACTED = "[REDACTED]"

# --- the name rule, as a regex usable both on a whole name and inside free text ---------------
_WORD = r"[a-z0-9]+"
_SEP = r"[-_.]"
_OWNERS = (
    "api|access|auth|secret|private|client|account|session|subscription|service|master|admin"
    "|virtual"
    # whose key by provider or tool: `x-openai-key`, `x-llm-key`, `anthropic_key`
    "|llm|openai|anthropic|claude|gemini|google|groq|mistral|cohere|deepseek|openrouter|azure"
    "|bedrock|aws|together|fireworks|xai|hf|huggingface|provider|model|user|app|bot|proxy|gateway"
)
_LAST_WORD = (
    rf"[a-z0-9]*(?:token|secret|passw(?:or)?d|apikey|(?:{_OWNERS}){_SEP}?key)"
    r"|auth|credentials?|signature|sig|cookie"
)
_ANY_WORD = r"authorization|cookie|passw(?:or)?d"
# A secret name that is not just `key` (kept apart: `key: value` in free text is too common).
_NAME = (
    rf"(?:{_WORD}{_SEP})*(?:{_LAST_WORD})"
    rf"|(?:{_WORD}{_SEP})*(?:{_ANY_WORD})(?:{_SEP}{_WORD})*"
)
_SECRET_NAME = re.compile(rf"key|{_NAME}")

# Key shapes, recognised by value wherever they appear: OpenAI `sk-` / `sk-proj-`, Anthropic
# `sk-ant-`, Groq `gsk_`, xAI `xai-`, AWS access key ids `AKIA`/`ASIA`, Google API keys `AIza`,
# GitHub tokens `ghp_`/`github_pat_`, Slack `xox?-`, Hugging Face `hf_`, and JWTs (three base64url
# parts, the first two JSON objects: `eyJ`). Not preceded by a letter, digit, `_` or `-`, so a word
# such as `task-...` or `disk-...` is never taken for a key.
_KEY_SHAPES = (
    r"sk-ant-[A-Za-z0-9_-]{8,}|sk-[A-Za-z0-9_-]{16,}|gsk_[A-Za-z0-9]{20,}|xai-[A-Za-z0-9]{20,}"
    r"|A[KS]IA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{30,}|ghp_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}"
    r"|xox[abposr]-[A-Za-z0-9-]{10,}|hf_[A-Za-z0-9]{30,}"
    r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"
)
# A key starts after a character that cannot be part of it, or after a JSON escape: prompt text
# is stored as JSON, where a key on a line of its own follows `\n` (the letter n), and one after
# a quote may follow `\u0022`.
_KEY_BOUNDARY = r"(?:(?<![A-Za-z0-9_-])|(?<=\\[nrtbf])|(?<=\\u[0-9a-fA-F]{4}))"
# Key-shaped strings that may appear in bodies or error text we keep (excerpts, messages).
_KEY_PATTERN = re.compile(
    rf"({_KEY_BOUNDARY}(?:{_KEY_SHAPES})|(?i:bearer|basic)\s+[A-Za-z0-9._~+/=-]{{8,}})"
)
_KEY_VALUE = re.compile(_KEY_SHAPES)
# `?key=...` / `;token=...` / `%3Bkey%3D...` inside free text (an upstream's HTML error page
# quoting the URL, a URL in an error message).
_PARAM_IN_TEXT = re.compile(
    rf"(?i)((?:[?&;]|%26|%3B)(?:key|{_NAME})(?:=|%3D))(?:(?!%26|%3B)[^&;\s\"'#<>])+"
)
# `api-key: ...` / `"x-api-key": "..."` / `x-auth-token=...` inside free text.
# A value keeps going through a JSON escape (`\/` as some writers send `/`): stopping at the first
# backslash left the rest of a key on disk.
# The value may be the first item of a list, as VCR cassettes write headers: `name: ["..."]` in
# JSON, `name:` then `- ...` in YAML.
_HEADER_IN_TEXT = re.compile(
    rf"(?i)((?<![\w.-])(?:{_NAME})\\?\"?\s*[:=]\s*(?:\[\s*|-\s+)?\\?\"?)"
    rf"(?:[^\s\"'\\,;]|\\[^\s\"'])+"
)
# `["x-auth-token", "..."]`: a header pair of a capture record quoted in an excerpt.
_HEADER_PAIR_IN_TEXT = re.compile(rf'(?i)((?<![\w.-])(?:{_NAME})\\?"\s*,\s*\\?")(?:[^"\\]|\\.)*')
# user:password@ in a URL.
_USERINFO = re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://)[^/\s@]+@")
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


def _redact_query(query: str) -> str:
    parts = _QUERY_SEP.split(query)
    for name, raw, i in _query_params(query):
        if raw and raw != REDACTED and is_secret_name(name):
            parts[i] = parts[i][: len(parts[i]) - len(raw)] + REDACTED
    return "".join(parts)


def _redact_path_param(match: re.Match[str]) -> str:
    name, value = match.group(1), match.group(2)
    if value and is_secret_name(unquote_plus(name)):
        return f";{name}={REDACTED}"
    return match.group(0)


def redact_url(url: str) -> str:
    """`url` with user:password@ removed and the values of secret query (and `;` path)
    parameters replaced by [REDACTED]; everything else is kept byte for byte."""
    parts = urlsplit(url)
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
    for pattern in (_PARAM_IN_TEXT, _HEADER_IN_TEXT, _HEADER_PAIR_IN_TEXT):
        text = pattern.sub(rf"\1{REDACTED}", text)
    return text


@lru_cache(maxsize=4096)  # a capture repeats its paths, sessions and agents on every record
def without_keys(value: str | None) -> str | None:
    """A name a capture gives (a session, an agent, a tag, a URL path) with a key-shaped part
    masked: a tool that put a key there must not have it stored. One search when there is none."""
    if value is None or not _KEY_VALUE.search(value):
        return value
    return _KEY_VALUE.sub(REDACTED, value)  # anywhere: `s-sk-proj-...` is a key after `s-`


@lru_cache(maxsize=4096)
def account_label(value: str | None) -> str | None:
    """An account as a capture names it, or the key's fingerprint where a key was written
    there: the account still groups the traffic of one key, and the key is not stored."""
    if value is None or not _KEY_VALUE.search(value):
        return value
    return fingerprint(value)


# --- bodies: what a capture line and the stored prompt text may carry ----------------------
# A body can hold a key anywhere: a credential field of a gateway's request (`"api_key": ...`),
# a provider's 401 error quoting the key, a key pasted into a prompt. Bodies are masked by value
# (the key shapes) and by field name (the name rule, bare `key` and `token` excepted: in bodies
# they are too often a dictionary key or a logprobs token), at any level of JSON escaping (a
# body inside a capture line, tool arguments inside a message inside a capture line); a value
# is masked up to its first backslash.
_BODY_FIELD = re.compile(rf'(?i)(\\*"(?:{_NAME})\\*"\s*:\s*\\*")([^"\\]+)'.encode())
_BODY_KEY = re.compile(rf"{_KEY_BOUNDARY}(?:{_KEY_SHAPES})".encode())
# A superset of both, in RE2 (no look-behind), run by Arrow over a whole body or column at
# several hundred MB/s: the Python patterns above only run where it finds something, so a body
# without a secret costs one scan.
_SCREEN = (
    rf"{_KEY_SHAPES}|(?i:(?:key|token|secret|passw|passwd|auth|credential|credentials|signature"
    rf'|sig|cookie)\\?"\s*:)'
)
_TEXT_KEY = rf"(^|[^A-Za-z0-9_-]|\\[nrtbf]|\\u[0-9a-fA-F]{{4}})(?:{_KEY_SHAPES})"
_TEXT_FIELD = rf'((?i:\\*"(?:{_NAME})\\*"\s*:\s*\\*"))[^"\\]+'


def _same_length(match: re.Match[bytes]) -> bytes:
    n = len(match.group(0))
    return b"[REDACTED" + b"*" * (n - 10) + b"]" if n >= 10 else b"*" * n


def _field_value(match: re.Match[bytes]) -> bytes:
    value = match.group(2)
    if value.startswith(b"[REDACTED") or set(value) <= {ord("*")}:
        return match.group(0)
    n = len(value)
    masked = b"[REDACTED" + b"*" * (n - 10) + b"]" if n >= 10 else b"*" * n
    return match.group(1) + masked


def mask_secrets(data: bytes) -> bytes:
    """`data` (a capture line, a body) with every key shape and credential field value masked
    by a mask of the same length: byte counts, chunk offsets and JSON validity stay as they
    were, so nothing that measures the body changes."""
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
    except ImportError:
        # The mitmproxy addon runs in mitmproxy's own environment, which has no pyarrow: the
        # screen below only spares the substitutions on a line without a candidate.
        return _BODY_KEY.sub(_same_length, _BODY_FIELD.sub(_field_value, data))
    if not pc.any(pc.match_substring_regex(pa.array([data], pa.binary()), _SCREEN)).as_py():
        return data
    return _BODY_KEY.sub(_same_length, _BODY_FIELD.sub(_field_value, data))


def mask_texts(values: list[str]) -> pa.Array:
    """Stored prompt text (segment content) with key shapes and credential field values
    replaced by [REDACTED], over the whole column at once; returned as the Arrow string column
    the Parquet writer takes (turning it back into Python strings for the writer to convert
    again cost 0.14 instead of 0.12 CPU s per 62 MB of text, screen and table together)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column = pa.array(values, pa.string())
    if not values or not pc.any(pc.match_substring_regex(column, _SCREEN)).as_py():
        return column
    column = pc.replace_substring_regex(column, _TEXT_FIELD, rf"\1{REDACTED}")
    return pc.replace_substring_regex(column, _TEXT_KEY, rf"\1{REDACTED}")
