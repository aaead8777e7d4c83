"""The switch graph: switches and their active inter-switch links, typed; and maximum flow.

The graph is an adjacency map built once (switch -> neighbour -> the ISLs between them, in cabling
order), walked by breadth-first search for the tiers' distances, the connected parts and the
shortest paths between leaves: a few lines each, where building a networkx graph of a 50k-link
fabric and importing networkx cost more than the judgement itself (issue 39). Orders are networkx's
(a neighbour where its first ISL was added; distances in breadth-first order), so what is derived
from them reads as it did.

Maximum flow (the bisection) runs here on integer capacities — every link rate at 4x or 2x SDR to
XDR, 1x of the same, is a whole number of Gb/s — by Dinic's blocking flows, exactly, on the network
folded by its twins (:func:`fold`: a regular tree's switches of one level become one node). A capacity
that is not a whole number (FDR's 13.64 Gb/s lanes) goes to networkx's preflow-push as before: its
floating-point sums are networkx's. networkx (the ``[fabric]`` extra) is therefore still needed and
its presence is checked when this module loads; it is imported only for such a flow.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Collection, ItemsView, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ibdiag.errors import missing_extra
from ibdiag.fabric.model import FabricPort

if (
    importlib.util.find_spec("networkx") is None
):  # the [fabric] extra: a node may install without it
    raise missing_extra("networkx", "ibdiag fabric (and verdict or report --fabric)")


class Isl(NamedTuple):
    """An active inter-switch link: its two switches, its rate and its two ports. A named tuple, as
    :class:`~ibdiag.fabric.model.PortRef` is: made in C (:func:`new_isl`), one per ISL, 50k on a
    16k-GPU fabric."""

    a: str
    b: str
    gbps: float
    ports: tuple[FabricPort, FabricPort]
    """The ends, ``a``'s first."""

    def other(self, s: str) -> str:
        return self.b if s == self.a else self.a

    def mine(self, s: str) -> FabricPort:
        return self.ports[0] if s == self.a else self.ports[1]


_tuple_new = tuple.__new__


def new_isl(a: str, b: str, gbps: float, ports: tuple[FabricPort, FabricPort]) -> Isl:
    """``Isl(a, b, gbps, ports)`` without the named tuple's Python-level ``__new__``."""
    return _tuple_new(Isl, (a, b, gbps, ports))


