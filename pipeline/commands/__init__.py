"""Command groups beyond the core (ingest, sql, views). Each module exposes `register(app)`.

One module per capability, owned by whoever builds it; `cli.py` registers them all.
"""

COMMAND_MODULES = (
    "pipeline.commands.summary",
    "pipeline.commands.prices",
    "pipeline.commands.diagnose",
    "pipeline.commands.report",
    "pipeline.commands.capture",
    "pipeline.commands.experiment",
    "pipeline.commands.simulate",
    "pipeline.commands.engine",
    "pipeline.commands.findings",
    "pipeline.commands.forget",
)
