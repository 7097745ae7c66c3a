"""Generated documentation: the table contract from schemas/, the CLI reference from --help.

`python -m pipeline.docs` (`make docs`) rewrites docs/tables.md and docs/cli.md; a test fails
when they are stale, so the docs cannot drift from the code. The CLI reference is rendered at
80 columns, the width `--help` is written for.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from typer.testing import CliRunner

from pipeline import schema

ROOT = Path(__file__).resolve().parent.parent
HELP_COLUMNS = 80
CORE_TABLES = ("requests", "segments", "segment_content", "rejects", "sources")


def table_contract() -> str:
    """Markdown for every schema: core tables first, then derived views."""
    specs = {s.name: s for s in schema.all_schemas()}
    order = [n for n in CORE_TABLES if n in specs] + sorted(
        n for n in specs if n not in CORE_TABLES
    )
    lines: list[str] = []
    for name in order:
        spec = specs[name]
        lines += [f"## `{name}`", "", spec.description, ""]
        lines += ["| column | type | unit | meaning |", "|---|---|---|---|"]
        for c in spec.columns:
            desc = c.description.replace("|", "\\|")
            lines.append(f"| `{c.name}` | {c.type} | {c.unit or ''} | {desc} |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _commands(app: typer.Typer) -> list[list[str]]:
    """Every command path, found by walking the click command tree."""
    command = typer.main.get_command(app)
    paths: list[list[str]] = []

    def walk(cmd: object, prefix: list[str]) -> None:
        sub = getattr(cmd, "commands", None)
        if isinstance(sub, dict):
            for name in sorted(sub):
                paths.append([*prefix, name])
                walk(sub[name], [*prefix, name])

    walk(command, [])
    return paths


def cli_reference() -> str:
    from pipeline.cli import app

    runner = CliRunner()
    parts = ["# CLI reference", "", "Generated from `--help` by `python -m pipeline.docs`.", ""]
    for path in [[], *_commands(app)]:
        result = runner.invoke(
            app, [*path, "--help"], env={"COLUMNS": str(HELP_COLUMNS), "NO_COLOR": "1"}
        )
        title = "cacheaudit " + " ".join(path) if path else "cacheaudit"
        lines = [line.rstrip() for line in result.output.splitlines()]
        output = "\n".join(lines).strip("\n")
        parts += [f"## `{title.strip()}`", "", "```", output, "```", ""]
    return "\n".join(parts).rstrip() + "\n"


def tables_reference() -> str:
    """docs/tables.md: every table and view, column by column, with units."""
    intro = [
        "# Table contract",
        "",
        "Every table `cacheaudit ingest` writes and every view you can query with `cacheaudit sql`"
        " (`cacheaudit views` lists them), column by column with its type and unit. Generated"
        " from [`schemas/`](../schemas/) by `python -m pipeline.docs` (`make docs`). NULL always"
        " means not known, never 0.",
        "",
    ]
    return "\n".join(intro) + "\n" + table_contract()


def main() -> None:
    (ROOT / "docs").mkdir(exist_ok=True)
    (ROOT / "docs" / "tables.md").write_text(tables_reference(), encoding="utf-8")
    (ROOT / "docs" / "cli.md").write_text(cli_reference(), encoding="utf-8")
    print("docs/tables.md and docs/cli.md regenerated", file=sys.stderr)


if __name__ == "__main__":
    main()
