"""`python -m pipeline` runs the CLI (what the `cacheaudit` script does)."""

import sys


def run() -> None:
    """The CLI, and a Ctrl-C while its modules are still being imported (the first few tenths
    of a second) as one line and exit 130, like one at any later moment."""
    try:
        from pipeline.cli import main
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    main()


if __name__ == "__main__":
    run()
