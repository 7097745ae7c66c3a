"""`cacheaudit forget`: take the rows of ingested files out of the warehouse."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pipeline.commands.options import (
    DEFAULT_WAREHOUSE,
    RulesOpt,
    WarehouseOpt,
    err,
    existing_warehouse,
    say_built,
    sql_options,
)


def forget(
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="Files as they were ingested (the path, relative or absolute; the file need"
            " not exist any more), or folders: every file ingested from inside one.",
            show_default=False,
        ),
    ],
    warehouse: WarehouseOpt = DEFAULT_WAREHOUSE,
    rules: RulesOpt = None,
) -> None:
    """Remove every row ingested from these files: requests, segments, prompt text and
    rejects, in every version of each file ingested.

    For a capture that held a secret, a file ingested by mistake, or a capture rewritten
    without some of its records (forget it, then ingest it again). The stored views are then
    built again over the days those files were in, so no derived file keeps their rows; a
    report rendered before still shows them: render it again.

    The rows go at once: a command reading the warehouse meanwhile may fail, and can be run
    again. Nothing is removed when a path is not a source of the warehouse. An exchange is stored
    once, from the first file that held it, so forgetting that file loses the exchange from
    later files that held it too: ingest those again with --force.

    $ cacheaudit forget capture/capture-20261201T10Z-p4242.jsonl

    $ cacheaudit forget capture/   # every file ingested from the folder
    """
    from pipeline import materialise, warehouse_db
    from pipeline.derived import DERIVED_DIR
    from pipeline.forget import finish
    from pipeline.forget import forget as run_forget
    from pipeline.reports.numbers import count

    wh = existing_warehouse(warehouse)
    result = run_forget(wh, paths)
    for s in result.sources:
        err(
            f"{s.source}: forgot {count(s.requests, 'request')} and"
            f" {count(s.rejected, 'reject')} ({count(s.generations, 'ingest')} of it)"
        )
    if result.skipped_elsewhere:
        err(
            f"other sources skipped {count(result.skipped_elsewhere, 'record')} as already stored"
            " or not LLM calls; any they shared with these files is gone with them: ingest"
            " those files again with --force to store it from there"
        )
    options = sql_options(None, rules)
    if (wh.root / DERIVED_DIR).is_dir():
        say_built(materialise.build(wh, options=options, progress=err), unchanged=False)
    err(warehouse_db.refresh(wh, options))
    finish(wh, result)  # only now: a forget killed before this is finished by running it again


def register(app: typer.Typer) -> None:
    app.command()(forget)
