"""The rate each RDMA port must reach, and where that expectation comes from.

In order: a ``[ports] rates_gbps`` pattern naming the port; ``[ports] expected_rate_gbps`` for a port in
``[ports] expect_on`` (every port by default); else the fastest active port among the port's *peers* —
the judged ports of the node in the same :func:`peer_group` with no expectation of their own (a node
is cabled uniformly: a slower port is the odd one out). A port with no active peer has no expected
rate: its rate is reported, not judged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ibdiag.node.model import Port
from ibdiag.ports.config import PortsConfig
from ibdiag.ports.selection import select_ports


@dataclass(frozen=True)
class ExpectedRate:
    """What one port must reach: ``rate_gbps`` None means nothing to compare with."""

    rate_gbps: float | None
    source: str
    """``[ports] rates_gbps "mlx5_4*"``, ``[ports] expected_rate_gbps``, ``the fastest active InfiniBand
    port on this node``, or why there is no expectation."""


def peer_group(port: Port) -> str:
    """The ports a port is compared with by default: those of the same link layer.

    A fact that makes a device's rate incomparable with the cabled ports belongs here: a software
    device (rxe, siw), whose rate is its netdev's speed, has a group of its own and no expectation.
    """
    if port.software:
        return f"software {port.link_layer or 'device'}"
    return port.link_layer or "unknown link layer"


@dataclass(frozen=True)
class ExpectedRates:
    """The expectation of every port of a node (built once from the node's ports, then asked per port)."""

    config: PortsConfig
    best_gbps: Mapping[str, float]
    """Peer group -> the fastest active rate among the peers."""
    scope: frozenset[tuple[str, int]] | None = None
    """The ports ``expected_rate_gbps`` applies to (``expect_on``); None: every port."""

    @classmethod
    def of(
        cls, peers: Iterable[Port], config: PortsConfig, gpu_names: Iterable[str] = ()
    ) -> ExpectedRates:
        """From the node's ports (``peers``; ignored ones and those with an expectation of their own
        do not count). ``gpu_names``: the GPU-facing adapters, for ``expect_on = "gpu"``."""
        peers = list(peers)
        scope = None
        if config.expected_rate_gbps is not None:
            scope = select_ports(config.expect_set, peers, gpu_names)
        best: dict[str, float] = {}
        for p in peers:
            group = peer_group(p)
            if (
                p.software
                or not p.active
                or p.rate_gbps is None
                or config.ignored(p.adapter, p.port)
                or config.configured_rate(p.adapter, p.port)
                or (scope is not None and (p.adapter, p.port) in scope)
            ):
                continue
            best[group] = max(best.get(group, 0.0), p.rate_gbps)
        return cls(config, best, scope)

    def for_port(self, port: Port) -> ExpectedRate:
        configured = self.config.configured_rate(port.adapter, port.port)
        if configured is not None:
            rate, pattern = configured
            return ExpectedRate(rate, f'[ports] rates_gbps "{pattern}"')
        if port.software:
            # rxe/siw: the rate is the netdev's speed (topo.discover.read_port), a fact about the host's
            # Ethernet link, not a cabled RDMA port a node-wide expectation is about.
            return ExpectedRate(
                None,
                f"software device: its rate is its netdev's speed ({port.rate_source or 'unknown'}), not compared with the node's ports",
            )
        if self.config.expected_rate_gbps is not None and (
            self.scope is None or (port.adapter, port.port) in self.scope
        ):
            return ExpectedRate(self.config.expected_rate_gbps, self._source())
        group = peer_group(port)
        best = self.best_gbps.get(group)
        label = self.config.expect_set.label
        outside = f" outside the {label} adapters" if self.scope is not None and label else ""
        if best is None:
            return ExpectedRate(None, f"no active {group} port with a rate on this node{outside}")
        return ExpectedRate(best, f"the fastest active {group} port on this node{outside}")

    def _source(self) -> str:
        """``--expect-rate``, or ``--expect-rate on the GPU-facing adapters`` when ``expect_on`` narrows it."""
        source = self.config.expected_rate_source
        label = self.config.expect_set.label
        return f"{source} on the {label} adapters" if label else source
