"""Record one command's LLM API traffic: `cacheaudit capture run -- COMMAND [ARGS...]`.

The recording proxy (pipeline.capture.proxy) runs in a thread of this process on a free
loopback port, with one path prefix per known provider (`/openai`, `/anthropic`, ...). The
child gets, on top of the user's environment, the base-URL variables the official SDKs and
common agent tools read, each pointing at its provider's prefix. A variable the user had
already set (a gateway, a local server) is kept as that route's upstream, so the child still
reaches the same place, now through the proxy. Keys travel in the child's own headers: the
proxy forwards them and the capture records them redacted, as `capture proxy` does.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from pipeline.capture.config import ProxyConfig, UpstreamRoute, upstream_route
from pipeline.capture.proxy import (
    CaptureProxy,
    ProxyOptions,
    _Server,
    _UvicornLines,
    listening_socket,
    server_config,
    stderr_log,
)
from pipeline.capture.writer import CaptureWriter
from pipeline.errors import CommandCannotRun, CommandNotFound, NetworkError, UsageError
from pipeline.redact import shown_url

Log = Callable[[str], None]
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass(frozen=True, slots=True)
class Provider:
    """A provider the proxy routes under `/<name>`, and the variables that point a client at it.

    `variables` are set for the child to the proxy's `/<name>` URL; the first one the user had
    set names the upstream instead of `default_url` (see docs/capture.md for who reads which)."""

    name: str
    default_url: str
    variables: tuple[str, ...]


PROVIDERS: tuple[Provider, ...] = (
    # The OpenAI SDKs (Python, Node) and OpenAI's Codex CLI: the base URL ends in /v1.
    Provider("openai", "https://api.openai.com/v1", ("OPENAI_BASE_URL",)),
    # The Anthropic SDKs and Claude Code: the base URL has no /v1 (the client adds /v1/messages).
    Provider("anthropic", "https://api.anthropic.com", ("ANTHROPIC_BASE_URL",)),
    # The google-genai SDK (and Gemini CLI, built on its JS twin): the client adds v1beta/...
    Provider("gemini", "https://generativelanguage.googleapis.com", ("GOOGLE_GEMINI_BASE_URL",)),
    # No official SDK: LiteLLM reads DEEPSEEK_API_BASE; others take the URL in their config.
    Provider("deepseek", "https://api.deepseek.com", ("DEEPSEEK_API_BASE",)),
    # OpenAI-compatible: LiteLLM reads OPENROUTER_API_BASE.
    Provider("openrouter", "https://openrouter.ai/api/v1", ("OPENROUTER_API_BASE",)),
)


@dataclass
class RunResult:
    exit_code: int  # the child's, or 128 + signal when a signal ended it
    exchanges: int
    capture_files: list[Path] = field(default_factory=list)


def plan(
    environ: Mapping[str, str], proxy_url: str, extra: Sequence[UpstreamRoute] = ()
) -> tuple[ProxyConfig, dict[str, str]]:
    """The proxy's routes and the variables set for the child, for a proxy at `proxy_url`.

    Each provider is routed under `/<name>` to the URL the user's environment already gave
    it, else to its public API. Routes from a --config file come after and win where more
    specific (a host match, a longer prefix), as in `capture proxy`."""
    routes: list[UpstreamRoute] = []
    child: dict[str, str] = {}
    for p in PROVIDERS:
        own = next((environ[v] for v in p.variables if environ.get(v)), None)
        where = next((v for v in p.variables if environ.get(v)), "default")
        route = upstream_route(own or p.default_url, where)
        if route.url.rstrip("/") == f"{proxy_url}/{p.name}":
            raise UsageError(f"{where} already points at this proxy")
        routes.append(UpstreamRoute(url=route.url, prefix=f"/{p.name}"))
        for variable in p.variables:
            child[variable] = f"{proxy_url}/{p.name}"
    routes.extend(extra)
    return ProxyConfig(routes=routes), child


class _ProxyThread:
    """The capture proxy served by uvicorn in a thread (signals stay with the main thread,
    which forwards them to the child)."""

    def __init__(self, app: CaptureProxy, sock: object, log: Log, grace: float) -> None:
        self.server = _Server(server_config(app, grace_seconds=grace))
        self.filter = _UvicornLines(self.server, log)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [sock]}, daemon=True
        )

    def start(self, timeout: float = 15.0) -> None:
        logging.getLogger("uvicorn.error").addFilter(self.filter)
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise NetworkError("the recording proxy did not start")
            time.sleep(0.01)

    def stop(self, timeout: float) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=timeout)
        logging.getLogger("uvicorn.error").removeFilter(self.filter)


def exit_code_of(returncode: int) -> int:
    """A child's exit code as a shell reports it: 128 + N when signal N ended it."""
    return 128 - returncode if returncode < 0 else returncode


