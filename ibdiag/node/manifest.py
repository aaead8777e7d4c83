"""The manifest of a snapshot, ``ROOT/ibdiag-snapshot.json`` (host, time, kernel, unreadable files),
and the one reader that believes it.

Apart from :mod:`ibdiag.node.snapshot` (which writes it), so that every command reading ``--root`` can
name the snapshot's host without importing the snapshot writer (issue 15: start-up time).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ibdiag.jsonread import loads
from ibdiag.node.sysfs import Refused, read_inside

MANIFEST = "ibdiag-snapshot.json"
MAX_MANIFEST_BYTES = 2**20


def read_manifest(root: Path) -> dict[str, Any] | None:
    """``ROOT/ibdiag-snapshot.json`` of a snapshot or fixture, or None (also when it is a link out of
    ``ROOT``, a FIFO or anything but a regular JSON file of at most 1 MiB: it is never believed then)."""
    try:
        raw = read_inside(Path(root) / MANIFEST, os.path.realpath(root), limit=MAX_MANIFEST_BYTES)
        doc = loads(raw)
    except (OSError, ValueError, Refused):
        return None
    return doc if isinstance(doc, dict) else None
