"""The files ``ibdiag report`` is given: directories walked (without recursion, bounded in depth),
globs expanded, names kept; and how a file's name is shown (through the one excerpt rule)."""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ibdiag.errors import InputError
from ibdiag.text import safe_excerpt

__all__ = ["MAX_DIR_DEPTH", "MAX_FILES", "Skipped", "find_files", "json_files", "shown_name"]

#: Most files one report reads (a directory of a 16384-node fleet's topo, counters and bench files fits).
MAX_FILES = 100_000


@dataclass(frozen=True)
class Skipped:
    path: str
    reason: str


def find_files(args: Sequence[str]) -> tuple[list[Path], list[Skipped]]:
    """Files named by ``args``: a directory gives its ``*.json`` (recursively), a pattern with ``*?[``
    its matches, a name itself. A name that does not exist, or a pattern matching nothing, is skipped."""
    files: list[Path] = []
    skipped: list[Skipped] = []
    seen: set[str] = set()

    def add(p: Path) -> None:
        key = os.path.normpath(str(p))
        if key not in seen:
            seen.add(key)
            files.append(p)

    for arg in args:
        p = Path(arg)
        if p.is_dir():
            found, too_deep = json_files(p)
            for child in found:
                add(child)
            skipped += [
                Skipped(
                    shown_name(d),
                    f"deeper than {MAX_DIR_DEPTH} levels below {shown_name(p)}: not read",
                )
                for d in too_deep
            ]
        elif any(ch in arg for ch in "*?["):
            matches = sorted(glob.glob(arg, recursive=True))
            if not matches:
                skipped.append(Skipped(shown_name(arg), "the pattern matches no file"))
            for m in matches:
                add(Path(m))
        elif p.exists() or p.is_symlink():
            add(p)
        else:
            skipped.append(Skipped(shown_name(arg), "no such file or directory"))
        if len(files) > MAX_FILES:
            raise InputError(
                f"more than {MAX_FILES} files to read",
                hint="report on a smaller part of the fleet, or a directory per job",
            )
    return files, skipped


#: Deepest directory ``report DIR`` descends into (a fleet's layout is a few levels deep).
MAX_DIR_DEPTH = 32


def json_files(top: Path) -> tuple[list[Path], list[Path]]:
    """Every ``*.json`` below ``top``, sorted, walked without recursion and without following links
    to directories (as ``rglob`` walks); and the directories not entered, deeper than
    :data:`MAX_DIR_DEPTH` (a tree 1000 levels deep is a RecursionError for ``rglob``)."""
    found: list[Path] = []
    too_deep: list[Path] = []
    stack = [(top, 0)]
    while stack:
        directory, depth = stack.pop()
        try:
            with os.scandir(directory) as it:
                entries = list(it)
        except OSError:
            continue
        for e in entries:
            if e.name.endswith(".json"):
                found.append(Path(e.path))
            if e.is_dir(follow_symlinks=False):
                if depth >= MAX_DIR_DEPTH:
                    too_deep.append(Path(e.path))
                else:
                    stack.append((Path(e.path), depth + 1))
    return sorted(found), sorted(too_deep)


#: Longest file name shown (escapes included) before it is cut with a note.
MAX_SHOWN_NAME = 1024


def shown_name(path: str | os.PathLike[str]) -> str:
    """A file name as every view shows it: through the one excerpt rule (a name is as untrusted as the
    file: escape sequences in it must not reach a terminal, nor invalid characters an XML report)."""
    return safe_excerpt(os.fspath(path), MAX_SHOWN_NAME)
