"""A controlled prefix-cache experiment: the P/Q/R/S plan, sent through the recording layer.

The plan, with a fixed document P and short questions Q, R, S, all to
the same model, endpoint, key and settings, tools and system prompt fixed:

    1   P + Q    first submission     baseline (the cache may not be cold)
    2   P + Q    nothing changes      is the persisted full prefix reused
    3a  P + R    the final question   discovers the common prefix P ...
    3b  P + S    the final question   ... which a later request can really hit
    4   P' + S   one character at the start of P: an early change kills reuse downstream

Every request waits for the previous one to finish, then `wait_s` more (DeepSeek: "cache
construction takes seconds"). The plan runs `repeats` times; with `fresh_document` (default)
each repeat puts a run marker line before P, so a repeat does not start warm from the last one.
With `with_tool_round`, every request becomes a forced tool call then its tool result round trip.

Outputs in `out_dir`: `experiment.json` (settings, never the key), `results.jsonl` (one line per
request, appended as it finishes, so nothing is lost), and `capture/` (the capture JSONL the
recording layer writes: ingest it like any traffic).

The API key is read from an environment variable, never a flag (see `key_from_env`).
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson

from pipeline.capture.hooks import recording_client
from pipeline.errors import InputError, NetworkError, UsageError
from pipeline.experiment_wire import (
    MESSAGES,
    SYSTEM_PROMPT,
    TOOL_DESCRIPTION,
    TOOL_NAME,
    TOOL_PARAMETERS,
    Sent,
    Turn,
    api_for,
    chat_body,
    endpoint,
    headers_for,
    messages_body,
    send,
)

EXPERIMENT_TAG = "cacheaudit-experiment"
AGENT = "cacheaudit-experiment"
KEY_ENVS = ("CACHEAUDIT_API_KEY", "DEEPSEEK_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")

QUESTIONS = {
    "Q": "Summarise the document in one sentence.",
    "R": "List three key terms the document uses.",
    "S": "Which sentence of the document is the longest?",
}


@dataclass(frozen=True, slots=True)
class PlanRequest:
    step: str  # 1, 2, 3, 4
    request: str  # 1, 2, 3a, 3b, 4: the order inside one repeat
    label: str  # P+Q, P'+S, ...
    question: str  # Q, R or S
    changed: bool  # P' instead of P
    tests: str


PLAN: tuple[PlanRequest, ...] = (
    PlanRequest("1", "1", "P+Q", "Q", False, "baseline; do not assume the cache is cold"),
    PlanRequest("2", "2", "P+Q", "Q", False, "is the persisted full prefix reused"),
    PlanRequest("3", "3a", "P+R", "R", False, "discovering the common prefix P"),
    PlanRequest("3", "3b", "P+S", "S", False, "really hitting P later"),
    PlanRequest("4", "4", "P'+S", "S", True, "an early change kills reuse downstream"),
)


@dataclass(slots=True)
class ExperimentConfig:
    base_url: str
    model: str
    document: Path
    out_dir: Path
    repeats: int = 3
    wait_s: float = 10.0
    with_tool_round: bool = False
    api: str | None = None  # chat_completions or messages; None: from the host
    max_tokens: int = 64
    fresh_document: bool = True
    timeout_s: float = 120.0
    api_key_env: str | None = None  # the variable's NAME; None: first of KEY_ENVS that is set


@dataclass(slots=True)
class RequestResult:
    run_id: str
    repeat: int
    step: str
    request: str
    label: str
    phase: str  # question, tool_call, tool_result
    order: int  # 1-based across the whole run
    started_at: str
    interval_s: float | None  # since the previous request ended
    url: str
    model_requested: str
    model_returned: str | None
    input_chars: int
    status: int | None
    end_state: str  # ok, http_error, stream_error, interrupted, network_error
    finish_reason: str | None
    input_tokens: int | None  # all prompt tokens, cached included (pipeline semantics)
    cache_read_tokens: int | None
    cache_write_tokens: int | None
    output_tokens: int | None
    raw_usage: Any
    ttfb_ms: float | None
    ttft_ms: float | None  # time to the first non-empty answer text
    duration_ms: float | None
    output_chars: int
    output_sha256: str | None
    server: str | None  # the response's `server` / simulator header, to tell a simulator apart
    error: str | None = None


# --- the recording layer -------------------------------------------------------------------------


def open_client(
    capture_dir: Path, *, session_id: str, tags: list[str], timeout_s: float
) -> httpx.Client:
    """The one place the experiment gets its HTTP client: the capture layer's recorder."""
    client: httpx.Client = recording_client(
        capture_dir, session_id=session_id, agent=AGENT, tags=tags, timeout=timeout_s
    )
    return client


# --- the key and the changed document --------------------------------------------------------


def key_from_env(
    env: dict[str, str], name: str | None, base_url: str
) -> tuple[str | None, str | None]:
    """(key, variable name). A loopback endpoint (the simulator) may run without a key."""
    names = (name,) if name else KEY_ENVS
    for candidate in names:
        if env.get(candidate):
            return env[candidate], candidate
    host = urlsplit(base_url).hostname or ""
    if host in ("127.0.0.1", "localhost", "::1"):
        return None, None
    raise UsageError(
        f"no API key: set {' or '.join(names)} in the environment",
        hint="the key is read from the environment only, never from a flag, and never written",
    )


