"""Durable, rotating capture JSONL files.

Guarantees, and why they hold:
- Each record is appended whole with ONE `os.write` on an `O_APPEND` descriptor, under a lock:
  concurrent exchanges (threads, tasks) never interleave, and there is no user-space buffer, so a
  finished exchange is in the kernel the moment `write` returns. A killed process loses only the
  exchanges still in flight.
- The OS can still lose unsynced pages on power loss: `fsync="interval"` (default) syncs at most
  `fsync_interval` seconds after a write, from a background thread so writers never wait on the
  disk; `"always"` syncs every record before `write` returns; `"never"` leaves it to the OS.
- A torn last line (power loss mid-write) has no newline, so ingest rejects exactly that line
  ("truncated last line"). When a file is reopened, a missing final newline is added first so the
  next record never glues onto the fragment.
- One file per UTC hour, and a new file when one passes `rotate_bytes`. Names carry the pid, so
  two processes writing one directory never share a file:
  `capture-20260102T13Z-p4242.jsonl`, then `capture-20260102T13Z-p4242-2.jsonl`, ...
- Recording never breaks the traffic being recorded: a failed write (full disk, EIO, a
  directory that cannot be made again) is swallowed, counted in `failed`, and reported on
  stderr at most once per `warn_every` seconds, and those not yet reported when the writer
  closes; `write` returns False for it. A file removed while open (its directory deleted) is
  noticed at the next write, which goes to a new file (the directory made again). A write that
  failed part-way leaves a fragment without its newline, so the next record written to that
  file starts with a newline: the fragment is one rejected line and the good record after it
  is whole.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pipeline.body_secrets import mask_secrets
from pipeline.capture_format import dumps_record
from pipeline.errors import InputError

FsyncPolicy = Literal["always", "interval", "never"]
FSYNC_POLICIES: tuple[str, ...] = ("always", "interval", "never")
DEFAULT_ROTATE_BYTES = 256 * 1024 * 1024


class CaptureWriter:
    """Appends capture records to `<out_dir>/<prefix>-<hour>Z-p<pid>[-n].jsonl`."""

    def __init__(
        self,
        out_dir: Path,
        *,
        prefix: str = "capture",
        rotate_bytes: int = DEFAULT_ROTATE_BYTES,
        fsync: FsyncPolicy = "interval",
        fsync_interval: float = 1.0,
        clock: Callable[[], datetime] | None = None,
        warn: Callable[[str], None] | None = None,
        warn_every: float = 10.0,
    ) -> None:
        if fsync not in FSYNC_POLICIES:
            raise InputError(f"unknown fsync policy {fsync!r}", hint="always, interval or never")
        self.out_dir = Path(out_dir)
        try:
            self.out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"cannot create capture directory {self.out_dir}: {exc}") from exc
        self.prefix = prefix
        self.rotate_bytes = rotate_bytes
        self.fsync = fsync
        self.fsync_interval = fsync_interval
        self._clock = clock or (lambda: datetime.now(UTC))
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._path: Path | None = None
        self._hour = ""
        self._seq = 0
        self._size = 0
        self._dirty = False
        self.records = 0
        self.bytes = 0
        self.failed = 0  # records that could not be written (disk full, I/O error, ...)
        self._torn = False  # the last write stopped part-way: the file ends mid-line
        self._warn = warn or _stderr
        self._warn_every = warn_every
        self._warned_at: float | None = None
        self._failed_since_warn = 0
        self.paths: list[Path] = []
        self._stop = threading.Event()
        self._syncer: threading.Thread | None = None
        if fsync == "interval":
            self._syncer = threading.Thread(
                target=self._sync_loop, name="capture-fsync", daemon=True
            )
            self._syncer.start()

    @property
    def current_path(self) -> Path | None:
        return self._path

    def write_record(self, record: dict[str, Any]) -> bool:
        return self.write(dumps_record(record))

    def write(self, line: bytes) -> bool:
        """Append one complete JSONL line (it must end with a newline). False when it could not
        be written (counted in `failed` and said on stderr): a tool for which the record is the
        whole point (the OTLP receiver) tells its client so."""
        if not line.endswith(b"\n") or b"\n" in line[:-1]:
            raise ValueError("a capture record is exactly one line ending in a newline")
        # The last gate before the disk, for every capture tool: a key shape or a credential field
        # anywhere in the record (a body, an error text, a span attribute) is masked here.
        line = mask_secrets(line)
        with self._lock:
            try:
                self._write_locked(line)
            except OSError as exc:
                self._failed(exc)
                return False
        return True

    def _write_locked(self, line: bytes) -> None:
        fd = self._fd_for(len(line))
        if self._torn:
            line = b"\n" + line  # the fragment a failed write left becomes its own line
        try:
            _write_all(fd, line)
        except _PartialWrite as exc:
            self._size += exc.written
            self._torn = True
            raise
        self._size += len(line)
        self._torn = False
        self.records += 1
        self.bytes += len(line)
        if self.fsync == "always":
            os.fsync(fd)
        else:
            self._dirty = True

    def _failed(self, exc: OSError) -> None:
        self.failed += 1
        self._failed_since_warn += 1
        now = time.monotonic()
        if self._warned_at is not None and now - self._warned_at < self._warn_every:
            return
        where = self._path or self.out_dir
        self._warn(
            f"capture: could not record {self._failed_since_warn} exchange(s) to {where}: "
            f"{exc.strerror or exc} ({self.failed} unrecorded in total); traffic is unaffected"
        )
        self._warned_at, self._failed_since_warn = now, 0

    def flush(self) -> None:
        """Force what was written so far to disk."""
        with self._lock:
            if self._fd is not None and self._dirty:
                with contextlib.suppress(OSError):  # reported by the writes that failed
                    os.fsync(self._fd)
                self._dirty = False

    def close(self) -> None:
        self._stop.set()
        if self._syncer is not None and self._syncer is not threading.current_thread():
            self._syncer.join(timeout=5)
        with self._lock:
            self._close_fd()
            if self._failed_since_warn:  # failures after the last warning: said before the end
                self._warn(
                    f"capture: could not record {self._failed_since_warn} more exchange(s) to"
                    f" {self._path or self.out_dir} ({self.failed} unrecorded in total)"
                )
                self._failed_since_warn = 0

    def __enter__(self) -> CaptureWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -------------------------------------------------------------------------

    def _fd_for(self, incoming: int) -> int:
        hour = self._clock().astimezone(UTC).strftime("%Y%m%dT%H")
        if self._fd is not None and os.fstat(self._fd).st_nlink == 0:
            # the file was removed (its directory deleted, a cleanup job): writing on would
            # land in an unlinked file nobody can read. A new file, in the directory made again.
            self._warn(f"capture: {self._path} was removed; recording to a new file")
            self._close_fd()
            self.out_dir.mkdir(parents=True, exist_ok=True)
            self._hour, self._seq = hour, (self._seq + 1 if hour == self._hour else 1)
        elif self._fd is not None and hour == self._hour:
            if self._size == 0 or self._size + incoming <= self.rotate_bytes:
                return self._fd
            self._seq += 1
        elif hour != self._hour:
            self._hour, self._seq = hour, 1
        self._close_fd()
        # A closed writer reopens on demand: a late exchange (cancelled at shutdown) still lands.
        suffix = "" if self._seq == 1 else f"-{self._seq}"
        path = self.out_dir / f"{self.prefix}-{hour}Z-p{os.getpid()}{suffix}.jsonl"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        size = os.fstat(fd).st_size
        self._fd, self._path, self._size = fd, path, size
        self.paths.append(path)
        # A torn line left by a crash (or a failed write) is isolated by the next record's newline.
        self._torn = bool(size) and _last_byte(path) != b"\n"
        return fd

    def _close_fd(self) -> None:
        if self._fd is None:
            return
        if self._dirty and self.fsync != "never":
            with contextlib.suppress(OSError):  # a failing disk must not stop a shutdown
                os.fsync(self._fd)
        os.close(self._fd)
        self._fd, self._dirty = None, False

    def _sync_loop(self) -> None:
        while not self._stop.wait(self.fsync_interval):
            with self._lock:
                if self._fd is None or not self._dirty:
                    continue
                fd = os.dup(self._fd)  # survives a rotation that closes the original
                self._dirty = False
            try:
                os.fsync(fd)
            except OSError:
                pass  # the disk is failing: writes report it; this thread must keep running
            finally:
                os.close(fd)


_os_write = os.write  # module-level so a test can inject a full disk


def _write_all(fd: int, data: bytes) -> int:
    """Write everything; an error after some bytes reached the file is a `_PartialWrite`."""
    view = memoryview(data)
    done = 0
    while view:
        try:
            written = _os_write(fd, view)
        except OSError as exc:
            if done:
                raise _PartialWrite(exc, done) from exc
            raise
        view = view[written:]
        done += written
    return done


class _PartialWrite(OSError):
    """A write that failed after `written` bytes had reached the file."""

    def __init__(self, exc: OSError, written: int) -> None:
        super().__init__(exc.errno, exc.strerror)
        self.written = written


def _stderr(message: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        print(message, file=sys.stderr, flush=True)


def _last_byte(path: Path) -> bytes:
    with path.open("rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1)


_shared: dict[tuple[Path, str], CaptureWriter] = {}
_shared_lock = threading.Lock()


def shared_writer(out_dir: Path, *, prefix: str = "capture") -> CaptureWriter:
    """One writer per directory per process, so every client recording there shares its lock
    and its file; closed (synced) at interpreter exit."""
    key = (Path(out_dir).resolve(), prefix)
    with _shared_lock:
        writer = _shared.get(key)
        if writer is None:
            writer = _shared[key] = CaptureWriter(key[0], prefix=prefix)
        return writer


@atexit.register
def _close_shared() -> None:
    for writer in list(_shared.values()):
        writer.close()
