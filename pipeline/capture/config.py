"""Proxy configuration: where to listen, where to write, and which upstream serves a request.

A TOML file (`cacheaudit capture proxy --config upstreams.toml`) routes by path prefix or by the
Host header the client used; `--upstream URL` alone is one route for every path:

    listen = "127.0.0.1:8787"          # optional; --listen wins
    out = "capture"                    # optional; --out wins

    [[upstream]]
    prefix = "/deepseek"               # /deepseek/chat/completions -> api.deepseek.com/chat/...
    url = "https://api.deepseek.com"

    [[upstream]]
    host = "anthropic.localhost"       # requests sent to http://anthropic.localhost:8787/...
    url = "https://api.anthropic.com"
    agent = "claude-code"              # optional hint recorded with each exchange

    [[upstream]]
    url = "https://api.openai.com"     # no prefix and no host: everything else

The most specific route wins: a host match before a prefix-only route, then the longest prefix.
The prefix is removed before forwarding (`strip_prefix = false` keeps it); the upstream URL's
own path is put in front of what remains.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, urlsplit, urlunsplit

from pipeline.errors import InputError, UsageError

DEFAULT_LISTEN = "127.0.0.1:8787"


@dataclass(frozen=True, slots=True)
class UpstreamRoute:
    url: str  # scheme://host[:port][/base path], no trailing slash
    prefix: str = "/"
    host: str | None = None  # fnmatch pattern on the Host header, port stripped
    strip_prefix: bool = True
    agent: str | None = None

    def matches(self, path: str, host: str) -> bool:
        if self.host is not None and not fnmatch.fnmatch(host, self.host):
            return False
        if self.prefix == "/":
            return True
        return path == self.prefix or path.startswith(self.prefix + "/")

    def target(self, raw_path: str, query: str) -> str:
        rest = raw_path
        if self.strip_prefix and self.prefix != "/":
            rest = raw_path[len(self.prefix) :] or "/"
        if not rest.startswith("/"):
            rest = "/" + rest
        return self.url + rest + (f"?{query}" if query else "")


@dataclass
class ProxyConfig:
    routes: list[UpstreamRoute] = field(default_factory=list)
    listen: str | None = None
    out: str | None = None

    def route_for(self, path: str, host_header: str | None) -> UpstreamRoute | None:
        host = (host_header or "").lower()
        host = host.split("]")[0] + "]" if host.startswith("[") else host.split(":")[0]
        candidates = [r for r in self.routes if r.matches(path, host)]
        if not candidates:
            return None
        return max(candidates, key=lambda r: (r.host is not None, len(r.prefix)))


def _shown(parts: SplitResult) -> str:
    """An upstream URL for an error message: a user:password@ becomes ***@, and the query
    and fragment (either may hold a key) are only marked, never repeated."""
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rpartition("@")[2]
    shown = urlunsplit(parts._replace(netloc=netloc, query="", fragment=""))
    if not netloc and "@" in shown:  # no scheme: `user:pw@host` reads as scheme `user`
        shown = "***@" + shown.rpartition("@")[2]
    return shown + ("?..." if parts.query else "") + ("#..." if parts.fragment else "")


def _clean_url(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise InputError(f"{where}: `url` must be a string like https://api.openai.com")
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InputError(
            f"{where}: upstream {_shown(parts)!r} is not an http(s) URL",
            hint="for example https://api.openai.com or http://127.0.0.1:8000",
        )
    if parts.query or parts.fragment:
        raise InputError(f"{where}: upstream {_shown(parts)!r} must not have a query or fragment")
    if "@" in parts.netloc:
        # httpx would send it as Basic auth, replacing the Authorization header (the API key)
        # of every client request: not "forwarded unchanged", and the record would not say so.
        raise InputError(
            f"{where}: upstream {_shown(parts)!r} must not have a user name or password",
            hint="the proxy forwards the client's own headers unchanged: send credentials"
            " from the client (its API key / Authorization header)",
        )
    return f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"


def _clean_prefix(value: Any, where: str) -> str:
    if value is None:
        return "/"
    if not isinstance(value, str) or not value.startswith("/"):
        raise InputError(f"{where}: `prefix` must start with /, got {value!r}")
    return value.rstrip("/") or "/"


def upstream_route(url: str, where: str = "--upstream") -> UpstreamRoute:
    return UpstreamRoute(url=_clean_url(url, where))


def load_config(path: Path) -> ProxyConfig:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InputError(f"proxy config {path} does not exist") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"proxy config {path} cannot be read: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"proxy config {path} is not valid TOML: {exc}") from exc
    entries = data.get("upstream", [])
    if not isinstance(entries, list) or not entries:
        raise InputError(
            f"proxy config {path} has no [[upstream]] entries",
            hint='add [[upstream]] with url = "https://api.openai.com"',
        )
    routes = []
    known = {"url", "prefix", "host", "strip_prefix", "agent"}
    for i, item in enumerate(entries, start=1):
        where = f"{path} [[upstream]] #{i}"
        if not isinstance(item, dict) or "url" not in item:
            raise InputError(f'{where} needs url = "https://..."')
        unknown = set(item) - known
        if unknown:
            raise InputError(
                f"{where}: unknown keys {sorted(unknown)}", hint=f"known: {sorted(known)}"
            )
        host = item.get("host")
        agent = item.get("agent")
        routes.append(
            UpstreamRoute(
                url=_clean_url(item["url"], where),
                prefix=_clean_prefix(item.get("prefix"), where),
                host=str(host).lower() if host is not None else None,
                strip_prefix=bool(item.get("strip_prefix", True)),
                agent=str(agent) if agent is not None else None,
            )
        )
    listen, out = data.get("listen"), data.get("out")
    return ProxyConfig(
        routes=routes,
        listen=str(listen) if listen is not None else None,
        out=str(out) if out is not None else None,
    )


LISTEN_FORMAT = "--listen wants HOST:PORT, e.g. 127.0.0.1:8787"


def parse_listen(value: str) -> tuple[str, int]:
    """`HOST:PORT`, `[v6]:PORT`, `:PORT` or a bare `PORT` (both loopback) -> (host, port).

    Anything else (a host without a port, an unbracketed IPv6 address, a port that is not a
    number from 0 to 65535) is a UsageError naming the expected form."""
    text = value.strip()
    if text.isdigit():
        text = ":" + text
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
    else:
        host, sep, port = text.rpartition(":")
        if ":" in host:
            raise UsageError(
                f"--listen {value!r}: write an IPv6 address in brackets", hint="e.g. [::1]:8787"
            )
    if not sep:
        raise UsageError(f"{LISTEN_FORMAT}; got {value!r}", hint="a bare port means 127.0.0.1:PORT")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UsageError(f"{LISTEN_FORMAT}; got {value!r} (the port is a number, 0 to 65535)")
    return host or "127.0.0.1", int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def exposure_warning(host: str) -> str | None:
    """The warning printed when the proxy listens beyond this machine."""
    if is_loopback(host):
        return None
    return (
        f"warning: listening on {host}, not loopback: anyone who can reach this port can send"
        " requests through your upstream, and their prompts are written to your capture."
        " Use --listen 127.0.0.1:PORT unless you mean it."
    )
