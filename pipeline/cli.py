"""The `cacheaudit` command line: parse arguments, call one library function, map errors to
exit codes (once, in `main`). Data goes to stdout, diagnostics to stderr."""

from __future__ import annotations

import errno
import importlib
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from pipeline import __version__
from pipeline.commands.helptext import tidy
from pipeline.commands.options import (
    DEFAULT_WAREHOUSE,
    PricesOpt,
    RulesOpt,
    WarehouseOpt,
    err,
    existing_warehouse,
    sql_options,
)
from pipeline.engines import engine_from, master_from
from pipeline.engines.options import EngineOpt, SparkMasterOpt
from pipeline.errors import ExitCode, PipelineError
from pipeline.stdout import to_stdout

_said: list[bool] = []  # whether "interrupted" was printed


def _interrupted() -> None:
    if not _said:
        _said.append(True)
        err("interrupted")


def _is_query_interrupt(exc: BaseException | None) -> bool:
    """Whether `exc` is what DuckDB raises when a Ctrl-C stops a query: it takes the
    KeyboardInterrupt and raises RuntimeError("Query interrupted") instead, or
    InterruptException when `ctrl_c.interruptible`'s watcher stopped it; click passes either on
    like any error. Told apart by the exact message: a Ctrl-C is never "a bug"."""
    import duckdb  # imported with the CLI already (pipeline/__main__.py)

    return (
        isinstance(exc, duckdb.InterruptException)
        or (type(exc) is RuntimeError and str(exc) == "Query interrupted")
        # a Ctrl-C while DuckDB called back into Python (the row count of a registered Arrow
        # table, an import): DuckDB reports the callback's KeyboardInterrupt as its own error
        or (isinstance(exc, duckdb.Error) and "KeyboardInterrupt" in str(exc))
    )


