"""docs/tables.md and docs/cli.md are generated; they must match the code. README.md is the front
door: short, its links resolve, and the numbers and output it quotes are what the demo gives."""

from __future__ import annotations

import re

from pipeline import docs

README = docs.ROOT / "README.md"


def test_the_table_contract_matches_schemas() -> None:
    current = (docs.ROOT / "docs" / "tables.md").read_text(encoding="utf-8")
    assert current == docs.tables_reference(), "run `make docs`"


def test_the_cli_reference_matches_help_output() -> None:
    current = (docs.ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert current == docs.cli_reference(), "run `make docs`"


def test_the_readme_shows_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert "make demo" in text
    assert "make test" in text


def test_the_readme_is_a_front_door_of_a_few_screens() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.encode()) < 25_000
    # The newcomer's path to their own traffic's summary comes before the tour.
    assert text.index("## Your own traffic in three commands") < text.index("## A short tour")
    quickstart = text[text.index("## Your own traffic") : text.index("## A short tour")]
    assert "cacheaudit capture run -- " in quickstart
    assert "cacheaudit findings" in quickstart


def test_every_relative_link_of_the_readme_and_docs_resolves() -> None:
    for page in [README, *sorted((docs.ROOT / "docs").glob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), f"{page.name}: {target}"
