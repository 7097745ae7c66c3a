"""Masking of bodies and stored prompt text: what a capture line and a segment's text may carry.

A body can hold a key anywhere (see below); every rule keeps lengths (`mask_of`), so byte
counts, chunk offsets and JSON stay valid. Headers, URLs and free text are `pipeline.redact`'s.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING

from pipeline.secret_patterns import (
    KEY_BOUNDARY,
    KEY_SHAPES,
    NAME,
    NAME_BOUNDARY,
    OWNERS,
    PEM_BODY,
    PEM_HEAD,
    REDACTED,
    SEP,
    TEXT_USERINFO,
    URL_SCHEME,
    USERINFO_VALUE,
    mask_of,
)

if TYPE_CHECKING:  # imported where used: the mitmproxy addon runs without pyarrow
    import pyarrow as pa

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
_ASSIGN_NAME = rf"(?i:(?:{NAME})\s*[:=]\s*(?:\[\s*|-\s+)?)"
_SCHEME_WORD = r"(?i:(?:bearer|basic|token)\s+)?"
_PARAM_VALUE = r"""(?:[^&;\s"'#<>\\%]|%2[FfBb]|%3[Dd])+"""
_PARAM_HEAD = rf"(?:[?&;]|%26|%3[Bb])(?i:key|code|{NAME})(?:=|%3[Dd])"
_BEARER_HEAD = r"(?i:bearer|basic)\s+"
# a credential has a digit: "a basic question", "the bearer instrument" are words
_BEARER_VALUE = r"(?=[A-Za-z0-9._~+/=-]*[0-9])[A-Za-z0-9._~+/=-]{8,}"
_TEXT_BEARER_VALUE = r"[A-Za-z0-9._~+/=-]*[0-9][A-Za-z0-9._~+/=-]*"  # the same in RE2

# A JSON field: its name's quotes and its value's opening quote at one level of escaping (the
# same run of backslashes), so a name in a string (`"password\":"` of a prompt) is no field.
_BODY_FIELD = re.compile(
    rf'((?P<run>\\*)"(?i:{NAME})(?P=run)"\s*:\s*(?P=run)")(?P<value>{_FIELD_VALUE})'.encode()
)
_BODY_KEY = re.compile(rf"{KEY_BOUNDARY}(?:{KEY_SHAPES})".encode())
# The rules that keep what names the value and mask the value (group `value`), same length,
# each with an RE2 test that spares its scan where it cannot match: Python's engine tries a
# pattern at every position, and these cost 10-35 ms per MB each even where nothing matches.
_BODY_NAMED = [
    (re.compile(rf"{_PARAM_HEAD}(?P<value>{_PARAM_VALUE})".encode()), _PARAM_HEAD),
    (
        re.compile(rf"{NAME_BOUNDARY}{_BEARER_HEAD}(?P<value>{_BEARER_VALUE})".encode()),
        r"(?i)b(?:earer|asic)\s",
    ),
    (re.compile(rf"{PEM_HEAD}(?P<value>{PEM_BODY})".encode()), "PRIVATE KEY"),
    (re.compile(rf"{URL_SCHEME}(?P<value>{USERINFO_VALUE})(?=@)".encode()), r"://[^\s@]+@"),
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
_NAME_RULE = re.compile(NAME)


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


# A superset of every rule, in RE2 (no look-around), run by Arrow over a whole body or column at
# several hundred MB/s: the Python patterns above only run where it finds something, so a body
# without a secret costs one scan. Each name rule ends in one of these words, or holds one of the
# words that make any name secret (`password_hash`).
_SCREEN = (
    rf"{KEY_SHAPES}|(?i:authorization|cookie|passw(?:or)?d|bearer\s|basic\s|private key|://[^\s@\"]+@)"
    rf"|(?i:(?:(?:{OWNERS}){SEP}?key|token|secret|auth|credentials?|signature|sig|pass|pwd)"
    rf"\\*\"?\s*[:=])|(?i:(?:[?&;]|%26|%3b)(?:key|code)(?:=|%3d))"
)
# A JSON field named as a credential, in RE2: spares _BODY_FIELD's scan where there is none.
_FIELD_SCREEN = rf'(?i:{NAME})\\*"\s*:'
# The same rules for stored prompt text, in RE2: one pass, every alternative's kept part a group
# of its own (a group that took no part is empty in the replacement).
_TEXT_BOUNDARY = r"(?:^|[^A-Za-z0-9_.\\]|\\[nrtbf]|\\u[0-9a-fA-F]{4})"
# a name may start after `_` or `-` (`_auth_token:`, `--api-key=`), as the body rule reads it
_TEXT_NAME = rf"{_TEXT_BOUNDARY}[_-]*{_ASSIGN_NAME}"
_TEXT_RULES = "|".join(
    (
        # (no back-references in RE2: the value does not start with what can follow a string's
        # end, as _DQ_VALUE)
        rf'((?i:\\*"(?:{NAME})\\*"\s*:\s*\\*")){_DQ_VALUE}',
        rf"({_TEXT_NAME}{_QUOTE_OPEN}){_DQ_VALUE}",
        rf"({_TEXT_NAME}'){_SINGLE_QUOTED_VALUE}",
        rf'({_TEXT_NAME}"?{_SCHEME_WORD}){_PLAIN_VALUE}',
        rf"({_TEXT_BOUNDARY}){KEY_SHAPES}",
        rf"({_PARAM_HEAD}){_PARAM_VALUE}",
        rf"({_TEXT_BOUNDARY}{_BEARER_HEAD}){_TEXT_BEARER_VALUE}",
        rf"({PEM_HEAD}){PEM_BODY}",
    )
)
# RE2 rewrites name groups \1 to \9 only: the URL password is a pass of its own
_TEXT_REPLACEMENT = "".join(rf"\{i}" for i in range(1, 9)) + REDACTED
_TEXT_USERINFO_RULE = rf"({URL_SCHEME}){TEXT_USERINFO}@"


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
    return _BODY_KEY.sub(whole, data) if has(KEY_SHAPES) else data


def mask_secrets(data: bytes, *, fill: int | None = None) -> bytes:
    """`data` (a capture line, a body) with every key shape and credential value masked by a
    mask of the same length: byte counts, chunk offsets and JSON validity stay as they were, so
    nothing that measures the body changes. With `fill`, every masked byte is that byte (NUL
    tells exactly which bytes a mask covers: `pipeline.stream_secrets` maps them back)."""
    mask = mask_of if fill is None else (lambda n: bytes([fill]) * n)
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


# Every alternative of _SCREEN holds one of these, case aside (a key shape's prefix, a word of
# a credential name, a scheme, a URL's userinfo, a query parameter): a text holding none of them
# cannot match it, and is known clean without Arrow compiling the screen (0.5 ms a call).
_SCREEN_WORDS = (
    b"sk-", b"gsk_", b"xai-", b"akia", b"asia", b"aiza", b"ghp_", b"github_pat_", b"xox", b"hf_",
    b"eyj", b"auth", b"cookie", b"pass", b"bearer", b"basic", b"private key", b"://", b"key",
    b"token", b"secret", b"credential", b"sig", b"pwd", b"code",
)  # fmt: skip


def could_hold_a_secret(value: bytes) -> bool:
    """False only for a value no masking rule can match (`_SCREEN_WORDS`)."""
    lowered = value.lower()
    return any(word in lowered for word in _SCREEN_WORDS)


def mask_secrets_each(values: list[bytes], *, fill: int | None = None) -> list[bytes]:
    """`mask_secrets` of each value, the screen run once over those that could hold a secret
    (the fields of one streamed answer: a screen per field cost ~0.5 ms each, more than the
    rest of the record)."""
    suspects = [i for i, value in enumerate(values) if could_hold_a_secret(value)]
    if not suspects:
        return values
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
    except ImportError:
        return [mask_secrets(value, fill=fill) for value in values]
    column = pa.array([values[i] for i in suspects], pa.binary())
    out = list(values)
    for i, hit in zip(suspects, pc.match_substring_regex(column, _SCREEN).to_pylist(), strict=True):
        if hit:
            out[i] = mask_secrets(values[i], fill=fill)
    return out


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