class _Group(TyperGroup):
    """Every command writes its data to stdout through `to_stdout`, so `cacheaudit ... | head`
    exits 0 whichever command it is (click exits 1 when the reader stops early)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        tidy(self)  # how every command's --help reads, set once (pipeline/commands/helptext.py)

    def invoke(self, ctx: Any) -> Any:
        try:
            with to_stdout():
                return super().invoke(ctx)
        except KeyboardInterrupt:
            # Typer would exit 130 without a word. One line; nothing half-written stays visible
            # (an ingest's parts land with its manifest, and the next one removes orphans).
            _interrupted()
            raise typer.Exit(130) from None
        except EOFError as exc:
            # Typer takes an EOFError for Ctrl-D at a prompt ("Aborted.", exit 1); no command
            # prompts, so one escaping is a bug and must say so.
            raise RuntimeError(f"unexpected end of input: {exc}") from exc


app = typer.Typer(
    name="cacheaudit",
    cls=_Group,
    help=(
        "Audit prompt caching in recorded LLM API traffic: how much input hit the cache, what it"
        " cost at the prices in force that day, what caching saved, and which change broke the"
        " cached prefix.\n\nTypical run (a capture from `cacheaudit capture proxy`, or `cacheaudit"
        " demo`):\n\n$ cacheaudit ingest capture/\n$ cacheaudit summary --by day\n"
        '$ cacheaudit sql "select * from cache_breaks limit 5"'
    ),
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,  # locals can hold API keys
    add_completion=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"cacheaudit {__version__}")
        raise typer.Exit


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    pass


@app.command()
def ingest(
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="Capture JSONL (.jsonl/.gz/.zst), HAR, OTLP/JSON, VCR cassette or mitmproxy"
            " flow files, or directories."
        ),
    ],
    warehouse: WarehouseOpt = DEFAULT_WAREHOUSE,
    force: Annotated[
        bool, typer.Option("--force", help="Re-ingest files already in the manifest.")
    ] = False,
    no_content: Annotated[
        bool, typer.Option("--no-content", help="Keep segment hashes and lengths, not prompt text.")
    ] = False,
    workers: Annotated[
        int | None, typer.Option(help="Worker processes (default: all cores).")
    ] = None,
    providers: Annotated[
        Path | None,
        typer.Option(
            "--providers",
            envvar="CACHEAUDIT_PROVIDERS",
            help="TOML map of self-hosted gateway hosts to provider and dialect (a host"
            " pattern with a port matches host:port; without one, any port).",
        ),
    ] = None,
    engine: EngineOpt = None,
    spark_master: SparkMasterOpt = None,
    max_record_bytes: Annotated[
        int,
        typer.Option(
            "--max-record-bytes",
            help="Longest line (one capture record or OTLP export) read; a longer one is one"
            " reject, read past without being held in memory (a decompression bomb). Local"
            " engine.",
        ),
    ] = 256 * 1024 * 1024,
) -> None:
    """Normalise captured exchanges into the warehouse.

    Format is detected from content: capture JSONL, HAR, OTLP/JSON, VCR cassettes (YAML or
    JSON), mitmproxy flow files (mitmdump -w; read with mitmproxy's reader). Re-ingesting an
    unchanged file is a no-op, and an exchange already in the warehouse (same request id: a
    compressed or renamed copy, an overlapping export) is skipped. Unreadable records, and
    files of the batch that are not traffic, go to the `rejects` table with the reason;
    everything else still lands. A directory is walked for capture-like names (.jsonl
    .ndjson .json .har .yaml .yml .gz .zst), passing over hidden folders (.venv, .git) and
    warehouses. Prints records read = accepted + rejected +
    skipped (skipped: not LLM API calls, or duplicates).
    """
    from pipeline.errors import UsageError
    from pipeline.ingest import ingest as run_ingest
    from pipeline.input_files import expand
    from pipeline.reports.numbers import count
    from pipeline.warehouse import Warehouse

    if workers is not None and workers < 1:
        raise UsageError(f"--workers must be at least 1, not {workers}")
    if max_record_bytes < 1:
        raise UsageError(f"--max-record-bytes must be at least 1, not {max_record_bytes}")
    files = expand(paths, say=err)
    wh = Warehouse(warehouse)
    progress = _progress_bar() if sys.stderr.isatty() else None
    try:
        if engine_from(engine) == "spark":
            from pipeline.engines.spark_ingest import ingest_on

            result = ingest_on(
                master_from(spark_master),
                files,
                wh,
                force=force,
                keep_content=not no_content,
                providers_file=providers,
                progress=progress.update if progress else None,
                max_record_bytes=max_record_bytes,
            )
        else:
            result = run_ingest(
                files,
                wh,
                force=force,
                keep_content=not no_content,
                workers=workers,
                providers_file=providers,
                progress=progress.update if progress else None,
                max_record_bytes=max_record_bytes,
            )
    finally:
        if progress:
            progress.close()
    for f in result.files:
        if f.status == "unchanged":
            err(f"{f.source}: already ingested (unchanged); --force to redo")
        else:
            err(
                f"{f.source} [{f.format}]: {count(f.records, 'record', grouping=False)}"
                f" = {f.accepted} accepted"
                f" + {f.rejected} rejected + {f.skipped} skipped"
            )
    err(
        f"total: {count(result.total('records'), 'record', grouping=False)}"
        f" = {result.total('accepted')} accepted"
        f" + {result.total('rejected')} rejected + {result.total('skipped')} skipped"
        f" -> {warehouse}"
    )
    from pipeline import warehouse_db

    err(warehouse_db.refresh(wh))


class _progress_bar:
    """A rich progress bar on stderr, by bytes processed."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

        self._progress = Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            DownloadColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self._progress.start()
        self._task = self._progress.add_task("ingest", total=None)

    def update(self, done: int, total: int) -> None:
        self._progress.update(self._task, completed=done, total=total)

    def close(self) -> None:
        self._progress.stop()


@app.command()
def sql(
    query: Annotated[str, typer.Argument(help="SQL over the views (see `cacheaudit views`).")],
    warehouse: WarehouseOpt = DEFAULT_WAREHOUSE,
    fmt: Annotated[
        str, typer.Option("--format", "-f", help="table, csv, json or parquet (needs --out).")
    ] = "table",
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Write here instead of stdout.")
    ] = None,
    prices: PricesOpt = None,
    rules: RulesOpt = None,
) -> None:
    """Run SQL with DuckDB over the warehouse views.

    Example, the token-weighted hit ratio per provider: over the requests where both input and
    cache read are known (unknown is NULL, never 0), with the requests it leaves out counted:

    $ cacheaudit sql "select provider,
        sum(cache_read_tokens) filter (where known)
          / sum(input_tokens) filter (where known) as hit_ratio,
        count(*) filter (where not known) as requests_unknown
      from (select *, input_tokens is not null
                      and cache_read_tokens is not null as known
            from requests)
      group by 1 order by 1" --format csv

    A mistake in the statement (a misspelt column, a date such as '2026-13-01') prints
    DuckDB's message and exits 1.
    """
    from pipeline import build_first, output, sql_run
    from pipeline import sql as sqlmod

    output.check(fmt, out)
    wh, options = existing_warehouse(warehouse), sql_options(prices, rules)
    # a statement on the stored views' inputs only, or on the catalog, builds nothing
    if read := build_first.views_read_by(query):
        build_first.store_stale_views(wh, read, options, say=err)
    _con, rel = sqlmod.run_user_sql(wh, query, options=options)
    with sql_run.statement_errors():  # DuckDB runs the statement as the rows are read
        rows = output.emit(rel, fmt, out)
    if out is not None:
        from pipeline.reports.numbers import count

        err(f"{count(rows, 'row')} -> {out}")


