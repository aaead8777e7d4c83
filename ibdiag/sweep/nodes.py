"""Who takes part in a sweep: nodes by rank, with hostname, address and rails.

A *rail* is one adapter of a node, numbered in topo order (``ibdiag topo``'s NIC order, or the
``NCCL_IB_HCA`` list); on rail-optimised clusters rail k of every node hangs off the same leaf
switches, so a sweep tests rail k against rail k. Several nodes may share a hostname (ranks on one
machine in tests, or several processes per host): the rank is the identity, the hostname is for people.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from ibdiag.errors import UsageError

#: Names that may appear in a node description: hostnames, addresses, adapter names.
HOST_RE = re.compile(r"^[A-Za-z0-9_.:\-\[\]%]{1,253}$")
ADAPTER_RE = re.compile(r"^[A-Za-z0-9_.:\-]{1,64}$")


def valid_host(text: str) -> bool:
    """A hostname or address ibdiag will show: letters, digits and ``_.:-[]%``, at most 253 characters."""
    return isinstance(text, str) and bool(HOST_RE.match(text))


def valid_adapter(text: str) -> bool:
    """An RDMA device name like ``mlx5_3`` (letters, digits, ``_.:-``; at most 64 characters)."""
    return isinstance(text, str) and bool(ADAPTER_RE.match(text))


@dataclass(frozen=True)
class Rail:
    index: int
    """0-based position in the node's adapter order."""
    adapter: str | None
    """RDMA device (``mlx5_3``); None when the node has no RDMA adapter and is tested over TCP."""
    port: int | None = None
    rate_gbps: float | None = None
    """Line rate of the port in Gb/s (topo's ``rate_gbps``); None when not known."""

    @property
    def name(self) -> str:
        return self.adapter if self.adapter is not None else "tcp"

    def to_json(self) -> dict[str, object]:
        return {
            "rail": self.index,
            "adapter": self.adapter,
            "port": self.port,
            "rate_gbps": self.rate_gbps,
        }


@dataclass(frozen=True)
class FleetNode:
    rank: int
    host: str
    """Hostname, for people and drain lists (not unique: see the module docstring)."""
    address: str
    """Where its peers reach it (IP address or resolvable name)."""
    rails: tuple[Rail, ...]

    @property
    def label(self) -> str:
        """``gpu-017 (rank 17)``: how findings name the node."""
        return f"{self.host} (rank {self.rank})"

    def rail(self, index: int) -> Rail | None:
        return self.rails[index] if 0 <= index < len(self.rails) else None

    def to_json(self) -> dict[str, object]:
        return {
            "rank": self.rank,
            "host": self.host,
            "address": self.address,
            "rails": [r.to_json() for r in self.rails],
        }


@dataclass(frozen=True)
class End:
    """One end of a pair test: which node, which rail, which adapter."""

    rank: int
    rail: int
    adapter: str | None


def check_fleet(nodes: Sequence[FleetNode]) -> tuple[FleetNode, ...]:
    """The nodes, checked: ranks 0..N-1 in order, at least two nodes, every node with at least one rail
    numbered 0..R-1, names ibdiag will show. Raises :class:`UsageError` naming the first problem."""
    out = tuple(nodes)
    if len(out) < 2:
        raise UsageError(
            f"a sweep needs at least 2 nodes, got {len(out)}",
            hint="start one ibdiag sweep process per node (srun -N, torchrun --nnodes)",
        )
    for i, node in enumerate(out):
        if node.rank != i:
            raise UsageError(
                f"node {i} has rank {node.rank}: ranks must be 0..{len(out) - 1} in order",
                hint="this is a bug in whatever built the node list",
            )
        if not valid_host(node.host) or not valid_host(node.address):
            raise UsageError(
                f"rank {node.rank}: hostname or address {node.host!r}/{node.address!r} is not a plain name",
                hint="hostnames and addresses are letters, digits and _.:-",
            )
        if not node.rails:
            raise UsageError(
                f"{node.label} has no rail",
                hint="give at least one adapter, or the TCP rail (adapter None)",
            )
        for k, rail in enumerate(node.rails):
            if rail.index != k:
                raise UsageError(
                    f"{node.label}: rail {k} has index {rail.index}",
                    hint="rails are numbered 0..R-1 in topo order",
                )
            if rail.adapter is not None and not valid_adapter(rail.adapter):
                raise UsageError(
                    f"{node.label}: adapter name {rail.adapter!r} is not a device name",
                    hint="adapter names look like mlx5_3",
                )
    return out


def make_fleet(
    hosts: Sequence[str],
    adapters: Sequence[Sequence[str | None]] | Sequence[str | None] = (None,),
    *,
    rate_gbps: float | None = None,
    addresses: Sequence[str] | None = None,
) -> tuple[FleetNode, ...]:
    """Nodes for ``hosts`` (rank = position); ``adapters`` is one list for every node or one per node."""
    per_node = adapters and not isinstance(adapters[0], (str, type(None)))
    nodes = []
    for rank, host in enumerate(hosts):
        # per_node tells which of the two forms adapters has
        names = cast(Sequence[str | None], adapters[rank] if per_node else adapters)
        rails = tuple(
            Rail(k, name, 1 if name is not None else None, rate_gbps)
            for k, name in enumerate(names)
        )
        nodes.append(FleetNode(rank, host, addresses[rank] if addresses else host, rails))
    return check_fleet(nodes)
