"""Every command's `--help`, rendered as an 80-column terminal shows it, reads as written.

The artefact this guards against: docstrings are hard-wrapped in the source, and Typer kept those
breaks and wrapped again at the terminal's width, so a paragraph came out as a full line, then a
line of two words, then a full line ("... (how many did not is" / "counted on" / "stderr; ...").
A line of prose followed, in the same paragraph, by a word that would have fitted on it is that
artefact. Usage lines showed required arguments as `{paths}...`.
"""

from __future__ import annotations

from itertools import pairwise

import pytest
from typer.testing import CliRunner

from pipeline import docs
from pipeline.cli import app
from pipeline.commands.helptext import paragraphs

WIDTH = 80
# Rich pads the help text by one column on each side.
TEXT_WIDTH = WIDTH - 2
COMMANDS = [[], *docs._commands(app)]


def _help(path: list[str]) -> str:
    result = CliRunner().invoke(
        app, [*path, "--help"], env={"COLUMNS": str(WIDTH), "NO_COLOR": "1"}
    )
    assert result.exit_code == 0, result.output
    return result.output


def _description(text: str) -> list[list[str]]:
    """The paragraphs between the usage line and the first panel, each a list of lines."""
    lines = text.splitlines()
    body = lines[: next(i for i, line in enumerate(lines) if line.startswith("╭"))]
    out: list[list[str]] = [[]]
    for line in body:
        if not line.strip():
            out.append([])
        elif not line.strip().startswith("Usage:"):
            out[-1].append(line.rstrip())
    return [p for p in out if p]


def _short_lines(paragraph: list[str], width: int) -> list[str]:
    """Lines after which the next word would have fitted: broken early, not wrapped."""
    return [
        line
        for line, after in pairwise(paragraph)
        if len(line) + 1 + len(after.split()[0]) <= width
    ]


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "cacheaudit")
def test_help_fits_80_columns_and_its_paragraphs_are_wrapped_not_broken(path: list[str]) -> None:
    text = _help(path)
    too_wide = [line for line in text.splitlines() if len(line.rstrip()) > WIDTH]
    assert not too_wide, too_wide
    for paragraph in _description(text):
        if paragraph[0].lstrip().startswith("$ "):
            continue  # an example to copy, kept line by line on purpose
        assert not _short_lines(paragraph, TEXT_WIDTH + 1), paragraph


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "cacheaudit")
def test_the_commands_panel_wraps_each_summary_without_early_breaks(path: list[str]) -> None:
    lines = _help(path).splitlines()
    if not any(line.startswith("╭─ Commands") for line in lines):
        return
    start = next(i for i, line in enumerate(lines) if line.startswith("╭─ Commands"))
    rows = [line[1:-1] for line in lines[start + 1 :] if line.startswith("│")]
    rows = rows[: next((i for i, r in enumerate(rows) if "╰" in r), len(rows))]
    first = rows[0]  # " name   summary": the summary column starts after the name's padding
    column = len(first) - len(first[first.index(" ", 1) :].lstrip())
    cells: list[list[str]] = []
    for row in rows:
        text = row[column:].rstrip()
        if row[:column].strip():
            cells.append([text])
        else:
            cells[-1].append(text)
    for cell in cells:
        assert not _short_lines(cell, len(rows[0]) - column - 1), cell


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "cacheaudit")
def test_usage_lines_name_arguments_in_capitals_without_braces(path: list[str]) -> None:
    usage = next(line for line in _help(path).splitlines() if "Usage:" in line)
    assert "{" not in usage and "}" not in usage, usage


def test_usage_of_a_command_taking_several_paths_reads_paths_dots() -> None:
    usage = next(line for line in _help(["ingest"]).splitlines() if "Usage:" in line)
    assert usage.split() == ["Usage:", "cacheaudit", "ingest", "[OPTIONS]", "PATHS..."]


def test_usage_of_capture_run_names_its_command_once_with_three_dots() -> None:
    usage = next(line for line in _help(["capture", "run"]).splitlines() if "Usage:" in line)
    assert usage.split()[-3:] == ["[--", "COMMAND", "[ARGS]...]"], usage


def test_a_paragraph_becomes_one_line_and_an_example_keeps_its_lines() -> None:
    doc = """Title line.

    A paragraph hard-wrapped
    in the source.

    $ cacheaudit sql "select 1,
        2"
    """
    assert paragraphs(doc) == (
        'Title line.\n\nA paragraph hard-wrapped in the source.\n\n$ cacheaudit sql "select 1,\n'
        '    2"'
    )


def test_the_cli_reference_is_rendered_at_80_columns() -> None:
    reference = (docs.ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert reference == docs.cli_reference(), "run `make docs`"
    assert max(len(line) for line in reference.splitlines()) <= WIDTH
    assert "Usage: cacheaudit ingest [OPTIONS] PATHS..." in reference


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "cacheaudit")
def test_no_option_name_or_help_is_cut_short_with_an_ellipsis_at_80_columns(
    path: list[str],
) -> None:
    # `experiment run` showed "--no-with-tool-rou…": an option a reader cannot type
    cut = [line for line in _help(path).splitlines() if "…" in line]
    assert not cut, cut
