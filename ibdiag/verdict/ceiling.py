"""The ceiling: the busbw a node's rails could carry (rails used x link rate / 8 x payload share), from
flags or from the rails ``--root`` shows (``topo.nccl_ports``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ibdiag.node.model import port_name


@dataclass(frozen=True)
class RailInfo:
    """What ``--root`` says about the rails: the active ports of the adapters paired with GPUs."""

    ports: tuple[str, ...]
    """``mlx5_0:1`` ..."""
    rate_gbps: float | None
    """The highest rate among them (a node is cabled uniformly; a slower port is a health finding)."""
    link_layer: str | None


def rails_from_topology(topo: Any) -> RailInfo:
    """Rail ports: the ports NCCL should use (``topo.nccl_ports``: every port nearest to a GPU, ties
    included, of the fabric's link layer, so a storage Ethernet adapter that ties is not a rail)."""
    ports = topo.nccl_ports
    if not ports:
        return RailInfo((), None, None)
    rates = [p.rate_gbps for p in ports if p.rate_gbps]
    return RailInfo(
        tuple(port_name(p) for p in ports), max(rates) if rates else None, ports[0].link_layer
    )


@dataclass(frozen=True)
class Ceiling:
    """The best busbw the node's rails could carry: rails used x link rate / 8 x payload share."""

    link_gbps: float | None
    link_source: str
    rails_per_node: int
    rails_source: str
    rails_used: int
    payload_share: float
    rail_ports: tuple[str, ...] = ()
    root_read: bool = False
    """``--root`` was read (its rails, if any, are in rail_ports)."""

    @property
    def rail_gbs(self) -> float | None:
        return None if self.link_gbps is None else self.link_gbps / 8.0 * self.payload_share

    @property
    def busbw_gbs(self) -> float | None:
        return None if self.rail_gbs is None else self.rails_used * self.rail_gbs

    def to_json(self) -> dict[str, Any]:
        return {
            "link_gbps": self.link_gbps,
            "link_source": self.link_source,
            "rails_per_node": self.rails_per_node,
            "rails_source": self.rails_source,
            "rails_used": self.rails_used,
            "rail_ports": list(self.rail_ports),
            "payload_share": self.payload_share,
            "rail_gbs": self.rail_gbs,
            "busbw_gbs": self.busbw_gbs,
        }


def ceiling(
    *,
    link_gbps: float | None,
    rails_per_node: int | None,
    ranks_per_node: int,
    rails: RailInfo | None,
    payload_share: float,
) -> Ceiling:
    """``--link-gbps`` / ``--rails-per-node`` win; else ``--root``'s rails; else one rail, rate unknown.

    Rails found under ``--root`` are capped at ranks per node (a rank drives the rail beside its GPU);
    an explicit ``--rails-per-node`` is taken as given (a GPU may drive several adapters).
    """
    if link_gbps is not None:
        link, link_src = float(link_gbps), "--link-gbps"
    elif rails is not None and rails.rate_gbps is not None:
        link, link_src = rails.rate_gbps, "--root"
    else:
        link, link_src = None, "unknown"
    if rails_per_node is not None:
        n, src, used = rails_per_node, "--rails-per-node", rails_per_node
    elif rails is not None and rails.ports:
        n, src = len(rails.ports), "--root"
        used = min(n, ranks_per_node)
    else:
        n, src, used = 1, "default", 1
    return Ceiling(
        link, link_src, n, src, used, payload_share, rails.ports if rails else (), rails is not None
    )
