"""The tree a command reads: ``--root`` opened (a directory, or a snapshot archive extracted for the
run) and the host it belongs to."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ibdiag.errors import UsageError
from ibdiag.node.manifest import read_manifest


@contextmanager
def opened_root(root: Path) -> Iterator[Path]:
    """Yield a directory that contains ``sys/``: ``root`` itself, or a snapshot tarball extracted into a
    temporary directory removed afterwards."""
    if root.is_file():
        # lazy: tarfile and the archive's checks, loaded for a snapshot only (ibdiag topo's start-up)
        from ibdiag.node.snapshot import extracted

        with extracted(root) as directory:
            yield directory
        return
    if not root.exists():
        raise UsageError(
            f"--root {root}: no such file or directory",
            hint="give a directory containing sys/ or a snapshot .tar.gz",
        )
    yield root


def host_of(directory: Path | None) -> str:
    """The host a reading belongs to: the snapshot's (its manifest) under a ``--root``, else this one."""
    if directory is not None and str(directory) != "/":
        manifest = read_manifest(directory)
        if manifest and manifest.get("host"):
            return str(manifest["host"])
    # what socket.gethostname() answers (gethostname(2) is uname's nodename), without importing socket
    return os.uname().nodename
