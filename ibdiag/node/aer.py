"""PCIe Advanced Error Reporting counters of one PCI function: ``aer_dev_correctable``,
``aer_dev_nonfatal`` and ``aer_dev_fatal`` under ``/sys/bus/pci/devices/<address>/``.

The kernel prints one ``<name> <count>`` line per error bit and a total line
(drivers/pci/pcie/aer.c, ``aer_stats_dev_attr``: ``"%s %llu\\n"`` per bit, then
``"TOTAL_ERR_%s %llu\\n"`` with COR, NONFATAL or FATAL). A device without the AER capability (or a
kernel without CONFIG_PCIEAER, or a virtio device under qemu) has no such files: ``None``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ibdiag.node.sysfs import SysfsRoot

#: The three files, and the key of each in :class:`AerCounts`.
AER_FILES = {
    "correctable": "aer_dev_correctable",
    "nonfatal": "aer_dev_nonfatal",
    "fatal": "aer_dev_fatal",
}
_NAME_RE = re.compile(r"[A-Za-z_][\w\[\]]{0,63}")
#: Largest count accepted (the kernel keeps u64).
MAX_COUNT = 2**64 - 1


@dataclass(frozen=True)
class AerCounts:
    """One PCI function's AER counts since boot; a kind is None when its file is missing or malformed."""

    device: str
    """PCI address, ``0000:21:00.0``."""
    correctable: Mapping[str, int] | None
    nonfatal: Mapping[str, int] | None
    fatal: Mapping[str, int] | None

    def total(self, kind: str) -> int | None:
        """The ``TOTAL_ERR_*`` line of ``kind`` (or the sum of its bits when the line is missing)."""
        counts: Mapping[str, int] | None = getattr(self, kind)
        if counts is None:
            return None
        for name, value in counts.items():
            if name.startswith("TOTAL_ERR_"):
                return value
        return sum(counts.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "device": self.device,
            **{
                kind: (None if getattr(self, kind) is None else dict(getattr(self, kind)))
                for kind in AER_FILES
            },
        }


def parse_aer(text: str) -> dict[str, int] | None:
    """``{"RxErr": 0, ..., "TOTAL_ERR_COR": 0}`` from one aer_dev_* file; None when a line is malformed.

    >>> parse_aer("RxErr 2\\nBadTLP 0\\nTOTAL_ERR_COR 2\\n")
    {'RxErr': 2, 'BadTLP': 0, 'TOTAL_ERR_COR': 2}
    """
    out: dict[str, int] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit() or not _NAME_RE.fullmatch(parts[0]):
            return None
        value = int(parts[1])
        if value > MAX_COUNT:
            return None
        out[parts[0]] = value
    return out or None


def read_aer(sysfs: SysfsRoot, address: str) -> AerCounts | None:
    """The AER counts of PCI function ``address``; None when it has none of the three files."""
    base = f"bus/pci/devices/{address}"
    kinds: dict[str, dict[str, int] | None] = {}
    for kind, name in AER_FILES.items():
        text = sysfs.read(f"{base}/{name}")
        parsed = None if text is None else parse_aer(text)
        if text is not None and parsed is None:
            sysfs.record(f"{base}/{name}", "malformed", "not '<name> <count>' lines; not judged")
        kinds[kind] = parsed
    if all(v is None for v in kinds.values()):
        return None
    return AerCounts(address, kinds["correctable"], kinds["nonfatal"], kinds["fatal"])
