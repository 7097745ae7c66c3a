"""Which provider and API dialect an exchange speaks, from its host and path.

Built-in host rules cover the public APIs; users add self-hosted gateways with a TOML file
(`--providers FILE` or `CACHEAUDIT_PROVIDERS`):

    [[provider]]
    host = "llm-gateway.internal*"   # fnmatch pattern on the host
    provider = "vllm"
    api = "chat_completions"          # optional: force the dialect, else chosen from the path

A pattern without a port matches the host whatever the port; a pattern with one
("127.0.0.1:8000", "gw:80*") matches host:port as the URL writes it (a default port the URL
leaves out is not there to match). User rules are tried first, in file order, so they can also
override a built-in mapping. `api` must name a dialect (`pipeline.dialects.DIALECTS`).

The bundled simulator (`cacheaudit simulate serve`) names itself and its rules in a response
header; traffic to it that no rule maps is labelled with the provider whose rules it ran
(`simulator_provider`), so that provider's cache rules apply to it.
"""

from __future__ import annotations

import fnmatch
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.errors import InputError

# Host pattern -> provider name used in the `provider` column.
BUILTIN_HOSTS: tuple[tuple[str, str], ...] = (
    ("api.deepseek.com", "deepseek"),
    ("api.openai.com", "openai"),
    ("*.openai.azure.com", "azure_openai"),
    ("api.anthropic.com", "anthropic"),
    ("generativelanguage.googleapis.com", "google"),
    ("*aiplatform.googleapis.com", "google"),
    ("bedrock-runtime.*.amazonaws.com", "bedrock"),
    ("bedrock-runtime.amazonaws.com", "bedrock"),
    ("openrouter.ai", "openrouter"),
    ("api.z.ai", "zhipu"),
    ("open.bigmodel.cn", "zhipu"),
    ("dashscope*.aliyuncs.com", "alibaba"),
    ("api.groq.com", "groq"),
    ("api.moonshot.ai", "moonshot"),
    ("api.moonshot.cn", "moonshot"),
)


@dataclass(frozen=True, slots=True)
class Route:
    provider: str
    api: str
    # No rule named the provider: the column holds the host (not part of equality).
    by_host: bool = field(default=False, compare=False)


@dataclass(frozen=True, slots=True)
class UserRule:
    host: str
    provider: str
    api: str | None

    @property
    def with_port(self) -> bool:
        """Whether the pattern names a port (then it is matched against host:port)."""
        return ":" in self.host.rpartition("]")[2]  # [::1] is an IPv6 host, not a port

    @property
    def pattern(self) -> str:
        """The fnmatch pattern: lower case, and an IPv6 literal's `[` taken as itself (not as
        the start of a character set)."""
        host = self.host.lower()
        return "[[]" + host[1:] if host.startswith("[") else host

    def describe(self) -> str:
        return f'host = "{self.host}", provider = "{self.provider}"'


# `x-cacheaudit-simulator: cacheaudit-simulator; rules=deepseek; no inference` (the simulator's
# response header) -> the provider whose cache rules it applied.
SIMULATOR_HEADER = "x-cacheaudit-simulator"
SIMULATOR_RULES = {"deepseek": "deepseek", "openai": "openai", "anthropic": "anthropic"}


def api_from_path(path: str) -> str | None:
    """The dialect a URL path speaks, or None when it is not an LLM call we know."""
    p = path.rstrip("/")
    if p.endswith("/chat/completions"):
        return "chat_completions"
    if p.endswith("/responses"):
        return "responses"
    if p.endswith("/messages"):
        return "messages"
    if p.endswith((":generateContent", ":streamGenerateContent")):
        return "generate_content"
    if p.endswith("/interactions"):
        return "interactions"
    if "/publishers/anthropic/" in p and p.endswith((":rawPredict", ":streamRawPredict")):
        return "messages"  # Claude on Vertex AI speaks the Messages body
    if p.endswith(("/converse", "/converse-stream")):
        return "converse"
    if p.endswith(("/invoke", "/invoke-with-response-stream")) and _is_bedrock_model_path(p):
        return "invoke_model"  # Bedrock InvokeModel (Claude: an Anthropic Messages body)
    return None


