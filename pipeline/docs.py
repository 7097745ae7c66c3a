"""Generated documentation: the table contract from schemas/, the CLI reference from --help.

`python -m pipeline.docs` rewrites the generated blocks in README.md and docs/cli.md; a test
fails when they are stale, so the docs cannot drift from the code.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import typer
from typer.testing import CliRunner

from pipeline import schema

ROOT = Path(__file__).resolve().parent.parent
BEGIN = "<!-- BEGIN GENERATED: {name} -->"
END = "<!-- END GENERATED: {name} -->"
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
        lines += [f"### `{name}`", "", spec.description, ""]
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
        result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "80", "NO_COLOR": "1"})
        title = "cacheaudit " + " ".join(path) if path else "cacheaudit"
        lines = [line.rstrip() for line in result.output.splitlines()]
        output = "\n".join(lines).strip("\n")
        parts += [f"## `{title.strip()}`", "", "```", output, "```", ""]
    return "\n".join(parts).rstrip() + "\n"


def replace_block(text: str, name: str, body: str) -> str:
    begin, end = BEGIN.format(name=name), END.format(name=name)
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    if not pattern.search(text):
        raise SystemExit(f"marker {begin} not found")
    return pattern.sub(lambda _: f"{begin}\n{body}{end}", text)


def generated_readme() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return replace_block(text, "table-contract", table_contract())


def main() -> None:
    (ROOT / "README.md").write_text(generated_readme(), encoding="utf-8")
    (ROOT / "docs").mkdir(exist_ok=True)
    (ROOT / "docs" / "cli.md").write_text(cli_reference(), encoding="utf-8")
    print("README.md and docs/cli.md regenerated", file=sys.stderr)


if __name__ == "__main__":
    main()