def changed_document(text: str) -> tuple[str, dict[str, Any]]:
    """P': the first letter or digit replaced by the next one of its kind (a -> b, 9 -> 0)."""
    for i, ch in enumerate(text):
        if ch.isascii() and ch.isalnum():
            if ch.isdigit():
                new = str((int(ch) + 1) % 10)
            else:
                base = ord("a") if ch.islower() else ord("A")
                new = chr(base + (ord(ch) - base + 1) % 26)
            return text[:i] + new + text[i + 1 :], {"offset": i, "from": ch, "to": new}
    raise InputError("the document has no ASCII letter or digit to change for step 4")


# --- the run -------------------------------------------------------------------------------------


@dataclass(slots=True)
class RunSummary:
    run_id: str
    out_dir: Path
    requests: int
    failed: int
    results: list[RequestResult] = field(default_factory=list)
    # why the run ended before its plan did (every request so far failed in a way the rest
    # would repeat), else None
    stopped: str | None = None


# A run stops early while nothing has succeeded yet: at once on a status no later request can
# escape (a bad key, a wrong endpoint or model), or after this many failures in a row. Waiting
# `--wait` between requests doomed the same way only delays the error.
_FATAL_STATUS = frozenset({401, 403, 404})
_STOP_AFTER_FAILURES = 3


def _hopeless(summary: RunSummary, result: RequestResult) -> str | None:
    if summary.failed < summary.requests:
        return None  # something worked: later failures are part of what is measured
    if result.status in _FATAL_STATUS:
        return f"HTTP {result.status} on the first request: every later one would get it too"
    if summary.failed >= _STOP_AFTER_FAILURES:
        return f"the first {summary.failed} requests all failed"
    return None


