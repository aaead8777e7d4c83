"""``ibdiag snapshot`` as a library: :func:`run` captures the sysfs subset ibdiag reads into a .tar.gz
(:func:`ibdiag.node.snapshot.write_snapshot`), for ``--root`` on another machine, and
:func:`summary_text` says what it wrote. Nothing here prints.

node/ reads no configuration (pyproject.toml's contracts): the request carries ``[ports] skip`` itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ibdiag.errors import UsageError
from ibdiag.node.root import host_of
from ibdiag.node.snapshot import SnapshotSummary, write_snapshot
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.outfile import check_output_path


@dataclass(frozen=True)
class SnapshotRequest:
    """What ``ibdiag snapshot`` is asked: the archive to write and the tree to capture."""

    output: Path
    """The .tar.gz to write (atomically; an existing one only with ``force``)."""
    root: Path = Path("/")
    """Capture ``root/sys`` (a directory: a live node's ``/``, a fixture, an extracted snapshot)."""
    force: bool = False
    skip_adapters: tuple[str, ...] = ()
    """``[ports] skip``: adapters never read (restricted functions), named in the manifest."""


def run(req: SnapshotRequest) -> SnapshotSummary:
    """Capture the tree into the archive; the host is the tree's own (its manifest), else this one."""
    # a directory, device, FIFO or socket: refused even with --force
    check_output_path(req.output, "snapshot")
    if req.output.exists() and not req.force:
        raise UsageError(
            f"{req.output} exists", hint="pass --force to overwrite it, or choose another name"
        )
    sysfs = SysfsRoot(req.root, skip_adapters=req.skip_adapters).check()
    return write_snapshot(sysfs, req.output, host=host_of(req.root))


def summary_text(summary: SnapshotSummary) -> str:
    """What was written, how to read it back, and what was left out."""
    text = (
        f"wrote {summary.path}: {summary.files} files, {summary.links} links "
        f"({summary.pci_devices} PCI functions, {summary.adapters} RDMA adapters)\n"
        f"read it back with: ibdiag topo --root {summary.path}\n"
    )
    if summary.skipped:
        text += f"skipped ([ports] skip, named in the manifest): {', '.join(summary.skipped)}: not read, not in the archive\n"
    if summary.unreadable:
        text += f"{len(summary.unreadable)} attribute(s) could not be read and are left out (listed in the manifest)\n"
    return text
