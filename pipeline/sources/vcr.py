"""VCR cassettes (vcrpy, pytest-recording; YAML or JSON) as an input.

A cassette is `{"version": 1, "interactions": [{"request": ..., "response": ...}, ...]}`:
- request: `method`, `uri`, `headers` (name -> list of values), `body` (a string, bytes as YAML
  `!!binary`, or null);
- response: `status` (`{"code", "message"}`), `headers` (name -> list of values) and `body`
  (`{"string": ...}`: text, `!!binary` bytes, or null). Older vcrpy httpx cassettes wrote
  `status_code` and `content` instead; both shapes are read.

A body still compressed (the cassette keeps the `Content-Encoding` header unless vcrpy's
`decode_compressed_response` was on) is decoded as the client would decode it. A cassette
records no timing: the times an exchange took are unknown (NULL, never 0), and its start is the
response's `Date` header (the second the server stamped it) where recorded, else unknown. The
interaction's position in the cassette (0-based) is its record index and keeps the order.

A YAML cassette laid out as vcrpy writes it (each interaction a `- ` item at column 0, no
anchors) is parsed one interaction at a time: memory is one interaction, and an interaction that
is not valid YAML is a reject of its own. Any other layout, and JSON, is parsed whole: memory is
then about the cassette. A directory is read one file at a time per worker.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import orjson
import yaml

from pipeline.capture.decode import BodyDecoder
from pipeline.capture_format import RecordError
from pipeline.records import Exchange, Reject
from pipeline.redact import (
    account_of,
    cut,
    cut_text,
    mask_values,
    redact_headers,
    redact_url,
    secret_values,
)
from pipeline.sources import open_binary

# A YAML cassette: `interactions:` as a top-level key (vcrpy sorts keys, so it comes first; a
# `version:` or a document start may precede it). A JSON one: `interactions` as the first or
# second key (vcrpy's JSON serializer writes `version` first) of the top-level object.
_YAML_CASSETTE = re.compile(
    rb"\A(?:%YAML[^\n]*\n|---[ \t]*\r?\n|#[^\n]*\n|version:[^\n]*\n|[ \t]*\r?\n)*"
    rb"interactions:[ \t]*(?:\r?\n|\[)"
)
_JSON_CASSETTE = re.compile(rb'\A\{\s*(?:"version"\s*:\s*\d+\s*,\s*)?"interactions"\s*:\s*\[')


def looks_like_cassette(text: bytes) -> bool:
    """Whether the head of a file (BOM and leading blank lines removed) is a VCR cassette."""
    return _JSON_CASSETTE.match(text) is not None or _YAML_CASSETTE.match(text) is not None


try:  # libyaml parses about 10x faster than the pure-Python loader
    _BaseLoader: type[yaml.SafeLoader] = yaml.CSafeLoader  # type: ignore[attr-defined,unused-ignore]
except AttributeError:  # pragma: no cover - PyYAML built without libyaml
    _BaseLoader = yaml.SafeLoader


class _CassetteLoader(_BaseLoader):  # type: ignore[valid-type,misc,unused-ignore]
    """YAML's safe loader plus the plain-value Python tags cassettes written by older vcrpy
    versions carry (`!!python/unicode`, `!!python/str`, `!!python/tuple`). Any other Python
    tag (an object) is refused, never constructed: the interaction is rejected."""


def _python_str(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    return loader.construct_scalar(node)


def _python_tuple(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    return tuple(loader.construct_sequence(node))


for _tag in ("str", "unicode"):
    _CassetteLoader.add_constructor(f"tag:yaml.org,2002:python/{_tag}", _python_str)
_CassetteLoader.add_constructor("tag:yaml.org,2002:python/tuple", _python_tuple)


def _parse(raw: bytes) -> Any:
    if raw.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{"):
        try:
            return orjson.loads(raw.removeprefix(b"\xef\xbb\xbf"))
        except orjson.JSONDecodeError as exc:
            raise RecordError(f"cassette is not valid JSON: {exc}") from exc
    try:
        return yaml.load(raw, Loader=_CassetteLoader)  # noqa: S506 - a safe loader subclass
    except yaml.YAMLError as exc:
        text = " ".join(str(exc).split())
        raise RecordError(f"cassette is not valid YAML: {text[:300]}") from exc


def _headers(value: Any, where: str) -> list[tuple[str, str]]:
    """vcrpy writes headers as name -> [values]; a single value is accepted too."""
    if value is None:
        return []
    if not isinstance(value, dict):
        raise RecordError(f"{where}.headers must be a mapping of name to values")
    out: list[tuple[str, str]] = []
    for name, values in value.items():
        for item in values if isinstance(values, list | tuple) else [values]:
            out.append(
                (str(name), item.decode("latin-1") if isinstance(item, bytes) else str(item))
            )
    return out


def _bytes(value: Any, where: str) -> bytes:
    if value is None:
        return b""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    raise RecordError(f"{where} must be a string or binary, not {type(value).__name__}")


def _header(headers: list[tuple[str, str]], name: str) -> str | None:
    values = [v for k, v in headers if k.lower() == name]
    return ", ".join(values) if values else None


def _decoded(body: bytes, headers: list[tuple[str, str]]) -> bytes:
    """The body as the client reads it: a Content-Encoding still applied is undone."""
    encoding = _header(headers, "content-encoding")
    if not body or encoding is None:
        return body
    decoder = BodyDecoder(encoding)
    out = decoder.decode(body) + decoder.flush()
    if decoder.error is not None:
        raise RecordError(f"response body: {decoder.error}")
    return out


# RFC 5322 section 3.3: a zone of `-0000` says the time is in UTC and the sender's local zone is
# not known. Python's parser returns it without a zone, as it does a date that names none.
_UTC_UNKNOWN_LOCAL = re.compile(r"\s-0000\s*$")
# A leap second, `23:59:60` (RFC 5322 allows second 60), which datetime cannot hold.
_LEAP_SECOND = re.compile(r"(\d\d:\d\d:)60\b")


def started_at_of(headers: list[tuple[str, str]]) -> datetime | None:
    """The response's `Date` header as UTC, or None when absent or not a date. A leap second is
    the last microsecond of its UTC day, as in a capture (capture_format.parse_timestamp)."""
    value = _header(headers, "date")
    if value is None:
        return None
    text, leaps = _LEAP_SECOND.subn(r"\g<1>59", value, count=1)
    try:
        ts = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if ts.tzinfo is None:
        if not _UTC_UNKNOWN_LOCAL.search(text):
            return None  # RFC 9110 dates are GMT; one without a zone is not trusted
        ts = ts.replace(tzinfo=UTC)
    utc = ts.astimezone(UTC)
    if leaps:
        if (utc.hour, utc.minute, utc.second) != (23, 59, 59):
            return None  # a second 60 anywhere but the end of a UTC day is no leap second
        utc = utc.replace(microsecond=999_999)
    return utc


def interaction_to_exchange(interaction: Any, source: str, index: int) -> Exchange:
    if not isinstance(interaction, dict):
        raise RecordError("interaction is not a mapping with request and response")
    request = interaction.get("request")
    response = interaction.get("response")
    if not isinstance(request, dict) or not isinstance(request.get("uri"), str):
        raise RecordError("interaction has no request.uri")
    if response is not None and not isinstance(response, dict):
        raise RecordError("response must be a mapping")
    response = response or {}
    url = request["uri"]
    raw_headers = _headers(request.get("headers"), "request")
    response_headers = _headers(response.get("headers"), "response")
    status_value = response.get("status")
    if isinstance(status_value, dict):
        status_value = status_value.get("code")
    elif "status_code" in response:  # the older httpx shape
        status_value = response.get("status_code")
    if status_value is not None and (
        not isinstance(status_value, int) or isinstance(status_value, bool)
    ):
        raise RecordError(
            f"response status code is not a number: {cut_text(str(status_value), 40)!r}"
        )
    body = response.get("body")
    if isinstance(body, dict):
        raw_body = _bytes(body.get("string"), "response.body.string")
    elif "content" in response:  # the older httpx shape
        raw_body = _bytes(response.get("content"), "response.content")
    else:
        raw_body = _bytes(body, "response.body")
    status = status_value if isinstance(status_value, int) and status_value > 0 else None
    return Exchange(
        source=source,
        index=index,
        started_at=started_at_of(response_headers),
        method=str(request.get("method") or "GET").upper(),
        url=redact_url(url),
        request_headers=redact_headers(raw_headers),
        request_body=_bytes(request.get("body"), "request.body"),
        status=status,
        response_headers=redact_headers(response_headers),
        response_body=mask_values(
            _decoded(raw_body, response_headers), secret_values(raw_headers, url)
        ),
        account=account_of(raw_headers, url),
        capture_outcome="interrupted" if status is None else None,
    )


def _excerpt(interaction: Any) -> str:
    from pipeline.sources.capture import redact_excerpt

    try:
        raw = orjson.dumps(interaction, default=repr)
    except TypeError:
        raw = repr(interaction).encode()
    return redact_excerpt(cut(raw, 400))


# A YAML anchor where a node starts (`key: &id001`, `- &id001`, `key: !!str &id001`, or
# `&id001` on a line of its own): an alias to it may sit in another interaction, so a cassette
# with one is parsed whole. PyYAML writes them only for an object dumped twice. An `&` inside a
# body's text (`R&D &co.`, `cd src && make`) is none: counting it cost a whole parse, and with
# it the streaming of a large cassette and the detection of one cut short.
_ANCHOR = re.compile(rb"(?:(?::|-)[ \t]+(?:![^\s]*[ \t]+)?|^[ \t]*)&[^\s\[\]{},]+", re.MULTILINE)
_SCAN_BLOCK = 1024 * 1024


def _block_layout(path: Path) -> bool:
    """Whether the cassette is YAML as vcrpy writes it, so its interactions can be parsed one
    at a time: `interactions:` at column 0 followed by its items at column 0 (`- request:`),
    and no anchor anywhere. Anything else (JSON, an indented list, anchors) is parsed whole."""
    with open_binary(path) as fh:
        seen_key = False
        for line in fh:
            if not seen_key:
                if line.startswith(b"{"):
                    return False  # JSON
                seen_key = line.startswith(b"interactions:")
                if seen_key and line[len(b"interactions:") :].strip():
                    return False  # `interactions: []` or a flow list: small, parse whole
                continue
            if not line.strip() or line.startswith(b"#"):
                continue
            if not line.startswith(b"- "):
                return False
            break
        else:
            return False
    with open_binary(path) as fh:
        tail = b""
        while block := fh.read(_SCAN_BLOCK):
            if _ANCHOR.search(tail + block):
                return False
            tail = block[-256:]
    return True


# What `_items` yields for a last item the file ends inside: vcrpy writes `version: 1` after the
# interactions, so a cassette that ends in one was cut short (a test run killed mid-write), and
# that interaction may lack its status or the end of its body.
CUT_SHORT = b"\0cut short"


def _items(path: Path) -> Iterator[bytes]:
    """The text of each top-level item of `interactions` (see `_block_layout`): an item runs
    from its `- ` at column 0 to the next one, or to the next key at column 0 (`version: 1`);
    a last item the file ends inside is followed by CUT_SHORT."""
    with open_binary(path) as fh:
        version_first = False  # `version:` written before the interactions (a re-dumped file)
        for line in fh:
            if line.startswith(b"interactions:"):
                break
            version_first = version_first or line.startswith(b"version:")
        item: list[bytes] = []
        for line in fh:
            if line.startswith(b"- "):
                if item:
                    yield b"".join(item)
                item = [line]
            elif line[:1] in (b" ", b"\t", b"\r", b"\n", b"#", b""):
                if item:
                    item.append(line)
            else:
                break  # the next top-level key, or a document marker
        else:
            if item:
                yield b"".join(item)
                if not version_first:
                    yield CUT_SHORT
            return
        if item:
            yield b"".join(item)


def _read(interaction: Any, source: str, index: int) -> Exchange | Reject:
    try:
        return interaction_to_exchange(interaction, source, index)
    except (RecordError, TypeError, ValueError, AttributeError) as exc:
        reason = f"cassette interaction not readable: {exc}"
        return Reject(source, index, reason, _excerpt(interaction))


def _iter_items(path: Path) -> Iterator[Exchange | Reject]:
    """A block-layout YAML cassette one interaction at a time: memory is one interaction,
    and an interaction that is not valid YAML is a reject of its own."""
    from pipeline.sources.capture import redact_excerpt

    source = str(path)
    items = _items(path)
    pending = next(items, None)
    index = -1
    while pending is not None:
        text, pending, index = pending, next(items, None), index + 1
        if pending == CUT_SHORT:
            reason = "cassette cut short inside this interaction (no `version:` after it)"
            yield Reject(source, index, reason, redact_excerpt(cut(text, 400)))
            return
        try:
            parsed = yaml.load(text, Loader=_CassetteLoader)  # noqa: S506 - a safe loader
        except yaml.YAMLError as exc:
            reason = "cassette interaction is not valid YAML: " + " ".join(str(exc).split())
            yield Reject(source, index, reason[:400], redact_excerpt(text))
            continue
        yield _read(parsed[0] if isinstance(parsed, list) and parsed else None, source, index)


def iter_vcr(path: Path) -> Iterator[Exchange | Reject]:
    if _block_layout(path):
        yield from _iter_items(path)
        return
    source = str(path)
    with open_binary(path) as fh:
        raw = fh.read()
    try:
        data = _parse(raw)
    except RecordError as exc:
        yield Reject(source, 0, str(exc), "")
        return
    interactions = data.get("interactions") if isinstance(data, dict) else None
    if not isinstance(interactions, list):
        yield Reject(source, 0, "cassette has no interactions list", "")
        return
    del raw, data
    for index, interaction in enumerate(interactions):
        yield _read(interaction, source, index)
        interactions[index] = None  # its bytes are not needed again
