"""Every RDMA port of the node, read the way ``ibdiag topo`` reads them (the peers of a selection)."""

from __future__ import annotations

from ibdiag.node.discover import list_adapters, list_ports, read_port
from ibdiag.node.model import Port
from ibdiag.node.sysfs import SysfsRoot


def node_ports(sysfs: SysfsRoot) -> tuple[Port, ...]:
    """State, rate and link layer of every port under ``/sys/class/infiniband`` (no GIDs)."""
    return tuple(
        read_port(sysfs, a, p, with_gids=False)
        for a in list_adapters(sysfs)
        for p in list_ports(sysfs, a)
    )