def _read_document(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise InputError(f"document {path} does not exist") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read document {path} as UTF-8: {exc}") from exc
    if not text.strip():
        raise InputError(f"document {path} is empty")
    return text


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    tmp.replace(path)


def run_experiment(
    cfg: ExperimentConfig,
    env: dict[str, str],
    *,
    sleep: Callable[[float], None] = time.sleep,
    progress: Callable[[RequestResult], None] | None = None,
) -> RunSummary:
    if cfg.repeats < 1:
        raise UsageError("--repeats must be at least 1")
    if cfg.wait_s < 0:
        raise UsageError("--wait must not be negative")
    text = _read_document(cfg.document)
    changed_text, change = changed_document(text)
    key, key_env = key_from_env(env, cfg.api_key_env, cfg.base_url)
    api = api_for(cfg.base_url, cfg.api)
    url = endpoint(cfg.base_url, api)
    headers = headers_for(api, key)
    build = messages_body if api == MESSAGES else chat_body
    run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    capture_dir = cfg.out_dir / "capture"
    results_path = cfg.out_dir / "results.jsonl"
    manifest: dict[str, Any] = {
        "run_id": run_id,
        "started_at": datetime.now(UTC).isoformat(),
        "finished_at": None,
        "base_url": cfg.base_url,
        "url": url,
        "api": api,
        "model": cfg.model,
        "document": str(cfg.document),
        "document_sha256": hashlib.sha256(text.encode()).hexdigest(),
        "document_chars": len(text),
        "step4_change": change,
        "repeats": cfg.repeats,
        "wait_s": cfg.wait_s,
        "with_tool_round": cfg.with_tool_round,
        "fresh_document": cfg.fresh_document,
        "max_tokens": cfg.max_tokens,
        "api_key_env": key_env,  # the variable's name only
        "system_prompt": SYSTEM_PROMPT,
        "questions": QUESTIONS,
        "tool": {"name": TOOL_NAME, "description": TOOL_DESCRIPTION, "parameters": TOOL_PARAMETERS},
        "plan": [asdict(p) for p in PLAN],
        "capture_dir": str(capture_dir),
        "server": None,
    }
    _write_json(cfg.out_dir / "experiment.json", manifest)
    summary = RunSummary(run_id, cfg.out_dir, 0, 0)
    last_end: float | None = None
    phases = (
        [("tool_call", True), ("tool_result", False)]
        if cfg.with_tool_round
        else [("question", False)]
    )
    with results_path.open("ab") as results_file:
        for repeat in range(1, cfg.repeats + 1):
            marker = (
                f"[cacheaudit experiment {run_id} repeat {repeat}]\n" if cfg.fresh_document else ""
            )
            for plan in PLAN:
                document = marker + (changed_text if plan.changed else text)
                question = QUESTIONS[plan.question]
                turn: Turn | None = None
                for phase, force in phases:
                    if phase == "tool_result" and turn is None:
                        break  # the model answered without the forced call: nothing to return
                    if summary.requests:
                        sleep(cfg.wait_s)
                    summary.requests += 1
                    body = build(cfg, document, question, turn, force)
                    raw_body = orjson.dumps(body)
                    tags = [
                        EXPERIMENT_TAG,
                        f"run={run_id}",
                        f"repeat={repeat}",
                        f"step={plan.step}",
                        f"request={plan.request}",
                        f"phase={phase}",
                        f"order={summary.requests}",
                    ]
                    started = datetime.now(UTC)
                    t_start = time.perf_counter()
                    with open_client(
                        capture_dir, session_id=run_id, tags=tags, timeout_s=cfg.timeout_s
                    ) as client:
                        sent = send(client, url, api, headers, raw_body)
                    interval = None if last_end is None else t_start - last_end
                    last_end = time.perf_counter()
                    if summary.requests == 1 and sent.info.outcome == "network_error":
                        raise NetworkError(
                            f"cannot reach {url}: {sent.error}",
                            hint="is it up? `cacheaudit simulate serve` runs a local one",
                        )
                    if manifest["server"] is None and sent.server:
                        manifest["server"] = sent.server
                    result = _result(
                        run_id,
                        repeat,
                        plan,
                        phase,
                        summary.requests,
                        started,
                        interval,
                        url,
                        cfg.model,
                        len(document) + len(question),
                        sent,
                    )
                    results_file.write(orjson.dumps(asdict(result)) + b"\n")
                    results_file.flush()
                    summary.results.append(result)
                    if result.end_state != "ok":
                        summary.failed += 1
                    if progress:
                        progress(result)
                    summary.stopped = _hopeless(summary, result)
                    if summary.stopped:
                        break
                    turn = sent.watch.turn if sent.watch.turn.tool_id else None
                if summary.stopped:
                    break
            if summary.stopped:
                break
    manifest["stopped_early"] = summary.stopped
    manifest["finished_at"] = datetime.now(UTC).isoformat()
    manifest["requests"] = summary.requests
    manifest["failed"] = summary.failed
    _write_json(cfg.out_dir / "experiment.json", manifest)
    return summary


def _result(
    run_id: str,
    repeat: int,
    plan: PlanRequest,
    phase: str,
    order: int,
    started: datetime,
    interval: float | None,
    url: str,
    model: str,
    input_chars: int,
    sent: Sent,
) -> RequestResult:
    usage = sent.info.usage
    turn = sent.watch.turn
    output = turn.text + (turn.tool_arguments if turn.tool_id else "")
    return RequestResult(
        run_id=run_id,
        repeat=repeat,
        step=plan.step,
        request=plan.request,
        label=plan.label,
        phase=phase,
        order=order,
        started_at=started.isoformat(),
        interval_s=round(interval, 4) if interval is not None else None,
        url=url,
        model_requested=model,
        model_returned=sent.info.model,
        input_chars=input_chars,
        status=sent.status,
        end_state=sent.info.outcome,
        finish_reason=sent.info.finish_reason,
        input_tokens=usage.input_tokens if usage else None,
        cache_read_tokens=usage.cache_read_tokens if usage else None,
        cache_write_tokens=usage.cache_write_tokens if usage else None,
        output_tokens=usage.output_tokens if usage else None,
        raw_usage=usage.raw if usage else None,
        ttfb_ms=round(sent.ttfb_ms, 3) if sent.ttfb_ms is not None else None,
        ttft_ms=round(sent.watch.first_text_ms, 3)
        if sent.watch.first_text_ms is not None
        else None,
        duration_ms=round(sent.duration_ms, 3),
        output_chars=len(output),
        output_sha256=hashlib.sha256(output.encode()).hexdigest() if output else None,
        server=sent.server,
        error=sent.error,
    )


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None


def load_results(out_dir: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The manifest and every result line of an experiment directory.

    A file that is not what `experiment run` writes (a run killed mid-write, a full disk, a
    hand edit) is an InputError naming the file, and the line for results.jsonl."""
    manifest_path = out_dir / "experiment.json"
    if not manifest_path.exists():
        raise InputError(f"{out_dir} is not an experiment directory (no experiment.json)")
    try:
        manifest = orjson.loads(_read_bytes(manifest_path))
    except orjson.JSONDecodeError as exc:
        raise InputError(
            f"{manifest_path}: not valid JSON ({exc})",
            hint="it is rewritten at the end of `cacheaudit experiment run`; run it again",
        ) from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("run_id"), str):
        raise InputError(
            f"{manifest_path}: not an experiment manifest (no run_id)",
            hint="it is written by `cacheaudit experiment run`",
        )
    results_path = out_dir / "results.jsonl"
    lines = _read_bytes(results_path).splitlines() if results_path.exists() else []
    results = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            result = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            cut = " (cut short: was the run stopped while writing?)" if number == len(lines) else ""
            raise InputError(
                f"{results_path}:{number}: not valid JSON{cut} ({exc})",
                hint="remove or repair that line, or run the experiment again",
            ) from None
        if not isinstance(result, dict):
            raise InputError(f"{results_path}:{number}: not a result object")
        results.append(result)
    return manifest, results
