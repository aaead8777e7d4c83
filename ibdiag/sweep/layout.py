"""Where a sweep's nodes sit on the fabric, and what is known of the routes between them.

A sweep runs many pair tests at once; two of them that cross one link in the same direction each get
about half of it, and a sweep that does not know this names healthy links bad. What keeps a round's
tests apart is the fabric's description (:class:`FabricDescription`): each host adapter's *seat* — the
leaf switch its cable goes to and its port there — each leaf's *uplink groups* (the distinct switches
above it), and how the fabric routes between leaves:

* ``routes`` — the subnet manager's routes were read (``ibdiag fabric --routes --save``): each pair's
  path is known exactly, as the directed inter-switch links it crosses;
* ``destination`` — a saved InfiniBand fabric without its routes: static per-destination routing is
  assumed to spread a leaf's destinations over its uplinks as fat-tree routing (ftree, D-mod-K) does,
  which is not proven;
* ``hashed`` — a cabling plan (``ibdiag fabric --expect``'s CSV or TOML), the form for a routed RoCE/IP
  fabric: routes hashed per flow (ECMP), so nothing but the cabling is known.

:meth:`FabricDescription.place` binds a description to the sweep's nodes (host and adapter names, or
the node's address) as a :class:`FabricLayout`, which :mod:`~ibdiag.sweep.contention` reads. The
description is read from files by :mod:`~ibdiag.sweep.layoutread`; this module holds no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ibdiag.sweep.nodes import FleetNode

ROUTES = "routes"
DESTINATION = "destination"
HASHED = "hashed"
ROUTINGS = (ROUTES, DESTINATION, HASHED)


@dataclass(frozen=True)
class Seat:
    """Where one host adapter's cable goes: its leaf, the port there, its place among the leaf's hosts."""

    leaf: str
    """The leaf switch's name (a plan's name, or a saved fabric's GUID)."""
    port: int
    index: int
    """0-based position of ``port`` among the leaf's host ports, in port order."""
    ca: str | None = None
    """The adapter's node GUID and port (a saved fabric only: to follow its routes)."""
    ca_port: int | None = None


RouteFn = Callable[[Seat, Seat], tuple[str, ...] | None]
"""The directed inter-switch links the route from one seat to another crosses, in order (each named
by the port it leaves through); None when it cannot be followed."""


@dataclass(frozen=True)
class FabricDescription:
    """A fabric as a sweep needs it (module docstring)."""

    source: str
    routing: str
    """``routes``, ``destination`` or ``hashed``."""
    seats: Mapping[tuple[str, str], Seat]
    """(host, adapter) -> its seat; a dual-port adapter's second port is ``mlx5_2:2``."""
    uplinks: Mapping[str, int]
    """Leaf -> its uplink groups (the distinct switches above it it has an active cable to)."""
    two_tier: bool
    """Every path between two leaves crosses one switch above them (leaves and spines only)."""
    route: RouteFn | None = None
    names: Mapping[str, str] = field(default_factory=dict)
    """A leaf's name for people, where it differs from its key (a GUID)."""

    def leaf_name(self, leaf: str) -> str:
        return self.names.get(leaf, leaf)

    def place(self, nodes: Sequence[FleetNode]) -> FabricLayout:
        """Each node's rails on this fabric: by host name (or its short form, or the node's address)
        and adapter; a TCP rail (no adapter) by the host's one cable. Ranks with a rail not found are
        listed in :attr:`FabricLayout.unplaced`."""
        by_host: dict[str, list[tuple[str, Seat]]] = {}
        for (host, adapter), seat in self.seats.items():
            by_host.setdefault(host, []).append((adapter, seat))
        short: dict[str, list[str]] = {}
        for host in by_host:
            short.setdefault(host.split(".")[0], []).append(host)
        seats: dict[tuple[int, int], Seat] = {}
        unplaced: list[int] = []
        for node in nodes:
            key = _host_key(node, by_host, short)
            cables = sorted(by_host.get(key, ())) if key is not None else []
            found = True
            for rail in node.rails:
                got = _rail_seat(cables, rail.adapter, rail.port)
                if got is None:
                    found = False
                else:
                    seats[(node.rank, rail.index)] = got
            if not found:
                unplaced.append(node.rank)
        return FabricLayout(self, seats, tuple(unplaced))


def _host_key(
    node: FleetNode, by_host: Mapping[str, object], short: Mapping[str, list[str]]
) -> str | None:
    for name in (node.host, node.address):
        if name in by_host:
            return name
        alike = short.get(name.split(".")[0], [])
        if len(alike) == 1:
            return alike[0]
    return None


def _rail_seat(
    cables: list[tuple[str, Seat]], adapter: str | None, port: int | None
) -> Seat | None:
    if adapter is None:  # a TCP rail: the host's address, over its one cable
        return cables[0][1] if len(cables) == 1 else None
    for name in (f"{adapter}:{port}", adapter):
        for have, seat in cables:
            if have == name:
                return seat
    return None


Flow = tuple[int, int, int]
"""One direction of one rail test: (rail, sending rank, receiving rank)."""


@dataclass(frozen=True)
class FabricLayout:
    """A description bound to a sweep's ranks."""

    description: FabricDescription
    seats: Mapping[tuple[int, int], Seat]
    """(rank, rail) -> seat, for every rail found."""
    unplaced: tuple[int, ...] = ()
    """Ranks with at least one rail not on the description."""
    _routes: dict[Flow, tuple[str, ...] | None] = field(
        default_factory=dict, compare=False, repr=False
    )

    @property
    def routing(self) -> str:
        return self.description.routing

    def seat(self, rank: int, rail: int) -> Seat | None:
        return self.seats.get((rank, rail))

    def place_key(self, rank: int) -> tuple[int, str, int, int]:
        """A rank's place in :meth:`leaf_order` (by its first rail's seat)."""
        s = self.seat(rank, 0)
        return (1, "", 0, rank) if s is None else (0, s.leaf, s.index, rank)

    def leaf_order(self, ranks: Iterable[int]) -> list[int]:
        """``ranks`` by where they sit: leaf by leaf (by name), each leaf's hosts in port order; the
        ranks not placed last, in rank order. A ring over this order crosses each leaf boundary once."""
        return sorted(ranks, key=self.place_key)

    def routed(self, flow: Flow) -> tuple[str, ...] | None:
        """The directed inter-switch links of a flow's route (``routes`` only; cached); None when unknown."""
        fn = self.description.route
        if fn is None:
            return None
        if flow not in self._routes:
            rail, src, dst = flow
            a, b = self.seat(src, rail), self.seat(dst, rail)
            self._routes[flow] = fn(a, b) if a is not None and b is not None else None
        return self._routes[flow]
