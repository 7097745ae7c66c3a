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
from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING
from urllib.parse import SplitResult, unquote_plus, urlsplit, urlunsplit

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
    "|virtual|functions?"  # Azure Functions' `x-functions-key`
    # whose key by provider or tool: `x-openai-key`, `x-llm-key`, `anthropic_key`
    "|llm|openai|anthropic|claude|gemini|google|groq|mistral|cohere|deepseek|openrouter|azure"
    "|bedrock|aws|together|fireworks|xai|hf|huggingface|provider|model|user|app|bot|proxy|gateway"
)
_LAST_WORD = (
    rf"[a-z0-9]*(?:token|secret|passw(?:or)?d|apikey|(?:{_OWNERS}){_SEP}?key)"
    r"|auth|credentials?|signature|sig|cookie|pass|pwd"
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
# A name counts where a name can start: after a character that is not part of one, or after a
# JSON escape (prompt text is stored as JSON: a `.env` line follows `\n`, the letter n).
_NAME_BOUNDARY = r"(?:(?<![\w.])|(?<=\\[nrtbf])|(?<=\\u[0-9a-fA-F]{4}))"
# A PEM private key (`-----BEGIN RSA PRIVATE KEY-----`, OPENSSH, ENCRYPTED, PGP ... BLOCK): its
# body is base64 over lines, with `Proc-Type: 4,ENCRYPTED` headers in the old form; it ends at
# `-----END`, or where a cut excerpt or a JSON string ends.
_PEM_HEAD = r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----"
# (an escape is taken whole, a run of backslashes with the letter after it: ending on one would
# leave the quote after it escaped, and the JSON around it broken)
_PEM_BODY = r"(?:[A-Za-z0-9+/=\s:,]|\\+[^\"\\]|-[A-Za-z0-9])+"
_URL_SCHEME = r"(?i:[a-z][a-z0-9+.-]*://)"
# user:password@ (a password may hold an unencoded `/`; not `host:443/path@...`, a port).
_USERINFO_VALUE = r'(?:[^/\s@"\\<>]+|[^/\s@"\\<>:]+:(?![0-9]+[/"\\])[^\s@"\\<>]+)'
# RE2 has no look-ahead: in stored prompt text a `host:443/path@v1` loses host and path too.
_TEXT_USERINFO = r'(?:[^/\s@"\\<>]+|[^/\s@"\\<>:]+:[^\s@"\\<>]+)'
# Key-shaped strings that may appear in bodies or error text we keep (excerpts, messages).
_KEY_PATTERN = re.compile(
    rf"({_KEY_BOUNDARY}(?:{_KEY_SHAPES})|(?i:bearer|basic)\s+[A-Za-z0-9._~+/=-]{{8,}})"
)
_KEY_VALUE = re.compile(_KEY_SHAPES)
# `?key=...` / `;token=...` / `%3Bkey%3D...` inside free text (an upstream's HTML error page
# quoting the URL, a URL in an error message).
_PARAM_IN_TEXT = re.compile(
    rf"(?i)((?:[?&;]|%26|%3B)(?:key|code|{_NAME})(?:=|%3D))(?:(?!%26|%3B)[^&;\s\"'#<>])+"
)
# `api-key: ...` / `"x-api-key": "..."` / `x-auth-token=...` inside free text.
# A value keeps going through a JSON escape (`\/` as some writers send `/`): stopping at the first
# backslash left the rest of a key on disk; it ends at a line's end (`\n`, `\r`, `\t`).
# The value may be the first item of a list, as VCR cassettes write headers: `name: ["..."]` in
# JSON, `name:` then `- ...` in YAML.
_HEADER_IN_TEXT = re.compile(
    rf"(?i)({_NAME_BOUNDARY}(?:{_NAME})\\*\"?\s*[:=]\s*(?:\[\s*|-\s+)?(?:\\*[\"'])?)"
    rf"(?:[^\s\"'\\,;]|\\+[^\s\"'\\nrt])+"
)
# `DB_PASSWORD="correct horse"`: a quoted value is masked to its closing quote, spaces included.
_QUOTED_IN_TEXT = re.compile(
    rf"""(?i)({_NAME_BOUNDARY}(?:{_NAME})\\*"?\s*[:=]\s*(?:\\*"|'))(?:[^"'\\]|\\+[^"'\\])+"""
)
# `["x-auth-token", "..."]`: a header pair of a capture record quoted in an excerpt.
_HEADER_PAIR_IN_TEXT = re.compile(rf'(?i)((?<![\w.-])(?:{_NAME})\\?"\s*,\s*\\?")(?:[^"\\]|\\.)*')
# user:password@ in a URL.
_USERINFO = re.compile(rf"(\b{_URL_SCHEME}){_USERINFO_VALUE}@")
_PEM_IN_TEXT = re.compile(f"({_PEM_HEAD}){_PEM_BODY}")
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
    rf"(?i)((?<![A-Za-z0-9])(?:{_NAME})\s*[:=]\s*)"
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
            data = re.sub(alone, _mask_of(len(value)), data)
    return data


@lru_cache(maxsize=4096)
def account_label(value: str | None) -> str | None:
    """An account as a capture names it, or the key's fingerprint where a key was written
    there: the account still groups the traffic of one key, and the key is not stored."""
    if value is None or not _KEY_VALUE.search(value):
        return value
    return fingerprint(value)


# --- bodies: what a capture line and the stored prompt text may carry ----------------------
# A body can hold a key anywhere: a credential field of a gateway's request (`"api_key": ...`),
# a provider's 401 error quoting the key, a key pasted into a prompt, a pasted `.env` file or
# curl command (`AWS_SECRET_ACCESS_KEY=...`, `-H "x-api-key: ..."`), a private key in PEM. Bodies
# are masked by value (the key shapes, `Bearer ...`, PEM blocks, `user:password@` in a URL) and
# by name (the name rule, bare `key` and `token` excepted: in bodies they are too often a
# dictionary key or a logprobs token; `?key=` and `?code=` in a URL count), at any level of JSON
# escaping (a body inside a capture line, tool arguments inside a message inside a capture line).
#
# A JSON string field's value: up to its closing quote, through escapes of any level (`\\n` in a
# PEM key, `\\/`); a run of backslashes before a quote is the closing quote's.
_FIELD_VALUE = r'(?:[^"\\]|\\+[^"\\])+'
# A value written as plain text: up to a space, a quote, a separator or a JSON bracket (masking
# one would break the JSON a body is); through an escaped slash (`\/`), which some writers send
# for `/`, but not through another escape, so in JSON text it ends with its line (`\n`).
# It does not start with `=` (`password == x` is a comparison, not a value).
# It does not start with `=` (`password == x` is a comparison) or `:`; nor with what follows a
# JSON string's closing quote (`,` `}` `]` `:` a space): after `"password:"` in JSON, a quote
# taken for the value's would be the string's end, and masking past it breaks the JSON.
_PLAIN_VALUE = r"""(?:[^\s"'`\\,;&<>(){}\[\]=:]|\\+/)(?:[^\s"'`\\,;&<>(){}\[\]]|\\+/)*"""
# A quoted value, to its closing quote, spaces included (`DB_PASSWORD="correct horse"`). In JSON
# text the opening quote is escaped: an odd run of backslashes before it. But a string's own end
# looks the same one level of escaping up (`password:\"}` in a body inside a capture line), so
# the value never starts with what can follow a string's end (a space, an escape, `,` `:` `}`
# `]`) and holds none of `,` `:` `}` `]` or a quote of any kind: masking never crosses a
# string's end, at any level.
_QUOTE_OPEN = r'\\(?:\\\\)*"'
_DQ_VALUE = r"""(?:[^\s,:}\]"'\\])(?:[^,:}\]"'\\]|\\+[^"'\\,:}\]])*"""
_SINGLE_QUOTED_VALUE = r"""(?:[^'"\\]|\\+[^'"\\])+"""
# `name: value` / `name=value` / `-H "name: value"` / `name = "value"` / `name: ["value"]` (VCR),
# the name followed by its separator (a quote before it is a JSON field, above). A scheme word
# before the value (`Authorization: Bearer ...`) is kept, the credential after it masked.
_ASSIGN_NAME = rf"(?i:(?:{_NAME})\s*[:=]\s*(?:\[\s*|-\s+)?)"
_SCHEME_WORD = r"(?i:(?:bearer|basic|token)\s+)?"
_PARAM_VALUE = r"""(?:[^&;\s"'#<>\\%]|%2[FfBb]|%3[Dd])+"""
_PARAM_HEAD = rf"(?:[?&;]|%26|%3[Bb])(?i:key|code|{_NAME})(?:=|%3[Dd])"
_BEARER_HEAD = r"(?i:bearer|basic)\s+"
# a credential has a digit: "a basic question", "the bearer instrument" are words
_BEARER_VALUE = r"(?=[A-Za-z0-9._~+/=-]*[0-9])[A-Za-z0-9._~+/=-]{8,}"
_TEXT_BEARER_VALUE = r"[A-Za-z0-9._~+/=-]*[0-9][A-Za-z0-9._~+/=-]*"  # the same in RE2

# A JSON field: its name's quotes and its value's opening quote at one level of escaping (the
# same run of backslashes), so a name in a string (`"password\":"` of a prompt) is no field.
_BODY_FIELD = re.compile(
    rf'((?P<run>\\*)"(?i:{_NAME})(?P=run)"\s*:\s*(?P=run)")(?P<value>{_FIELD_VALUE})'.encode()
)
_BODY_KEY = re.compile(rf"{_KEY_BOUNDARY}(?:{_KEY_SHAPES})".encode())
# The rules that keep what names the value and mask the value (group `value`), same length,
# each with an RE2 test that spares its scan where it cannot match: Python's engine tries a
# pattern at every position, and these cost 10-35 ms per MB each even where nothing matches.
_BODY_NAMED = [
    (re.compile(rf"{_PARAM_HEAD}(?P<value>{_PARAM_VALUE})".encode()), _PARAM_HEAD),
    (
        re.compile(rf"{_NAME_BOUNDARY}{_BEARER_HEAD}(?P<value>{_BEARER_VALUE})".encode()),
        r"(?i)b(?:earer|asic)\s",
    ),
    (re.compile(rf"{_PEM_HEAD}(?P<value>{_PEM_BODY})".encode()), "PRIVATE KEY"),
    (re.compile(rf"{_URL_SCHEME}(?P<value>{_USERINFO_VALUE})(?=@)".encode()), r"://[^\s@]+@"),
]
# `name: value` / `name=value` in a body, found in steps (one pattern for the whole rule took
# 0.3 s per MB of prompt, trying the name rule at every position): the words a credential name
# ends in or holds, searched as plain text in the lower-cased body (14 ms per MB where `token`
# is every 13th word); the whole word around each, when a `:` or `=` follows it; the name rule
# on that word alone; then the value after the separator.
_NAME_WORDS = re.compile(rb"token|secret|passw|pwd|pass|auth|credential|signature|sig|cookie|key")
_NAME_RUN = re.compile(rb"[a-z0-9_.-]*")
_SEPARATOR = re.compile(rb"\s*[:=]")
_ASSIGN_TAIL = re.compile(
    rf"""\s*[:=]\s*(?:\[\s*|-\s+)?(?:{_QUOTE_OPEN}({_DQ_VALUE})|'({_SINGLE_QUOTED_VALUE})"""
    rf"""|"?{_SCHEME_WORD}({_PLAIN_VALUE}))""".encode()
)
_NAME_RULE = re.compile(_NAME)


@lru_cache(maxsize=4096)
def _is_credential_word(word: bytes) -> bool:
    """Whether a word before a separator names a credential (the name rule, bare `key` aside:
    `monkey: banana`); `--api-key` counts as `api-key`, `_token` as `token`."""
    return _NAME_RULE.fullmatch(word.decode("ascii", "replace").lstrip("-_.")) is not None


def _assignments(data: bytes) -> list[tuple[int, int]]:
    """The spans of the values written after a credential name and a `:` or `=`."""
    lowered = data.lower()
    backwards = lowered[::-1]
    size, spans, done = len(data), [], -1
    for hit in _NAME_WORDS.finditer(lowered):
        if hit.start() < done:
            continue  # another name word of a word already looked at (`auth_token`)
        # the whole run of name characters around it, each run read once (a run of `token`
        # repeated was read again from each of its words: quadratic), forwards, then backwards
        after = _NAME_RUN.match(lowered, hit.end())
        done = end = after.end() if after else hit.end()
        if _SEPARATOR.match(lowered, end) is None:
            continue
        before = _NAME_RUN.match(backwards, size - hit.start())
        start = hit.start() - (before.end() - before.start() if before else 0)
        word = lowered[start:end]
        # a word right after a JSON escape starts with the escape's letter (`\nAWS_SECRET...`),
        # or its four digits (`\u0022password`)
        names = [word]
        if start > 0 and data[start - 1] == 0x5C:  # a backslash
            names += [word[1:], word[5:]] if word[:1] == b"u" else [word[1:]]
        if not any(_is_credential_word(name) for name in names):
            continue
        tail = _ASSIGN_TAIL.match(data, end)
        if tail is not None:
            group = next(g for g in (1, 2, 3) if tail.start(g) >= 0)
            spans.append(tail.span(group))
    return spans


def _mask_assignments(data: bytes, mask: Callable[[int], bytes]) -> bytes:
    out, kept = [], 0
    for start, end in _assignments(data):
        value = data[start:end]
        if start < kept or _already_masked(value):
            continue
        out += [data[kept:start], mask(end - start)]
        kept = end
    return b"".join([*out, data[kept:]]) if out else data


def _mask_of(n: int) -> bytes:
    return b"[REDACTED" + b"*" * (n - 10) + b"]" if n >= 10 else b"*" * n


# A superset of every rule, in RE2 (no look-around), run by Arrow over a whole body or column at
# several hundred MB/s: the Python patterns above only run where it finds something, so a body
# without a secret costs one scan. Each name rule ends in one of these words, or holds one of the
# words that make any name secret (`password_hash`).
_SCREEN = (
    rf"{_KEY_SHAPES}|(?i:authorization|cookie|passw(?:or)?d|bearer\s|basic\s|private key|://[^\s@\"]+@)"
    rf"|(?i:(?:(?:{_OWNERS}){_SEP}?key|token|secret|auth|credentials?|signature|sig|pass|pwd)"
    rf"\\*\"?\s*[:=])|(?i:(?:[?&;]|%26|%3b)(?:key|code)(?:=|%3d))"
)
# A JSON field named as a credential, in RE2: spares _BODY_FIELD's scan where there is none.
_FIELD_SCREEN = rf'(?i:{_NAME})\\*"\s*:'
# The same rules for stored prompt text, in RE2: one pass, every alternative's kept part a group
# of its own (a group that took no part is empty in the replacement).
_TEXT_BOUNDARY = r"(?:^|[^A-Za-z0-9_.\\]|\\[nrtbf]|\\u[0-9a-fA-F]{4})"
# a name may start after `_` or `-` (`_auth_token:`, `--api-key=`), as the body rule reads it
_TEXT_NAME = rf"{_TEXT_BOUNDARY}[_-]*{_ASSIGN_NAME}"
_TEXT_RULES = "|".join(
    (
        # (no back-references in RE2: the value does not start with what can follow a string's
        # end, as _DQ_VALUE)
        rf'((?i:\\*"(?:{_NAME})\\*"\s*:\s*\\*")){_DQ_VALUE}',
        rf"({_TEXT_NAME}{_QUOTE_OPEN}){_DQ_VALUE}",
        rf"({_TEXT_NAME}'){_SINGLE_QUOTED_VALUE}",
        rf'({_TEXT_NAME}"?{_SCHEME_WORD}){_PLAIN_VALUE}',
        rf"({_TEXT_BOUNDARY}){_KEY_SHAPES}",
        rf"({_PARAM_HEAD}){_PARAM_VALUE}",
        rf"({_TEXT_BOUNDARY}{_BEARER_HEAD}){_TEXT_BEARER_VALUE}",
        rf"({_PEM_HEAD}){_PEM_BODY}",
    )
)
# RE2 rewrites name groups \1 to \9 only: the URL password is a pass of its own
_TEXT_REPLACEMENT = "".join(rf"\{i}" for i in range(1, 9)) + REDACTED
_TEXT_USERINFO_RULE = rf"({_URL_SCHEME}){_TEXT_USERINFO}@"


def _already_masked(value: bytes) -> bool:
    return value.startswith(b"[REDACTED") or set(value) <= {ord("*"), 0}


def _mask_bytes(data: bytes, has: Callable[[str], bool], mask: Callable[[int], bytes]) -> bytes:
    """Every rule over `data`; `has(pattern)` says (in RE2, a few ms per MB) whether a rule's
    candidates are there at all: the key shapes alone cost Python's engine 40 ms per MB."""

    def whole(match: re.Match[bytes]) -> bytes:
        return mask(len(match.group(0)))

    def value_of(match: re.Match[bytes]) -> bytes:
        # the match with its `value` group (its end) masked, unless it is masked already
        value = match.group("value")
        if _already_masked(value):
            return match.group(0)
        return match.group(0)[: match.start("value") - match.start()] + mask(len(value))

    if has(_FIELD_SCREEN):
        data = _BODY_FIELD.sub(value_of, data)
    data = _mask_assignments(data, mask)
    for rule, candidates in _BODY_NAMED:
        if has(candidates):
            data = rule.sub(value_of, data)
    return _BODY_KEY.sub(whole, data) if has(_KEY_SHAPES) else data


def mask_secrets(data: bytes, *, fill: int | None = None) -> bytes:
    """`data` (a capture line, a body) with every key shape and credential value masked by a
    mask of the same length: byte counts, chunk offsets and JSON validity stay as they were, so
    nothing that measures the body changes. With `fill`, every masked byte is that byte (NUL
    tells exactly which bytes a mask covers: `pipeline.stream_secrets` maps them back)."""
    mask = _mask_of if fill is None else (lambda n: bytes([fill]) * n)
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
    except ImportError:
        # The mitmproxy addon runs in mitmproxy's own environment, which has no pyarrow: every
        # rule runs on every line.
        return _mask_bytes(data, lambda pattern: True, mask)
    column = pa.array([data], pa.binary())

    def has(pattern: str) -> bool:
        return bool(pc.any(pc.match_substring_regex(column, pattern)).as_py())

    return _mask_bytes(data, has, mask) if has(_SCREEN) else data


def mask_secrets_each(values: list[bytes], *, fill: int | None = None) -> list[bytes]:
    """`mask_secrets` of each value, the screen run once over them all (the fields of one
    streamed answer: a screen per field cost ~0.5 ms each, more than the rest of the record)."""
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
    except ImportError:
        return [mask_secrets(value, fill=fill) for value in values]
    hits = pc.match_substring_regex(pa.array(values, pa.binary()), _SCREEN).to_pylist()
    return [mask_secrets(v, fill=fill) if hit else v for v, hit in zip(values, hits, strict=True)]


def mask_texts(values: list[str]) -> pa.Array:
    """Stored prompt text (segment content) with every credential masked by [REDACTED] (the
    rules of `mask_secrets`), over the whole column at once; returned as the Arrow string column
    the Parquet writer takes (turning it back into Python strings for the writer to convert
    again cost 0.14 instead of 0.12 CPU s per 62 MB of text, screen and table together)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column = pa.array(values, pa.string())
    if not values:
        return column
    candidates = pc.match_substring_regex(column, _SCREEN)
    if not pc.any(candidates).as_py():
        return column
    # Only the rows the screen found are rewritten: in a coding agent's traffic `token =` or
    # `password:` is in some rows of most batches, and the rules cost ~4x the screen.
    masked = pc.replace_substring_regex(column.filter(candidates), _TEXT_RULES, _TEXT_REPLACEMENT)
    masked = pc.replace_substring_regex(masked, _TEXT_USERINFO_RULE, rf"\1{REDACTED}@")
    return pc.replace_with_mask(column, candidates, masked)
