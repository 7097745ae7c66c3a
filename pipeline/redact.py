"""Secret removal at the boundary, and the account fingerprint.

Every source calls `redact_exchange_parts` before an `Exchange` exists, so nothing downstream
(dialects, warehouse, rejects, reports) can see a key. The fingerprint is a short one-way hash of
the key: enough to group traffic per key (the scope of a provider's cache), useless to call an API.
"""

from __future__ import annotations

import hashlib
import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

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
    }
)
SECRET_QUERY_PARAMS = frozenset({"key", "api_key", "api-key", "apikey", "access_token", "token"})
# Headers whose value identifies the caller's key, in order of preference.
_KEY_HEADERS = ("x-api-key", "api-key", "x-goog-api-key", "authorization")
REDACTED = "[REDACTED]"

# Key-shaped strings that may appear in bodies or error text we keep (excerpts, messages).
_KEY_PATTERN = re.compile(
    r"(sk-ant-[A-Za-z0-9_-]{8,}|sk-[A-Za-z0-9_-]{16,}|gsk_[A-Za-z0-9]{20,}|xai-[A-Za-z0-9]{20,}"
    r"|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{30,}|(?i:bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,})"
)
_PARAM_NAMES = "|".join(map(re.escape, sorted(SECRET_QUERY_PARAMS, key=len, reverse=True)))
_HEADER_NAMES = "|".join(map(re.escape, sorted(SECRET_HEADERS, key=len, reverse=True)))
# `?key=...` inside free text (an upstream's HTML error page quoting the URL, for instance).
_PARAM_IN_TEXT = re.compile(rf"(?i)([?&;](?:{_PARAM_NAMES})=)[^&\s\"'#<>]+")
# `api-key: ...` / `"x-api-key": "..."` inside free text.
_HEADER_IN_TEXT = re.compile(rf"(?i)((?<![\w-])(?:{_HEADER_NAMES})\"?\s*[:=]\s*\"?)[^\s\"',;]+")
# user:password@ in a URL.
_USERINFO = re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://)[^/\s@]+@")


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


def account_of(headers: list[tuple[str, str]], url: str) -> str | None:
    """Fingerprint of the caller's key from headers, else from a `key=` query parameter."""
    lowered = {name.lower(): value for name, value in headers}
    for name in _KEY_HEADERS:
        value = lowered.get(name)
        if value and value != REDACTED:
            key = _key_from_authorization(value) if name == "authorization" else value.strip()
            return fingerprint(key) if key else None
    for name, value in parse_qsl(urlsplit(url).query, keep_blank_values=True):
        if name.lower() in SECRET_QUERY_PARAMS and value and value != REDACTED:
            return fingerprint(value)
    return None


def redact_headers(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [
        (name, REDACTED if name.lower() in SECRET_HEADERS else value) for name, value in headers
    ]


def redact_url(url: str) -> str:
    parts = urlsplit(url)
    if "@" in parts.netloc:
        # user:password@host carries a credential: keep only host[:port].
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        parts = parts._replace(netloc=netloc)
        url = urlunsplit(parts)
    if not parts.query:
        return url
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    if not any(name.lower() in SECRET_QUERY_PARAMS for name, _ in pairs):
        return url
    cleaned = [(n, REDACTED if n.lower() in SECRET_QUERY_PARAMS else v) for n, v in pairs]
    return urlunsplit(parts._replace(query=urlencode(cleaned, safe="[]")))


def redact_text(text: str) -> str:
    """Mask key-shaped substrings in free text (reject excerpts, error messages)."""
    text = _KEY_PATTERN.sub(REDACTED, text)
    text = _USERINFO.sub(rf"\1{REDACTED}@", text)
    for pattern in (_PARAM_IN_TEXT, _HEADER_IN_TEXT):
        text = pattern.sub(rf"\1{REDACTED}", text)
    return text
