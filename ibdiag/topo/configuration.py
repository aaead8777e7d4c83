"""Is the configuration right, not only consistent: the node's settings judged against its topology.

The entry point of the configuration checks (docs/configuration-checks.md): NCCL's environment
(:mod:`ibdiag.topo.nccl_checks`, :mod:`ibdiag.topo.nccl_net_checks`) the RoCE lossless settings
(:mod:`ibdiag.topo.roce_checks`) and the PCIe settings on GPU-adapter paths (:mod:`ibdiag.topo.pcie_checks`). Importing this module registers
their ids in :data:`ibdiag.topo.checks.CHECKS` (re-exported here for ``cli/registries.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ibdiag.findings.model import Finding
from ibdiag.node.dcb import DcbState
from ibdiag.node.model import Topology
from ibdiag.node.netdev import Netdev, read_netdevs
from ibdiag.node.roce import read_roce_port
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.topo import nccl_checks, nccl_net_checks, pcie_checks, roce_checks
from ibdiag.topo.checks import CHECKS
from ibdiag.topo.nccl_env import NcclEnv

__all__ = ["CHECKS", "NodeConfig", "check_configuration", "read_configuration"]


@dataclass(frozen=True)
class NodeConfig:
    """What the configuration checks read beside the topology."""

    nccl: NcclEnv
    netdevs: tuple[Netdev, ...] = ()
    roce: tuple[roce_checks.RoceState, ...] = ()
    """The RoCE ports NCCL uses, with their lossless settings (unknown ones None)."""
    pcie: pcie_checks.PcieState = pcie_checks.PcieState()
    """Every GPU -> nearest adapter path and the configuration space of the functions on it."""

    def to_json(self) -> dict[str, Any]:
        return {
            "nccl_env": self.nccl.to_json(),
            "roce": [r.to_json() for r in self.roce],
            "pcie_config": self.pcie.to_json(),
        }


def read_configuration(
    sysfs: SysfsRoot, topo: Topology, nccl: NcclEnv, dcb: Callable[[str], DcbState]
) -> NodeConfig:
    """Read what the configuration checks need: interfaces, and for each RoCE port NCCL uses its
    sysfs/configfs settings and ``dcb(netdev)``'s PFC and DSCP table."""
    roce = tuple(
        roce_checks.RoceState(read_roce_port(sysfs, p), dcb(p.netdev or ""))
        for p in roce_checks.roce_ports(topo, nccl)
    )
    return NodeConfig(
        nccl=nccl, netdevs=read_netdevs(sysfs), roce=roce, pcie=pcie_checks.read_pcie(sysfs, topo)
    )


def check_configuration(topo: Topology, config: NodeConfig) -> list[Finding]:
    """Every configuration check, in the order they are shown."""
    env = config.nccl
    return [
        *nccl_checks.nccl_ib_hca(topo, env),
        *nccl_checks.nccl_gid_index(topo, env),
        *nccl_checks.nccl_gdr(topo, env),
        *nccl_net_checks.nccl_socket_ifname(topo, env, config.netdevs),
        *nccl_net_checks.nccl_ib_tc_sl(topo, env),
        *nccl_net_checks.nccl_net(topo, env),
        *nccl_net_checks.nccl_tuning(topo, env),
        *roce_checks.roce_pfc(list(config.roce), env),
        *roce_checks.roce_ecn(list(config.roce), env),
        *roce_checks.roce_cm(list(config.roce)),
        *roce_checks.roce_mtu(list(config.roce)),
        *pcie_checks.pcie_acs(config.pcie),
        *pcie_checks.iommu(config.pcie),
        *pcie_checks.pcie_mps(config.pcie),
        *pcie_checks.pcie_mrrs(config.pcie),
    ]
