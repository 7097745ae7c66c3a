"""README's table contract and docs/cli.md are generated; they must match the code."""

from __future__ import annotations

from pipeline import docs


def test_the_readme_table_contract_matches_schemas() -> None:
    current = (docs.ROOT / "README.md").read_text(encoding="utf-8")
    assert current == docs.generated_readme(), "run `python -m pipeline.docs`"


def test_the_cli_reference_matches_help_output() -> None:
    current = (docs.ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert current == docs.cli_reference(), "run `python -m pipeline.docs`"


def test_the_readme_shows_the_two_commands() -> None:
    text = (docs.ROOT / "README.md").read_text(encoding="utf-8")
    assert "make demo" in text
    assert "make test" in text
