"""``--root``: what the node itself says — its GPUs, its rails, and the topo/counters findings that make
the fabric unhealthy. Reads through :class:`ibdiag.node.sysfs.SysfsRoot` like ``ibdiag topo`` and ``ibdiag counters``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ibdiag.counters.config import CountersConfig
from ibdiag.counters.reading import reading_findings
from ibdiag.node.discover import discover
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.ports.config import PortsConfig
from ibdiag.topo.checks import TopoConfig, check_topology
from ibdiag.verdict.ceiling import RailInfo, rails_from_topology
from ibdiag.verdict.health import Health, sort_health


@dataclass(frozen=True)
class NodeFacts:
    gpus: int
    rails: RailInfo
    health: Health


def read_node(sysfs: SysfsRoot, cfg: Any) -> NodeFacts:
    """Discover the node's topology, check it and its counters (one ``SysfsRoot``, built by the caller)."""
    topo_cfg = cfg.section("topo", TopoConfig)
    topo = discover(sysfs, gdr_level=topo_cfg.gdr_path_class)
    ports_cfg = cfg.section("ports", PortsConfig)
    # Port state and rate come once, with topo's findings; counters adds what only counters can say.
    found = [
        *check_topology(topo, topo_cfg, ports_cfg),
        *reading_findings(
            sysfs, cfg.section("counters", CountersConfig), ports_cfg, port_health=False
        ),
    ]
    rails = rails_from_topology(topo)
    health = sort_health(found, checked=("topo", "counters"), rails=rails)
    return NodeFacts(len(topo.gpus), rails, health)