@dataclass(frozen=True)
class SwitchGraph:
    nodes: tuple[str, ...]
    """Switch GUIDs."""
    isls: tuple[Isl, ...] = ()
    _adj: dict[str, dict[str, list[Isl]]] = field(default_factory=dict, compare=False, repr=False)
    _memo: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        adj = self._adj
        for s in self.nodes:
            adj.setdefault(s, {})
        for e in self.isls:
            adj.setdefault(e.a, {}).setdefault(e.b, []).append(e)
            if e.b != e.a:
                adj.setdefault(e.b, {}).setdefault(e.a, []).append(e)

    def __contains__(self, s: object) -> bool:
        return s in self._adj

    def edges_of(self, s: str) -> list[Isl]:
        """Every ISL of ``s`` (a cable twice between the same switches is two), neighbour by neighbour."""
        return [e for es in self._adj.get(s, {}).values() for e in es]

    def adjacent(self, s: str) -> ItemsView[str, list[Isl]]:
        """``s``'s neighbours, each with the ISLs to it (in cabling order), neighbour by neighbour."""
        return self._adj.get(s, {}).items()

    def between(self, x: str, y: str) -> list[Isl]:
        """The ISLs joining switches ``x`` and ``y``."""
        return list(self._adj.get(x, {}).get(y, ()))

    def neighbors(self, s: str) -> Iterator[str]:
        """The switches cabled to ``s``, each once."""
        return iter(self._adj.get(s, {}))

    def degree(self, s: str) -> int:
        return sum(len(es) for es in self._adj.get(s, {}).values())

    def distances(self, sources: Iterable[str]) -> dict[str, int]:
        """ISL hops from the nearest of ``sources``; unreachable switches are absent."""
        dist: dict[str, int] = {}
        for s in sources:
            if s in self._adj and s not in dist:
                dist[s] = 0
        return self._bfs(dist)

    def distances_from(self, s: str) -> dict[str, int]:
        """ISL hops from ``s`` to every switch it reaches (``{s: 0}`` for a switch not in the graph)."""
        if s not in self._adj:
            return {s: 0}
        return self._bfs({s: 0})

    def _bfs(self, dist: dict[str, int]) -> dict[str, int]:
        adj = self._adj
        queue = list(dist)
        for u in queue:  # the list grows as the search reaches further
            d = dist[u] + 1
            for v in adj[u]:
                if v not in dist:
                    dist[v] = d
                    queue.append(v)
        return dist

    def components(self, within: Collection[str] | None = None) -> list[set[str]]:
        """The connected parts, each a set of switches; ``within``: of the subgraph of those switches
        (a three-tier tree's leaves and spines: its pods)."""
        keep = set(self._adj) if within is None else {s for s in within if s in self._adj}
        seen: set[str] = set()
        parts: list[set[str]] = []
        for s in self._adj:
            if s not in keep or s in seen:
                continue
            part = {s}
            queue = [s]
            for u in queue:
                for v in self._adj[u]:
                    if v in keep and v not in part:
                        part.add(v)
                        queue.append(v)
            seen |= part
            parts.append(part)
        return parts

    def max_flow(self, supply: dict[str, float], demand: dict[str, float]) -> float:
        """The maximum flow (Gb/s) into the switches of ``supply`` (each at most its value, from
        outside: its hosts) and out of those of ``demand``, over the ISLs in both directions. On whole
        numbers the network is first folded by its symmetry (:func:`fold`): a tree's switches of one
        level that are cabled alike are one node, so a regular fat tree's flow is worked on its levels
        (issue 39), and exactly."""
        whole = self._caps()
        if (
            whole is None
            or not all(
                float(c).is_integer() and c >= 0 for c in (*supply.values(), *demand.values())
            )
            or not all(s in self._adj for s in (*supply, *demand))
        ):
            return max_flow(self._arcs(supply, demand), "<src>", "<sink>")
        caps: Caps = dict(whole)  # type: ignore[arg-type]
        ends: Ends = {s: (int(supply.get(s, 0)), int(demand.get(s, 0))) for s in whole}
        alike: dict[Any, int] | None = self._alike()
        while True:
            folded, folded_ends = fold(caps, ends, alike)
            alike = None  # the folded network's own, from here
            if len(folded) == len(caps):
                break
            caps, ends = folded, folded_ends
        net = _Network()
        src, sink = net.node("<src>"), net.node("<sink>")
        index = {x: net.node(f"{i}") for i, x in enumerate(caps)}
        for x, ys in caps.items():
            for y, c in ys.items():
                net.arc(index[x], index[y], c)
        for x, (into, out) in ends.items():
            if into:
                net.arc(src, index[x], into)
            if out:
                net.arc(index[x], sink, out)
        return float(net.flow(src, sink, net.res[:]))

    def _alike(self) -> dict[str, int]:
        """Switch -> a number shared by the switches whose capacity to every other is the same (the
        first step of :func:`fold`, whatever the split: kept for the graph's two flows)."""
        if "alike" not in self._memo:
            classes: dict[frozenset[tuple[str, int]], int] = {}
            self._memo["alike"] = {
                s: classes.setdefault(frozenset(ys.items()), len(classes))
                for s, ys in (self._caps() or {}).items()
            }
        alike: dict[str, int] = self._memo["alike"]
        return alike

    def _caps(self) -> dict[str, dict[str, int]] | None:
        """Switch -> neighbour -> the whole-number capacity of the ISLs between them (a cable from a
        switch to itself carries no flow); None where a rate is not a whole number of Gb/s. Built once
        per graph."""
        if "caps" not in self._memo:
            whole = all(float(e.gbps).is_integer() and e.gbps >= 0 for e in self.isls)
            self._memo["caps"] = (
                {
                    s: {
                        t: int(es[0].gbps if len(es) == 1 else sum(e.gbps for e in es))
                        for t, es in ns.items()
                        if t != s
                    }
                    for s, ns in self._adj.items()
                }
                if whole
                else None
            )
        caps: dict[str, dict[str, int]] | None = self._memo["caps"]
        return caps

    def _arcs(
        self, supply: dict[str, float], demand: dict[str, float]
    ) -> dict[str, dict[str, float]]:
        """The flow problem as arcs, in the order networkx was always given them (its floating-point
        sums follow that order)."""
        arcs: dict[str, dict[str, float]] = {"<src>": {}}
        for e in self.isls:
            for x, y in ((e.a, e.b), (e.b, e.a)):
                arcs.setdefault(x, {})[y] = arcs.get(x, {}).get(y, 0.0) + e.gbps
        arcs["<src>"].update(supply)
        for s, c in demand.items():
            arcs.setdefault(s, {})["<sink>"] = c
        return arcs


Caps = dict[object, dict[object, int]]
Ends = dict[object, tuple[int, int]]


