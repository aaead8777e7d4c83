"""Builds the sysfs fixture trees under ``fixtures/sysfs/`` (and edge-case trees in tests).

The trees are shaped like real sysfs: nested ``devices/pci0000:xx/...`` directories, relative
symlinks from ``bus/pci/devices``, ``class/infiniband`` and ``class/net``, and attribute files in the
kernel's formats. ``python -m tests.sysfsgen fixtures/sysfs`` rewrites every profile's ``sys/`` tree
(and ``proc/``, where a profile has the kernel release);
the fixture READMEs are written by hand and left alone.
"""

from __future__ import annotations

import importlib
import pkgutil
import shutil
from pathlib import Path

from tests.sysfsgen.builder import Tree


def all_profiles() -> dict[str, object]:
    """``{name: module}`` of every module in ``tests/sysfsgen/profiles`` that has ``NAME`` and ``build``."""
    pkg = importlib.import_module("tests.sysfsgen.profiles")

    found = {}
    for info in pkgutil.iter_modules(pkg.__path__):
        mod = importlib.import_module(f"{pkg.__name__}.{info.name}")
        if hasattr(mod, "NAME") and hasattr(mod, "build"):
            found[mod.NAME] = mod
    return dict(sorted(found.items()))


def generate(out: Path, names: list[str] | None = None) -> list[str]:
    """Write the named profiles (all when None) under ``out``; returns the names written."""
    written = []
    for name, mod in all_profiles().items():
        if names and name not in names:
            continue
        target = Path(out) / name
        shutil.rmtree(target / "sys", ignore_errors=True)
        shutil.rmtree(target / "proc", ignore_errors=True)
        shutil.rmtree(target / "dcb", ignore_errors=True)
        (target / "ibdiag-snapshot.json").unlink(missing_ok=True)
        tree = Tree(target)
        mod.build(tree)  # type: ignore[attr-defined]
        tree.check_no_empty_dirs()
        written.append(name)
    return written
