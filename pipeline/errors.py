"""One error hierarchy for the whole pipeline, and the exit code each maps to.

The CLI catches `PipelineError` once, prints `error: <message>` and the hint on stderr, and exits
with `exit_code`. Anything else escaping is a bug (exit 70), printed without local variables
because locals can hold API keys.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILURE = 1  # a query or command failed on valid input (e.g. a SQL error)
    USAGE = 2  # bad arguments or options
    INPUT = 3  # an input file is missing, unreadable or of an unknown format
    DATA = 4  # a table or data file is invalid (e.g. `prices check` found problems)
    NOT_FOUND = 5  # the thing asked for does not exist (week, conversation, view)
    NETWORK = 6  # an upstream or listening socket failed
    LIMIT = 7  # `check`: the cache breaks exceed a limit the user set (a CI gate failed)
    BUG = 70
    # `capture run`: its COMMAND could not be started; the codes a shell gives for the same
    CANNOT_RUN = 126  # found, but not executable (a folder, no permission, not a program)
    COMMAND_NOT_FOUND = 127


class PipelineError(Exception):
    """Base class: a message for the user, an optional hint, and an exit code."""

    exit_code: ExitCode = ExitCode.FAILURE

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class UsageError(PipelineError):
    exit_code = ExitCode.USAGE


class InputError(PipelineError):
    exit_code = ExitCode.INPUT


class DataError(PipelineError):
    exit_code = ExitCode.DATA


class QueryError(PipelineError):
    exit_code = ExitCode.FAILURE


class NotFoundError(PipelineError):
    exit_code = ExitCode.NOT_FOUND


class NetworkError(PipelineError):
    exit_code = ExitCode.NETWORK


class WarehouseError(PipelineError):
    exit_code = ExitCode.DATA


class WarehouseBusy(WarehouseError):
    """Another process holds the warehouse lock, and the caller asked not to wait for it."""


class CommandNotFound(PipelineError):
    """`capture run`: no such command (on PATH, or at the path given)."""

    exit_code = ExitCode.COMMAND_NOT_FOUND


class CommandCannotRun(PipelineError):
    """`capture run`: the command exists but cannot be started."""

    exit_code = ExitCode.CANNOT_RUN


class LimitExceeded(PipelineError):
    """`cacheaudit check`: the findings broke a limit (not a malfunction: the gate did its job)."""

    exit_code = ExitCode.LIMIT