@app.command()
def views(
    warehouse: WarehouseOpt = DEFAULT_WAREHOUSE, prices: PricesOpt = None, rules: RulesOpt = None
) -> None:
    """List the views you can query, with their columns, types and units (from schemas/)."""
    from pipeline import sql as sqlmod

    existing_warehouse(warehouse)
    sql_options(prices, rules)  # accepted as by the other reading commands, and checked
    for name, cols in sqlmod.documented_views().items():
        typer.echo(name)
        for col, typ, unit in cols:
            typer.echo(f"  {col}  {typ}" + (f"  ({unit})" if unit else ""))


@app.command()
def demo(
    out: Annotated[Path, typer.Option(help="Where to write the demo capture.")] = Path(
        "demo/capture.jsonl"
    ),
    seed: Annotated[int, typer.Option(help="Random seed: same seed, same bytes.")] = 7,
    sessions: Annotated[int, typer.Option(help="Number of agent sessions.", min=1)] = 24,
) -> None:
    """Write a deterministic, realistic demo capture (agents, sessions, planted cache breakers)."""
    from pipeline.demo import write_demo

    n = write_demo(out, seed=seed, sessions=sessions)
    err(f"wrote {n} exchanges -> {out}")


for _module in importlib.import_module("pipeline.commands").COMMAND_MODULES:
    importlib.import_module(_module).register(app)


_DISK_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS})


def main() -> None:
    """Entry point: one place maps errors to exit codes.

    Typer/click handle their own usage errors (exit 2) in standalone mode; our errors propagate
    out of it and are mapped here.
    """
    try:
        app()
    except SystemExit as exc:
        if exc.code == 130:  # typer's answer to a Ctrl-C outside a command (while parsing)
            _interrupted()
        raise
    except PipelineError as exc:
        if _is_query_interrupt(exc.__cause__):  # a step that tells its DuckDB errors its way
            _interrupted()
            sys.exit(130)
        err(f"error: {exc.message}")
        if exc.hint:
            err(f"hint: {exc.hint}")
        sys.exit(int(exc.exit_code))
    except KeyboardInterrupt:
        _interrupted()
        sys.exit(130)
    except Exception as exc:
        if _is_query_interrupt(exc):
            _interrupted()
            sys.exit(130)
        if os.environ.get("CACHEAUDIT_DEBUG"):
            raise
        if isinstance(exc, OSError) and exc.errno in _DISK_ERRORS:
            # a full or failing disk is the machine's state, not a bug, whichever file it hit
            where = f" writing {exc.filename}" if exc.filename else ""
            err(f"error: {exc.strerror or exc}{where}")
            err("hint: free some space (or check the disk) and run the command again")
            sys.exit(int(ExitCode.FAILURE))
        if isinstance(exc, OSError) and exc.filename:
            # A path the user gave (or a full disk), not a bug: say which path and why.
            err(f"error: cannot use {exc.filename}: {exc.strerror or exc}")
            err("hint: check that the path exists where it should and that you may write there")
            sys.exit(int(ExitCode.USAGE))
        err(f"internal error: {type(exc).__name__}: {exc}")
        err("hint: this is a bug; rerun with CACHEAUDIT_DEBUG=1 for the traceback")
        sys.exit(int(ExitCode.BUG))


if __name__ == "__main__":  # `python -m pipeline.cli`
    main()
