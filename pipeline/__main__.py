"""`python -m pipeline` runs the CLI (what the `cacheaudit` script does)."""

import signal
import sys
from collections.abc import Callable


def run() -> None:
    """The CLI, and a Ctrl-C while its modules are still being imported (the first few tenths
    of a second) as one line and exit 130, like one at any later moment. Once the command has
    ended, a Ctrl-C is ignored: it would only turn the exit of a finished command into a
    traceback from the interpreter's shutdown."""
    try:
        try:
            _start_workers_early()
            main = _cli_with_ctrl_c_held()
        except KeyboardInterrupt:
            sys.stderr.write("interrupted\n")
            sys.exit(130)
        main()
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        # CPython 3.11 marks a KeyboardInterrupt raised inside code run from a string (the
        # methods dataclasses generate while a module imports) as unhandled even when it was
        # caught, and then exits by SIGINT instead of with 130; running code from a string
        # clears that mark.
        exec("None")  # noqa: S102 - a constant, for the reason above


def _start_workers_early() -> None:
    """An ingest that will use worker processes starts their fork server now, so that its
    imports run beside the CLI's below instead of after them (pipeline/fork_server.py). Its
    imports, like the CLI's, hold Ctrl-C back (see below); one meanwhile exits with 130."""
    if sys.argv[1:2] != ["ingest"] or not hasattr(signal, "pthread_sigmask"):
        return  # no fork server without signal masks (Windows) either
    from pipeline import ctrl_c

    with ctrl_c.held():
        from pipeline import fork_server
    fork_server.start_for_command_line(sys.argv[1:])


def _cli_with_ctrl_c_held() -> Callable[[], None]:
    """Import the CLI with Ctrl-C held back. A KeyboardInterrupt raised while a native module
    initialises (it runs Python code then) kills the process instead of reaching our handler:
    orjson by a segfault, DuckDB by an abort ("Critical nanobind error"). Held back, a Ctrl-C
    meanwhile is raised as soon as the imports are done, as one at any other moment. Done while
    this is the only thread (a thread started before would still take the signal). DuckDB and
    orjson are imported here too, though the CLI imports them later, when threads may run:
    nearly every command needs them, and `--help` pays their ~0.06 s."""
    if not hasattr(signal, "pthread_sigmask"):  # Windows: no signal masks
        from pipeline.cli import main

        return main
    from pipeline import ctrl_c

    with ctrl_c.held():
        import duckdb  # noqa: F401
        import orjson  # noqa: F401

        from pipeline.cli import main
    return main


if __name__ == "__main__":
    run()