def fold(caps: Caps, ends: Ends, alike: dict[Any, int] | None = None) -> tuple[Caps, Ends]:
    """The flow network with *twins* merged: nodes with the same capacity to every other node and the
    same supply and demand (a fat tree's cores of one group, a pod's spines, the leaves of one rail on
    one side of the cut) become one node with their capacities summed. Its maximum flow is the
    network's: a flow of the network sums to one of the folded, and a flow of the folded, shared out
    evenly among the twins, is one of the network (twins are never cabled to each other; each carries
    its share of every arc, within its capacity, and what enters it leaves it). The capacities stay
    whole numbers, so the value is exactly the same number. ``caps``: node -> neighbour -> capacity
    (both directions listed); ``ends``: node -> (supply, demand); ``alike``: node -> a number that is
    the same for two nodes exactly when their capacities are (:meth:`SwitchGraph._alike`, kept for
    the graph), else worked out here."""
    groups: dict[tuple[object, tuple[int, int]], list[object]] = {}
    if alike is None:
        for x, ys in caps.items():
            groups.setdefault((frozenset(ys.items()), ends[x]), []).append(x)
    else:
        for x in caps:
            groups.setdefault((alike[x], ends[x]), []).append(x)
    if len(groups) == len(caps):
        return caps, ends
    of: dict[object, int] = {}
    for i, members in enumerate(groups.values()):
        for x in members:
            of[x] = i
    out: Caps = {}
    out_ends: Ends = {}
    for i, ((_sig, (into, leave)), members) in enumerate(groups.items()):
        k = len(members)
        row: dict[object, int] = {}
        for y, c in caps[members[0]].items():
            j = of[y]
            if j != i:
                row[j] = row.get(j, 0) + k * c
        out[i] = row
        out_ends[i] = (k * into, k * leave)
    return out, out_ends


def max_flow(cap: dict[str, dict[str, float]], source: str, sink: str) -> float:
    """The maximum flow from ``source`` to ``sink``; ``cap[x][y]`` the capacity of the arc x -> y."""
    if all(float(c).is_integer() and c >= 0 for ys in cap.values() for c in ys.values()):
        net = _Network()
        for x, ys in cap.items():
            for y, c in ys.items():
                net.arc(net.node(x), net.node(y), int(c))
        return float(net.flow(net.node(source), net.node(sink), net.res[:]))
    # lazy: networkx (0.1-0.3 s to import) for a fabric with rates of fractional Gb/s only
    import networkx as nx

    d: nx.DiGraph = nx.DiGraph()
    d.add_nodes_from((source, sink))
    for x, ys in cap.items():
        for y, c in ys.items():
            d.add_edge(x, y, capacity=c)
    return float(nx.maximum_flow_value(d, source, sink))


class _Network:
    """A flow network of whole-number capacities for Dinic's algorithm: an arc and its opposite share
    one residual pair (arc ``e`` and ``e ^ 1``)."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.adj: list[list[int]] = []
        self.to: list[int] = []
        self.res: list[int] = []
        self._pair: dict[tuple[int, int], int] = {}

    def node(self, name: str) -> int:
        i = self.index.get(name)
        if i is None:
            i = self.index[name] = len(self.adj)
            self.adj.append([])
        return i

    def arc(self, u: int, v: int, c: int) -> int:
        """Add capacity ``c`` from ``u`` to ``v``; the arc's index."""
        e = self._pair.get((v, u))
        if e is not None:  # the opposite arc exists: its residual twin carries this capacity
            self.res[e ^ 1] += c
            return e ^ 1
        e = self._pair.get((u, v))
        if e is not None:
            self.res[e] += c
            return e
        e = len(self.to)
        self._pair[(u, v)] = e
        self.to += (v, u)
        self.res += (c, 0)
        self.adj[u].append(e)
        self.adj[v].append(e ^ 1)
        return e

    def flow(self, s: int, t: int, res: list[int]) -> int:
        """Dinic's algorithm over residual capacities ``res`` (changed in place): breadth-first
        levels, then blocking flows along them, until ``t`` is out of reach."""
        total = 0
        while True:
            level = _levels(self.adj, self.to, res, s, t)
            if level[t] < 0:
                return total
            total += _blocking(self.adj, self.to, res, level, s, t)


def _levels(adj: list[list[int]], to: list[int], res: list[int], s: int, t: int) -> list[int]:
    level = [-1] * len(adj)
    level[s] = 0
    queue = [s]
    for u in queue:
        if u == t:
            break
        d = level[u] + 1
        for e in adj[u]:
            v = to[e]
            if res[e] > 0 and level[v] < 0:
                level[v] = d
                queue.append(v)
    return level


def _blocking(
    adj: list[list[int]], to: list[int], res: list[int], level: list[int], s: int, t: int
) -> int:
    """Augment along the level graph until no path is left in it (each arc tried once per phase)."""
    nxt = [0] * len(adj)
    pushed = 0
    path: list[int] = []
    u = s
    while True:
        if u == t:
            f = min(res[e] for e in path)
            for e in path:
                res[e] -= f
                res[e ^ 1] += f
            pushed += f
            # back to the tail of the first arc the augmentation saturated
            k = next(i for i, e in enumerate(path) if res[e] == 0)
            del path[k:]
            u = to[path[-1]] if path else s
            continue
        edges, i, want = adj[u], nxt[u], level[u] + 1
        while i < len(edges):
            e = edges[i]
            if res[e] > 0 and level[to[e]] == want:
                break
            i += 1
        nxt[u] = i
        if i < len(edges):
            path.append(edges[i])
            u = to[edges[i]]
            continue
        if u == s:
            return pushed
        level[u] = -1  # a dead end for the rest of this phase
        e = path.pop()
        u = to[e ^ 1]
        nxt[u] += 1
