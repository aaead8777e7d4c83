"""Is the configuration right, not only consistent: the node's settings judged against its topology.

The entry point of the configuration checks (docs/configuration-checks.md): NCCL's environment
(:mod:`ibdiag.topo.nccl_checks`, :mod:`ibdiag.topo.nccl_net_checks`). Importing this module registers
their ids in :data:`ibdiag.topo.checks.CHECKS` (re-exported here for ``cli/registries.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ibdiag.findings.model import Finding
from ibdiag.node.model import Topology
from ibdiag.node.netdev import Netdev, read_netdevs
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.topo import nccl_checks, nccl_net_checks
from ibdiag.topo.checks import CHECKS
from ibdiag.topo.nccl_env import NcclEnv

__all__ = ["CHECKS", "NodeConfig", "check_configuration", "read_configuration"]


@dataclass(frozen=True)
class NodeConfig:
    """What the configuration checks read beside the topology."""

    nccl: NcclEnv
    netdevs: tuple[Netdev, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"nccl_env": self.nccl.to_json()}


def read_configuration(sysfs: SysfsRoot, nccl: NcclEnv) -> NodeConfig:
    """Read what the configuration checks need from ``sysfs`` (interfaces)."""
    return NodeConfig(nccl=nccl, netdevs=read_netdevs(sysfs))


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
    ]
