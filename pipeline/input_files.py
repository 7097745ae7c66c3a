"""Which files the paths given to `ingest` name.

A file named on the command line is taken as it is (its format is read from its content). A
directory contributes only its files with a capture-like name, so a README or a lock file beside
the captures is not read as traffic, and the walk passes over hidden folders (`.venv`, `.git`)
and warehouses: a warehouse's own files (its build stamps are .json) are never traffic, so
`cacheaudit ingest .` in a project reads only its captures. What is passed over is said in one
line, never silently.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.errors import InputError
from pipeline.sources import CAPTURE_SUFFIXES, looks_like_capture


def is_warehouse(path: Path) -> bool:
    """A cacheaudit warehouse: its manifests and its tables (what `ingest -w` makes)."""
    return (path / "sources").is_dir() and (path / "requests").is_dir()


@dataclass
class Walk:
    """What a walk of one directory found."""

    files: list[Path] = field(default_factory=list)
    warehouses: list[Path] = field(default_factory=list)
    broken_links: list[Path] = field(default_factory=list)


def walk(root: Path) -> Walk:
    """Every capture-like file under `root` (and every other file, for the note that says
    what was ignored), but for hidden files and folders and warehouses; capture-like links to
    nothing are listed apart (an editor's `.#x.jsonl` lock link is hidden, so none of them)."""
    found = Walk()
    for folder, subfolders, names in os.walk(root):
        here = Path(folder)
        kept = []
        for name in sorted(subfolders):
            if name.startswith("."):
                continue
            if is_warehouse(here / name):
                found.warehouses.append(here / name)
            else:
                kept.append(name)
        subfolders[:] = kept
        for name in names:
            path = here / name
            if name.startswith("."):
                continue
            if path.is_file():
                found.files.append(path)
            elif path.is_symlink() and looks_like_capture(path):
                found.broken_links.append(path)
    found.files.sort()
    found.broken_links.sort()
    return found


def expand(paths: list[Path], *, say: Callable[[str], None]) -> list[Path]:
    """The files to ingest for `paths`; `say` gets a line for each thing passed over. A
    warehouse named as input, or directories holding no capture-like file, are an error."""
    out: list[Path] = []
    for p in paths:
        if not p.is_dir():
            out.append(p)
            continue
        if is_warehouse(p):
            raise InputError(
                f"{p} is a cacheaudit warehouse, not a folder of captures",
                hint=f"read it with --warehouse {p}; ingest the capture files it was made from",
            )
        found = walk(p)
        ignored = [f for f in found.files if not looks_like_capture(f)]
        out.extend(f for f in found.files if looks_like_capture(f))
        if found.warehouses:
            say(
                f"{p}: passing over {len(found.warehouses)} warehouse folder(s) in it, e.g."
                f" {found.warehouses[0]}"
            )
        if found.broken_links:  # a capture-like link to nothing is said, not passed over
            link = found.broken_links[0]
            say(
                f"{p}: ignoring {len(found.broken_links)} link(s) to nothing, e.g. {link.name}"
                f" -> {link.readlink()}"
            )
        if ignored:
            say(
                f"{p}: ignoring {len(ignored)} file(s) without a capture extension"
                f" ({', '.join(CAPTURE_SUFFIXES)}), e.g. {ignored[0].name};"
                " name them to ingest them"
            )
    if not out:  # only directories were named, and none holds a capture-like file
        raise InputError(
            f"no capture files in {', '.join(str(p) for p in paths)}",
            hint=f"a directory is walked for {' '.join(CAPTURE_SUFFIXES)} files;"
            " name any other file to ingest it",
        )
    return out
