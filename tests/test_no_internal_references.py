"""Code, SQL, schemas, docs and tests speak to a reader of the repository: no reference to a
ticket number, an audit finding or a private notes file that the reader cannot open. The reason
itself is written instead, or a provider's public page, or docs/providers.md."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("pipeline", "queries", "schemas", "docs", "tests", "bench")
SUFFIXES = {".py", ".sql", ".json", ".md", ".csv", ".toml", ".txt", ".html"}
# This file and the path check spell the forbidden words on purpose.
SELF = {Path(__file__).name, "test_repository_stands_alone.py"}

# Spelled in pieces so that this file does not match itself.
FORBIDDEN = {
    "a ticket number": re.compile(r"\bissue" + r" \d+\b|\bthe issue\b|\bissue's\b"),
    "an audit finding": re.compile(r"\baudit" + r"(?:'s)? (?:F\d|reproduction)|\(F\d\)"),
    "a private notes file": re.compile(
        r"\brule" + r"book\b|caching" + r"-rules|provider" + r"-usage\.md|\[ISS-[A-Z]+\]"
    ),
    "private research": re.compile(r"\bthe re" + r"search\b|\bseed write-up\b"),
    "a section tag of private notes": re.compile(r"\(A[1-7]\b[^)]*\)|\bA[1-7] step\b"),
}


def _files() -> list[Path]:
    found = [ROOT / "Makefile", ROOT / "pyproject.toml"]
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in SUFFIXES and path.is_file() and path.name not in SELF:
                found.append(path)
    return found


def test_no_file_refers_to_tickets_audits_or_private_notes() -> None:
    hits = []
    for path in _files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for what, pattern in FORBIDDEN.items():
            for match in pattern.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                hits.append(f"{path.relative_to(ROOT)}:{line}: {what}: {match.group(0)!r}")
    assert hits == []


def test_the_check_finds_what_it_forbids() -> None:
    samples = {
        "a ticket number": "the view (issue" + " 4) says",
        "an audit finding": "the key did not change: audit" + " F1",
        "a private notes file": "see caching" + "-rules.md",
        "private research": "not in the re" + "search",
        "a section tag of private notes": "first byte (A5" + ", A7 step 3)",
    }
    for what, text in samples.items():
        assert FORBIDDEN[what].search(text), what
    assert not FORBIDDEN["a ticket number"].search("maximhq/bifrost issue #5629")
