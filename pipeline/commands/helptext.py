"""How `--help` reads, set once for every command (the CLI's root group calls `tidy`).

Docstrings are hard-wrapped at the source's line length. Typer's rich help keeps those line
breaks and then wraps again at the terminal's width, which leaves half-empty lines mid-sentence
("... is counted on" / "stderr ..."). `tidy` rewrites each command's help: a paragraph becomes one
line that the terminal wraps; a paragraph that starts with `$ ` (a command to copy) is kept line
by line, so its lines must fit 80 columns (tests/test_help_rendering.py checks). Examples are
marked by the prompt rather than by indentation because Typer strips a margin common to the
lines after the first.

Typer also writes a required argument as `{paths}...` in usage lines; `tidy` names arguments as
click does, `PATHS...` (`[NAME]` when optional).
"""

from __future__ import annotations

import inspect
import re
from typing import Any

from typer.core import TyperArgument

_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
PROMPT = "$ "


def paragraphs(text: str) -> str:
    """Help text with each prose paragraph on one line and examples (`$ ...`) kept as written."""
    out: list[str] = []
    for block in _PARAGRAPH_BREAK.split(inspect.cleandoc(text)):
        if block.startswith(PROMPT):
            out.append(block.rstrip())
        else:
            out.append(" ".join(line.strip() for line in block.splitlines()))
    return "\n\n".join(p for p in out if p)


class _Argument(TyperArgument):
    """A Typer argument named in usage lines as click names it: `PATHS...`, `[NAME]`."""

    # The signature of TyperArgument.make_metavar; ctx is the Context of the click that Typer
    # bundles.
    def make_metavar(self, ctx: Any, *, usage: bool = False) -> str:
        if not usage:
            return super().make_metavar(ctx, usage=usage)
        name = self.metavar or (self.name or "").upper()
        if self.nargs != 1 and not name.endswith("..."):  # a metavar may say it already
            name += "..."
        return name if self.required else f"[{name}]"


def tidy(command: Any) -> None:
    """Rewrite the help of `command` and of every command under it (see the module docstring)."""
    if command.help:
        command.help = paragraphs(command.help)
    for param in command.params:
        if isinstance(param, TyperArgument) and not isinstance(param, _Argument):
            param.__class__ = _Argument
    for sub in getattr(command, "commands", {}).values():
        tidy(sub)