def _terminal_sent_it(sig: int) -> bool:
    """A Ctrl-C typed at the terminal reaches every process of the foreground group, the
    child included: forwarding it too would deliver it twice (many agent CLIs quit on a
    second Ctrl-C). True when this process is in the terminal's foreground group."""
    if sig != signal.SIGINT:
        return False
    try:
        return os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp()
    except OSError:
        return False


def run(
    command: Sequence[str],
    out_dir: Path,
    *,
    extra_routes: Sequence[UpstreamRoute] = (),
    environ: Mapping[str, str] | None = None,
    log: Log = stderr_log,
    grace_seconds: float = 5.0,
) -> RunResult:
    """Run `command` with its LLM traffic recorded to `out_dir`; returns its exit code and
    what was recorded. SIGINT/SIGTERM sent to this process are passed to the child."""
    if not command:
        raise UsageError("no command to run", hint="cacheaudit capture run -- python agent.py")
    env = dict(os.environ if environ is None else environ)
    if os.sep not in command[0] and shutil.which(command[0], path=env.get("PATH")) is None:
        # said before the proxy starts and the capture folder is made: the one line a shell says
        raise CommandNotFound(f"command not found: {command[0]}")
    sock = listening_socket("127.0.0.1", 0, hint="no free loopback port")
    port = sock.getsockname()[1]
    proxy_url = f"http://127.0.0.1:{port}"
    try:
        config, child_vars = plan(env, proxy_url, extra_routes)
    except BaseException:
        sock.close()
        raise
    writer = CaptureWriter(out_dir)
    app = CaptureProxy(config, writer, ProxyOptions(summary_every=0), log)
    server = _ProxyThread(app, sock, log, grace_seconds)
    for route in config.routes:
        entry = f"{proxy_url}{route.prefix.rstrip('/')}/..."
        log(f"capture: {entry} -> {shown_url(route.url)}")
    log("capture: set for the command: " + " ".join(f"{k}={v}" for k, v in child_vars.items()))
    try:
        server.start()
        code = _run_child(command, {**env, **child_vars}, log)
    finally:
        server.stop(timeout=grace_seconds + 10)
        writer.close()
        sock.close()
    return RunResult(code, app.stats.recorded, list(writer.paths))


def _run_child(command: Sequence[str], env: dict[str, str], log: Log) -> int:
    try:
        child = subprocess.Popen(list(command), env=env)
    except FileNotFoundError as exc:
        if os.sep in command[0] and Path(command[0]).exists():  # a script's #! names nothing
            raise CommandCannotRun(
                f"cannot run {command[0]}: the interpreter its #! line names was not found"
            ) from exc
        raise CommandNotFound(f"command not found: {command[0]}") from exc
    except OSError as exc:  # no permission, a folder, not a program (exec format error)
        reason = (exc.strerror or str(exc)).lower()
        raise CommandCannotRun(f"cannot run {command[0]}: {reason}") from exc

    def forward(sig: int, frame: FrameType | None) -> None:
        if child.poll() is None and not _terminal_sent_it(sig):
            child.send_signal(sig)

    on_main = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, forward) for s in FORWARDED_SIGNALS} if on_main else {}
    try:
        while True:
            # In steps, not one blocking wait: a signal the kernel hands to another thread (the
            # proxy's) does not interrupt this thread's wait, and Python runs `forward` only
            # when this thread next runs; a SIGINT sent by `kill` then reached the child only
            # after it had finished on its own.
            try:
                returncode = child.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                continue
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    code = exit_code_of(returncode)
    if returncode < 0:
        log(f"capture: {command[0]} was ended by signal {-returncode} (exit {code})")
    return code


def ingest_capture(files: Sequence[Path], warehouse: Path, log: Log = stderr_log) -> int:
    """Ingest what one run recorded; returns the accepted count."""
    from pipeline.ingest import ingest
    from pipeline.reports.numbers import count
    from pipeline.warehouse import Warehouse

    result = ingest(list(files), Warehouse(warehouse), workers=1)
    log(
        f"capture: ingested {count(result.total('records'), 'record', grouping=False)}"
        f" = {result.total('accepted')} accepted + {result.total('rejected')} rejected"
        f" + {result.total('skipped')} skipped"
        f" -> {warehouse}"
    )
    from pipeline import warehouse_db

    log(warehouse_db.refresh(Warehouse(warehouse)))
    return int(result.total("accepted"))


def print_reports(warehouse: Path) -> None:
    """The warehouse's headline numbers and its top findings with their money and fix (summary
    prints both) on stdout, by the CLI's own command in a child process: a command module never
    imports the CLI."""
    subprocess.run(
        [sys.executable, "-m", "pipeline", "summary", "--warehouse", str(warehouse)], check=False
    )
