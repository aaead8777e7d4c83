"""Successive readings of a counters test node (tests.support.counters) turned into history records
at chosen times: the sysfs tree changes between reads as the kernel would change it."""

from __future__ import annotations

from pathlib import Path

from ibdiag.counters.read import discover_layout, read_sample
from ibdiag.history.model import Record
from ibdiag.history.run import topo_ports
from ibdiag.node.ports import node_ports
from ibdiag.node.sysfs import SysfsRoot
from tests.support.counters import HOST

HOUR = 3600.0


def counters_record(root: Path, at_s: float, host: str = HOST) -> Record:
    sysfs = SysfsRoot(root).check()
    sample = read_sample(sysfs, discover_layout(sysfs))
    return Record(at_s, host, "counters", sample.ports)


def topo_record(root: Path, at_s: float, host: str = HOST) -> Record:
    sysfs = SysfsRoot(root).check()
    return Record(at_s, host, "topo", topo_ports(node_ports(sysfs)))
