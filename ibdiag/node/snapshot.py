"""``ibdiag snapshot``: capture the sysfs subset ibdiag reads into a .tar.gz, and open one again.

The archive holds ``sys/...`` (attribute files with their text, symlinks with their relative
targets, exactly as the kernel lays them out) and ``ibdiag-snapshot.json`` (host, time, the node's
kernel release, the files that could not be read). The release lives in procfs, not sysfs, and the
archive holds only ``sys/`` (older readers refuse any other member), so the manifest carries it:
``kernel_release`` is what ``ibdiag topo`` reads from the root (``/proc/sys/kernel/osrelease`` on a
live node; None when unknown), ``kernel`` the release of the machine that ran the command (the
node's own when the root is ``/``; kept for readers of older snapshots). ``[ports] skip`` adapters are never read (``skip`` and
``skipped_adapters`` in the manifest say which). ``ibdiag topo --root node17.tar.gz`` reads it back through the
same :class:`SysfsRoot` code path as ``/sys``.
"""

from __future__ import annotations

import io
import json
import platform
import re
import tarfile  # this module is loaded only to write or open a tarball (`ibdiag topo --root DIR` never)
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ibdiag import __version__
from ibdiag.errors import InputError
from ibdiag.node.archive import MAX_ENTRIES, extract_snapshot
from ibdiag.node.discover import read_kernel_release
from ibdiag.node.manifest import (  # noqa: F401 - the snapshot's manifest, read by every --root
    MANIFEST,
    MAX_MANIFEST_BYTES,
    read_manifest,
)
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.outfile import atomic_output

#: PCI attributes ibdiag reads (topo) plus a few that help a person reading the snapshot.
PCI_ATTRS = (
    "vendor",
    "device",
    "class",
    "subsystem_vendor",
    "subsystem_device",
    "revision",
    "numa_node",
    "local_cpulist",
    "current_link_speed",
    "current_link_width",
    "max_link_speed",
    "max_link_width",
)
NET_ATTRS = ("dev_port", "dev_id", "operstate", "mtu", "address", "speed", "carrier")
#: ``version``/``srcversion``: the driver versions ``ibdiag topo`` reports (modinfo -F version/srcversion).
MODULE_FILES = ("initstate", "version", "srcversion")


@dataclass(frozen=True)
class SnapshotSummary:
    path: Path
    files: int
    links: int
    adapters: int
    pci_devices: int
    unreadable: tuple[str, ...]
    skipped: tuple[str, ...] = ()
    """Adapters ``[ports] skip`` left out: not read, not in the archive (named in the manifest)."""


class _Collector:
    def __init__(self, sysfs: SysfsRoot) -> None:
        self.sysfs = sysfs
        self.files: dict[str, str] = {}
        self.links: dict[str, str] = {}
        self.link_targets: set[str] = set()
        """Resolved targets of :attr:`links`: written as directories, so every link points to a member."""
        self.unreadable: list[str] = []

    def file(self, rel: str) -> None:
        if rel in self.files or not self.sysfs.exists(rel):
            return
        before = len(self.sysfs.problems)
        text = self.sysfs.read(rel)
        if text is None:
            if len(self.sysfs.problems) > before:
                self.unreadable.append(rel)
            return
        self._count()
        self.files[rel] = text

    def link(self, rel: str) -> str | None:
        """Record the link at ``rel`` and return its resolved target; a link that is dangling or leads
        outside the tree (which a snapshot could not be read back with) is left out."""
        target = self.sysfs.readlink(rel)
        if target is None:
            return None
        real = self.sysfs.resolve(rel)
        if real is None or target.startswith("/"):
            return None
        self._count()
        self.links[rel] = target
        self.link_targets.add(real)
        return real

    def _count(self) -> None:
        if len(self.files) + len(self.links) >= MAX_ENTRIES:
            raise InputError(
                f"snapshot would hold more than {MAX_ENTRIES} entries",
                hint="this sysfs tree looks unusual; report it",
            )

    def tree(self, rel: str) -> None:
        for f in self.sysfs.walk_files(rel):
            self.file(f)


