"""The switch graph: switches and their active inter-switch links, typed, over networkx.

This is the one module that imports networkx (the graph work — distances for the tiers, connected
parts, shortest paths between leaves, bisection as a maximum flow — is networkx's, not hand-written).
Its import costs 0.1-0.3 s; a live ``ibdiag fabric`` loads it while the infiniband-diags tools run
(``fabric/command.py``), so only ``--from`` pays it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field

import networkx as nx

from ibdiag.fabric.model import FabricPort


@dataclass(frozen=True)
class Isl:
    a: str
    b: str
    gbps: float
    ports: tuple[FabricPort, FabricPort]
    """The ends, ``a``'s first."""

    def other(self, s: str) -> str:
        return self.b if s == self.a else self.a

    def mine(self, s: str) -> FabricPort:
        return self.ports[0] if s == self.a else self.ports[1]


@dataclass(frozen=True)
class SwitchGraph:
    nodes: tuple[str, ...]
    """Switch GUIDs."""
    isls: tuple[Isl, ...] = ()
    _g: nx.MultiGraph = field(default_factory=nx.MultiGraph, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._g.add_nodes_from(self.nodes)
        for e in self.isls:
            self._g.add_edge(e.a, e.b, isl=e)

    def __contains__(self, s: object) -> bool:
        return s in self._g

    def edges_of(self, s: str) -> list[Isl]:
        """Every ISL of ``s`` (a cable twice between the same switches is two)."""
        if s not in self._g:
            return []
        return [data["isl"] for _a, _b, data in self._g.edges(s, data=True)]

    def between(self, x: str, y: str) -> list[Isl]:
        """The ISLs joining switches ``x`` and ``y``."""
        return [data["isl"] for data in (self._g.get_edge_data(x, y) or {}).values()]

    def neighbors(self, s: str) -> Iterator[str]:
        """The switches cabled to ``s``, each once."""
        return iter(self._g.neighbors(s)) if s in self._g else iter(())

    def degree(self, s: str) -> int:
        return int(self._g.degree(s)) if s in self._g else 0

    def distances(self, sources: Iterable[str]) -> dict[str, int]:
        """ISL hops from the nearest of ``sources``; unreachable switches are absent."""
        found = [s for s in sources if s in self._g]
        if not found:
            return {}
        return dict(nx.multi_source_dijkstra_path_length(self._g, found, weight=None))

    def distances_from(self, s: str) -> dict[str, int]:
        """ISL hops from ``s`` to every switch it reaches (``{s: 0}`` for a switch not in the graph)."""
        if s not in self._g:
            return {s: 0}
        return dict(nx.single_source_shortest_path_length(self._g, s))

    def components(self, within: Collection[str] | None = None) -> list[set[str]]:
        """The connected parts, each a set of switches; ``within``: of the subgraph of those switches
        (a three-tier tree's leaves and spines: its pods)."""
        g = self._g if within is None else self._g.subgraph(within)
        return [set(c) for c in nx.connected_components(g)]


def max_flow(cap: dict[str, dict[str, float]], source: str, sink: str) -> float:
    """The maximum flow from ``source`` to ``sink``; ``cap[x][y]`` the capacity of the arc x -> y."""
    d: nx.DiGraph = nx.DiGraph()
    d.add_nodes_from((source, sink))
    for x, ys in cap.items():
        for y, c in ys.items():
            d.add_edge(x, y, capacity=c)
    return float(nx.maximum_flow_value(d, source, sink))
