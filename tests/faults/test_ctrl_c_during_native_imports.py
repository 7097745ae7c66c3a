"""A Ctrl-C while a native module initialises killed the process: orjson by a segfault, DuckDB
by an abort ("Critical nanobind error"), instead of the one line and exit 130 of every other
moment. The CLI's modules are imported with Ctrl-C held back; these tests check the mechanism
deterministically, where a timed Ctrl-C hits the import only now and then."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

# Records, for each native module, whether SIGINT was held back while it was imported.
PROBE = textwrap.dedent(
    """
    import signal, sys
    held = {}

    class Probe:
        def find_spec(self, name, path=None, target=None):
            if name in ("duckdb", "orjson", "pipeline.cli") and name not in held:
                held[name] = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])
            return None

    sys.meta_path.insert(0, Probe())
    sys.argv = ["cacheaudit", "--help"]
    from pipeline.__main__ import run
    try:
        run()
    except SystemExit:
        pass
    print(sorted(held.items()))
    print(signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []))
    """
)


def test_native_modules_are_imported_with_ctrl_c_held_back_and_it_is_released_after() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "COLUMNS": "80"},
    )
    assert done.returncode == 0, done.stderr
    *_, held, still_blocked = done.stdout.strip().splitlines()
    assert held == "[('duckdb', True), ('orjson', True), ('pipeline.cli', True)]"
    assert still_blocked == "False"


def test_a_ctrl_c_during_the_imports_is_one_line_and_exit_130() -> None:
    # The signal arrives while the imports hold it back: it must be raised after them.
    code = textwrap.dedent(
        """
        import os, signal, sys
        # as in a terminal: a job started in the background (`make test &`) inherits SIGINT
        # ignored, and an ignored signal is dropped, not held
        signal.signal(signal.SIGINT, signal.default_int_handler)
        real = signal.pthread_sigmask

        def mask_then_interrupt(how, sigs):
            old = real(how, sigs)
            if how == signal.SIG_BLOCK and signal.SIGINT in sigs:
                os.kill(os.getpid(), signal.SIGINT)  # pending until released
            return old

        signal.pthread_sigmask = mask_then_interrupt
        sys.argv = ["cacheaudit", "--help"]
        from pipeline.__main__ import run
        run()
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stderr) == (130, "interrupted\n")
