"""`python -m pipeline` runs the CLI (what the `cacheaudit` script does)."""

import signal
import sys


def run() -> None:
    """The CLI, and a Ctrl-C while its modules are still being imported (the first few tenths
    of a second) as one line and exit 130, like one at any later moment. Once the command has
    ended, a Ctrl-C is ignored: it would only turn the exit of a finished command into a
    traceback from the interpreter's shutdown."""
    try:
        try:
            from pipeline.cli import main
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


if __name__ == "__main__":
    run()
