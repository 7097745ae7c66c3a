"""Which provider and API dialect an exchange speaks, from its host and path.

Built-in host rules cover the public APIs; users add self-hosted gateways with a TOML file
(`--providers FILE` or `CACHEAUDIT_PROVIDERS`):

    [[provider]]
    host = "llm-gateway.internal*"   # fnmatch pattern on the host (port stripped)
    provider = "vllm"
    api = "chat_completions"          # optional: force the dialect, else chosen from the path

User rules are tried first, so they can also override a built-in mapping.
"""

from __future__ import annotations

import fnmatch
import os
import tomllib
from dataclasses import dataclass
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


@dataclass(frozen=True, slots=True)
class UserRule:
    host: str
    provider: str
    api: str | None


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
    rules = []
    for i, item in enumerate(data.get("provider", [])):
        if not isinstance(item, dict) or "host" not in item or "provider" not in item:
            raise InputError(
                f"provider map {path}: entry {i + 1} needs `host` and `provider`",
                hint='each [[provider]] needs host = "pattern" and provider = "name"',
            )
        rules.append(UserRule(str(item["host"]), str(item["provider"]), item.get("api")))
    return rules


def route(host: str, path: str, rules: list[UserRule] | None = None) -> Route | None:
    """Provider and dialect for a request, or None when it is not an LLM API call."""
    host = host.lower().split(":")[0]
    api = api_from_path(path)
    for rule in rules or ():
        if fnmatch.fnmatch(host, rule.host.lower()):
            chosen = rule.api or api
            return Route(rule.provider, chosen) if chosen else None
    if api is None:
        return None
    for pattern, provider in BUILTIN_HOSTS:
        if fnmatch.fnmatch(host, pattern):
            return Route(provider, api)
    # Any other host speaking a known path: a self-hosted OpenAI-compatible server (vLLM,
    # SGLang, a gateway). The provider column then holds the host, as the table contract says.
    return Route(host, api)