def _pci_chain(real: str) -> list[str]:
    """``devices/pci0000:15/0000:15:01.0/0000:16:00.0`` -> each PCI device directory along the path."""
    parts = real.split("/")
    out = []
    for i in range(2, len(parts) + 1):
        if re.fullmatch(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", parts[i - 1]):
            out.append("/".join(parts[:i]))
    return out


def collect(sysfs: SysfsRoot) -> _Collector:
    c = _Collector(sysfs)
    pci_dirs: set[str] = set()
    for name in sysfs.listdir("bus/pci/devices"):
        real = c.link(f"bus/pci/devices/{name}")
        if real:
            pci_dirs.update(_pci_chain(real))
    for name in sysfs.listdir("class/infiniband"):
        real = c.link(f"class/infiniband/{name}")
        if not real:
            continue
        for f in sysfs.walk_files(real):
            # Skip the per-device power/ and uevent noise; keep attributes, ports/, hw_counters/.
            tail = f[len(real) + 1 :]
            if tail.startswith("power/") or tail == "uevent":
                continue
            c.file(f)
        dev = c.link(f"{real}/device")
        if dev:
            pci_dirs.update(_pci_chain(dev))
            # The bound driver and its module (bus/pci/drivers/<drv>/module -> module/<name>): which
            # module's version is the adapter's driver version (ibdiag.node.driver.driver_module).
            drv = c.link(f"{dev}/driver")
            if drv:
                c.link(f"{drv}/module")
    for name in sysfs.listdir("class/net"):
        real = c.link(f"class/net/{name}")
        if real:
            for attr in NET_ATTRS:
                c.file(f"{real}/{attr}")
            c.tree(f"{real}/ecn")  # mlx5's per-priority ECN switches (topo.roce_ecn)
    for d in sorted(pci_dirs):
        for attr in PCI_ATTRS:
            c.file(f"{d}/{attr}")
        group = c.link(f"{d}/iommu_group")  # -> kernel/iommu_groups/N (topo.iommu)
        if group:
            c.file(f"{group}/type")
    c.tree(
        "kernel/config/rdma_cm"
    )  # rdma_cm's default RoCE mode and ToS (topo.roce_cm), when mounted
    for name in sysfs.listdir("devices/system/node"):
        if re.fullmatch(r"node\d+", name):
            c.file(f"devices/system/node/{name}/cpulist")
    for name in sysfs.listdir("module"):
        for f in MODULE_FILES:
            c.file(f"module/{name}/{f}")
    c.tree("kernel/mm/memory_peers")
    return c


def write_snapshot(sysfs: SysfsRoot, out: Path, *, host: str) -> SnapshotSummary:
    """Capture ``sysfs`` into ``out`` (.tar.gz), written atomically (:func:`ibdiag.outfile.atomic_output`:
    only over a regular file or nothing, no temporary file left on any exit)."""
    c = collect(sysfs)
    kernel_release, _ = read_kernel_release(sysfs)
    skipped = sysfs.skipped_adapters()
    manifest: dict[str, Any] = {
        "schema": "ibdiag.snapshot/1",
        "host": host,
        "ibdiag_version": __version__,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "kernel": platform.release(),
        "kernel_release": kernel_release,
        "source_root": str(sysfs.root),
        "files": len(c.files),
        "links": len(c.links),
        "unreadable": sorted(c.unreadable),
        # [ports] skip: the patterns in force and the adapters they left out (never read, not captured)
        "skip": list(sysfs.skip_adapters),
        "skipped_adapters": skipped,
    }
    out = Path(out)
    dirs: set[str] = set()
    for rel in sorted([*c.files, *c.links]):
        parts = rel.split("/")
        for i in range(1, len(parts)):
            dirs.add("/".join(parts[:i]))
    for real in c.link_targets:
        parts = real.split("/")
        for i in range(1, len(parts) + 1):
            dirs.add("/".join(parts[:i]))
    if len(dirs) + len(c.files) + len(c.links) + 1 > MAX_ENTRIES:
        raise InputError(
            f"snapshot would hold more than {MAX_ENTRIES} entries",
            hint="this sysfs tree looks unusual; report it",
        )
    now = time.time()
    with (
        atomic_output(out, "snapshot") as raw,
        tarfile.open(fileobj=raw, mode="w:gz", format=tarfile.PAX_FORMAT) as tar,
    ):
        for d in sorted(dirs):
            info = tarfile.TarInfo(f"sys/{d}")
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, now
            tar.addfile(info)
        for rel, text in sorted(c.files.items()):
            data = (text + "\n").encode()
            info = tarfile.TarInfo(f"sys/{rel}")
            info.size, info.mode, info.mtime = len(data), 0o444, now
            tar.addfile(info, io.BytesIO(data))
        for rel, target in sorted(c.links.items()):
            info = tarfile.TarInfo(f"sys/{rel}")
            info.type, info.linkname, info.mode, info.mtime = tarfile.SYMTYPE, target, 0o777, now
            tar.addfile(info)
        data = (json.dumps(manifest, indent=2) + "\n").encode()
        info = tarfile.TarInfo(MANIFEST)
        info.size, info.mode, info.mtime = len(data), 0o444, now
        tar.addfile(info, io.BytesIO(data))
    return SnapshotSummary(
        path=out,
        files=len(c.files),
        links=len(c.links),
        adapters=len(sysfs.listdir("class/infiniband")),
        pci_devices=len(sysfs.listdir("bus/pci/devices")),
        unreadable=tuple(sorted(c.unreadable)),
        skipped=tuple(skipped),
    )


@contextmanager
def extracted(archive: Path) -> Iterator[Path]:
    """Extract a snapshot into a temporary directory (removed afterwards) and yield it.

    Every member is checked before anything is written (:mod:`ibdiag.node.archive`): only directories,
    regular files and relative links that resolve inside ``sys/``, within the size caps.
    """
    archive = Path(archive)
    with tempfile.TemporaryDirectory(prefix="ibdiag-root-") as tmp:
        extract_snapshot(archive, Path(tmp), manifest=MANIFEST)
        yield Path(tmp)