def _is_bedrock_model_path(path: str) -> bool:
    """`.../model/{modelId}/invoke[-with-response-stream]`: a bare `/invoke` is too common
    (LangServe `/{chain}/invoke`) to be taken as Bedrock without the `model/{id}` before it."""
    parts = path.split("/")
    return len(parts) >= 4 and parts[-3] == "model" and bool(parts[-2])


def load_user_rules(path: Path | None = None) -> list[UserRule]:
    if path is None:
        env = os.environ.get("CACHEAUDIT_PROVIDERS")
        if not env:
            return []
        path = Path(env)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InputError(f"provider map {path} does not exist") from exc
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"provider map {path} is not valid TOML: {exc}") from exc
    from pipeline.dialects import DIALECTS

    rules = []
    for i, item in enumerate(data.get("provider", [])):
        if not isinstance(item, dict) or "host" not in item or "provider" not in item:
            raise InputError(
                f"provider map {path}: entry {i + 1} needs `host` and `provider`",
                hint='each [[provider]] needs host = "pattern" and provider = "name"',
            )
        api = item.get("api")
        if api is not None and api not in DIALECTS:
            raise InputError(
                f"provider map {path}: entry {i + 1} (host = {str(item['host'])!r}) has"
                f" api = {api!r}, not a dialect; use one of {', '.join(sorted(DIALECTS))}"
                " (or leave api out to choose it from the URL path)"
            )
        rules.append(UserRule(str(item["host"]), str(item["provider"]), api))
    return rules


def bare_host(host: str) -> str:
    """The host without its port: `gw:8000` -> `gw`, `[::1]:8000` -> `[::1]`."""
    if host.startswith("["):
        end = host.find("]")
        return host[: end + 1] if end >= 0 else host
    return host.partition(":")[0]


def matching_rule(host: str, rules: list[UserRule] | tuple[UserRule, ...]) -> int | None:
    """The index of the first user rule whose pattern matches `host` (host[:port], as in the
    URL), or None."""
    host = host.lower()
    bare = bare_host(host)
    for i, rule in enumerate(rules):
        if fnmatch.fnmatch(host if rule.with_port else bare, rule.pattern):
            return i
    return None


def builtin_provider(host: str) -> str | None:
    """The provider of a known API host (BUILTIN_HOSTS), port or not; None for any other."""
    bare = bare_host(host.lower())
    for pattern, provider in BUILTIN_HOSTS:
        if fnmatch.fnmatch(bare, pattern):
            return provider
    return None


def route(host: str, path: str, rules: list[UserRule] | None = None) -> Route | None:
    """Provider and dialect for a request, or None when it is not an LLM API call."""
    api = api_from_path(path)
    if rules:
        index = matching_rule(host, rules)
        if index is not None:
            rule = rules[index]
            chosen = rule.api or api
            return Route(rule.provider, chosen) if chosen else None
    if api is None:
        return None
    known = builtin_provider(host)
    if known is not None:
        return Route(known, api)
    # Any other host speaking a known path: a self-hosted OpenAI-compatible server (vLLM,
    # SGLang, a gateway). The provider column then holds the host, as the table contract says.
    return Route(bare_host(host.lower()), api, by_host=True)


def simulator_provider(header_value: str | None) -> str | None:
    """The provider whose cache rules the bundled simulator applied, from its response header
    (`cacheaudit-simulator; rules=deepseek; no inference`), or None for any other server."""
    if not header_value:
        return None
    name, *params = (part.strip() for part in header_value.split(";"))
    if name != "cacheaudit-simulator":
        return None
    for param in params:
        key, _, value = param.partition("=")
        if key.strip() == "rules":
            return SIMULATOR_RULES.get(value.strip().lower())
    return None
