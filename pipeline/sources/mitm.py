"""mitmproxy flow files (`mitmdump -w FILE`), read with mitmproxy's own reader.

mitmproxy is not a dependency of cacheaudit (on Python 3.11 the only mitmproxy, 11.x, pins an
h11 that breaks httpx), so the reader is found, in order: mitmproxy importable here; the Python
named by CACHEAUDIT_MITMPROXY_PYTHON; the Python of a `mitmdump` on PATH (its script's `#!`
line, as pip writes it). Another environment's Python runs `pipeline/capture/mitm_export.py`,
which streams one record per flow through a pipe, so memory stays one flow. Without any of them
the file is refused in one line that says how to install mitmproxy or export a HAR.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import orjson

from pipeline.capture_format import RecordError, parse_record
from pipeline.errors import InputError
from pipeline.records import Exchange, Reject

PYTHON_ENV = "CACHEAUDIT_MITMPROXY_PYTHON"
EXPORT_SCRIPT = Path(__file__).resolve().parents[1] / "capture" / "mitm_export.py"


def _mitmdump_python() -> str | None:
    """The interpreter of the `mitmdump` on PATH, from its `#!` line."""
    binary = shutil.which("mitmdump")
    if binary is None:
        return None
    try:
        with open(binary, "rb") as fh:
            first = fh.readline(4096)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    interpreter = first[2:].strip().split(b" ")[0].decode("utf-8", "replace")
    return interpreter if Path(interpreter).is_file() else None


def reader() -> str | None:
    """How flow files are read here: "" (mitmproxy importable in this process), the path of a
    Python that has it, or None when there is none."""
    if importlib.util.find_spec("mitmproxy") is not None:
        return ""
    named = os.environ.get(PYTHON_ENV)
    if named:
        if not Path(named).is_file():
            raise InputError(
                f"{PYTHON_ENV}={named} does not exist",
                hint="name the Python of an environment that has mitmproxy, e.g."
                " ~/.mitm/bin/python",
            )
        return named
    return _mitmdump_python()


def not_readable(path: Path) -> InputError:
    """The one-line error for a flow file where no mitmproxy is found."""
    return InputError(
        f"{path} is a mitmproxy flow file (mitmdump -w), and mitmproxy, whose reader cacheaudit"
        " uses for it, is not installed here",
        hint=f"pip install mitmproxy (or set {PYTHON_ENV} to a Python that has it), or export"
        f" a HAR: mitmdump -nr {path} --set hardump={path}.har and ingest the .har",
    )


def _lines_from(python: str, path: Path, errors: IO[bytes]) -> Iterator[bytes]:
    """The export script's lines, run under `python`; OSError when it fails (its last stderr
    line says why: no mitmproxy there, a file it cannot open)."""
    proc = subprocess.Popen(
        [python, str(EXPORT_SCRIPT), str(path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=errors,
    )
    assert proc.stdout is not None
    try:
        yield from proc.stdout
    finally:
        proc.stdout.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.returncode:
        errors.seek(0)
        tail = errors.read()[-4000:].decode("utf-8", "replace").strip().splitlines()
        reason = tail[-1] if tail else f"exit code {proc.returncode}"
        raise OSError(f"mitmproxy's reader ({python}) failed: {reason[:300]}")


def iter_mitm(path: Path) -> Iterator[Exchange | Reject]:
    python = reader()
    if python is None:
        raise not_readable(path)
    source = str(path)
    index = 0  # the position after the last flow read: where a failure is reported
    with tempfile.TemporaryFile() as errors:
        if python == "":
            from pipeline.capture.mitm_export import flow_lines

            lines: Iterator[bytes] = flow_lines(path)
        else:
            lines = _lines_from(python, path, errors)
        try:
            for line in lines:
                obj = orjson.loads(line)
                index = int(obj["index"])
                if "error" in obj:
                    yield Reject(source, index, str(obj["error"]), "")
                else:
                    yield _exchange(obj["record"], source, index)
                index += 1
        except OSError as exc:
            yield Reject(source, index, str(exc), "")


def _exchange(record: object, source: str, index: int) -> Exchange | Reject:
    try:
        return parse_record(record, source, index)
    except (RecordError, TypeError, ValueError) as exc:
        return Reject(source, index, f"mitmproxy flow not readable: {exc}", "")
