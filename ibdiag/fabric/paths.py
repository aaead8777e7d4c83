"""Where two host adapters meet on the fabric: each one's cable to its switch, and the ISLs between.

Without the subnet manager's routes (the switches' linear forwarding tables are not read) the ISL a
pair's traffic takes is not known; what is known is the set it is chosen from. A subnet manager's
routing engines for fat trees (minhop, updn, ftree) route over shortest paths, so the candidates are
the ISLs on any shortest path between the two switches, found from two breadth-first searches over
the active ISLs (the switch graph, :mod:`ibdiag.fabric.graph`). Each candidate ISL is grouped under its lower end, the switch whose
*uplink* it is: a pair from leaf A to leaf B crosses "any of 4 uplinks of leaf A" and "any of 4
uplinks of leaf B" (leaf B's uplinks carry it down). Only on a tree of tiers is there an up; on any
other shape (:mod:`ibdiag.fabric.shape`) the ISLs are not named, never guessed.

With the routes (``ibdiag fabric --routes``: each switch's unicast forwarding table) the path is exact,
on any shape: :meth:`Router.route` follows the tables from the first adapter's switch toward the
second adapter's port LID, hop by hop, over active ISLs, until the switch whose table sends that LID
out of the second adapter's cable. A missing table or entry, a port that is no active ISL, a loop or
more than :data:`MAX_ROUTE_HOPS` hops: no route, and why (the caller falls back to the candidates).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ibdiag.fabric.hosts import Names
from ibdiag.fabric.model import CA, Fabric, PortRef
from ibdiag.fabric.shape import SINGLE, TREE, Shape, host_links


@dataclass(frozen=True)
class Attachment:
    """A host adapter's port and the switch port its active cable goes to."""

    host: str
    adapter: str
    ca: str
    """The adapter's node GUID."""
    ca_port: int
    switch: str
    """The switch's GUID."""
    port: int

    @property
    def switch_port(self) -> PortRef:
        return PortRef(self.switch, self.port)


def attachments(fab: Fabric, names: Names) -> dict[tuple[str, str], list[Attachment]]:
    """(host, adapter) -> its ports with an active cable to a switch, by adapter port."""
    out: dict[tuple[str, str], list[Attachment]] = {}
    for sw, ports in host_links(fab).items():
        for p in ports:
            assert p.peer is not None
            h = names.host(p.peer.guid)
            if h is not None:
                att = Attachment(h.host, h.adapter, p.peer.guid, p.peer.port, sw, p.port)
                out.setdefault((h.host, h.adapter), []).append(att)
    for atts in out.values():
        atts.sort(key=lambda a: a.ca_port)
    return out


def known_adapters(fab: Fabric, names: Names) -> dict[tuple[str, str], str]:
    """(host, adapter) -> GUID of every adapter the fabric names, cabled and up or not."""
    out: dict[tuple[str, str], str] = {}
    for n in fab.nodes:
        h = names.host(n.guid) if n.kind == CA else None
        if h is not None:
            out.setdefault((h.host, h.adapter), n.guid)
    return out


@dataclass(frozen=True)
class Crossing:
    """The candidate ISLs between two switches: per switch whose uplinks they are, those ports."""

    hops: int
    """ISL hops on a shortest path (0: the same switch)."""
    uplinks: tuple[tuple[str, tuple[int, ...]], ...]
    """(switch GUID, its uplink ports any shortest path may take): the first switch's side upwards,
    then the second's downwards."""


#: ISL hops a followed route may take before it is called a loop or lost.
MAX_ROUTE_HOPS = 64

#: An ISL crossed by a route: the port it leaves by, the port it arrives at.
Crossed = tuple[PortRef, PortRef]


@dataclass
class Router:
    """Shortest-path ISL candidates over a fabric's switch graph (breadth-first searches cached per
    switch); with ``fabric`` holding routes, the exact ISLs of each route."""

    shape: Shape
    fabric: Fabric | None = None
    _dist: dict[str, dict[str, int]] = field(default_factory=dict)
    _cache: dict[tuple[str, str], Crossing | None] = field(default_factory=dict)

    @property
    def names_isls(self) -> bool:
        """The ISLs are named only on a tree of tiers (or a single switch, which has none)."""
        return self.shape.kind in (TREE, SINGLE)

    @property
    def routes_read(self) -> bool:
        return self.fabric is not None and bool(self.fabric.routes)

    def route(self, a: Attachment, b: Attachment) -> tuple[Crossed, ...] | str:
        """The ISLs the subnet manager's route from adapter ``a`` to adapter ``b`` crosses, in order;
        or why it cannot be followed (a text naming switches by GUID)."""
        fab = self.fabric
        if fab is None or not fab.routes:
            return "the routes were not read (ibdiag fabric --routes)"
        dest = fab.port(PortRef(b.ca, b.ca_port))
        dlid = dest.lid if dest is not None else None
        if not dlid:
            return f"the port LID of {b.ca} port {b.ca_port} is not known"
        cur, seen = a.switch, {a.switch}
        out: list[Crossed] = []
        for _ in range(MAX_ROUTE_HOPS + 1):
            table = fab.routes.get(cur)
            if table is None:
                return f"the forwarding table of {cur} was not read"
            port = table.get(dlid)
            if port is None:
                return f"the forwarding table of {cur} has no entry for LID {dlid}"
            if cur == b.switch and port == b.port:
                return tuple(out)
            p = fab.port(PortRef(cur, port))
            if p is None or p.peer is None or not fab.is_isl(p) or p.state not in (None, "Active"):
                return f"{cur} sends LID {dlid} out of port {port}, which is no active ISL"
            out.append((p.ref, p.peer))
            cur = p.peer.guid
            if cur in seen:
                return f"the route to LID {dlid} loops (back at {cur})"
            seen.add(cur)
        return f"the route to LID {dlid} is longer than {MAX_ROUTE_HOPS} ISL hops"

    def _from(self, s: str) -> dict[str, int]:
        if s not in self._dist:
            g = self.shape.graph
            self._dist[s] = g.distances_from(s) if g is not None else {s: 0}
        return self._dist[s]

    def between(self, a: str, b: str) -> Crossing | None:
        """The candidates from switch ``a`` to switch ``b``; None when no active ISL path joins them
        or the shape has no up (not a tree)."""
        if (a, b) not in self._cache:
            self._cache[(a, b)] = self._crossing(a, b)
        return self._cache[(a, b)]

    def _crossing(self, a: str, b: str) -> Crossing | None:
        if a == b:
            return Crossing(0, ())
        g, tiers = self.shape.graph, self.shape.tiers
        if self.shape.kind != TREE or g is None:
            return None
        da, db = self._from(a), self._from(b)
        if b not in da:
            return None
        total = da[b]
        levels: dict[int, list[str]] = {}
        for x, d in da.items():
            if x in db and d + db[x] == total:
                levels.setdefault(d, []).append(x)
        ups: dict[str, set[int]] = {}
        for d in range(total):
            for x in levels.get(d, ()):
                for y in levels.get(d + 1, ()):
                    for isl in g.between(x, y):
                        pa, pb = isl.ports
                        low = pa if tiers.get(pa.guid, 0) < tiers.get(pb.guid, 0) else pb
                        ups.setdefault(low.guid, set()).add(low.port)
        # a's side upwards, then b's side downwards
        order = sorted(ups, key=lambda s: (0, da[s], s) if da[s] <= db[s] else (1, -db[s], s))
        return Crossing(total, tuple((s, tuple(sorted(ups[s]))) for s in order))
