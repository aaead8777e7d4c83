"""The switch graph: switches and their active inter-switch links, and the three passes the shape needs.

A fabric has tens to a few hundred switches, so breadth-first search (tiers, connected parts) and
Edmonds-Karp maximum flow (bisection) on its adjacency take milliseconds; networkx would cost more to
import (0.1-0.3 s) than the work itself. ``tests/fabric/test_graph.py`` checks both against networkx.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field

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
    _adj: dict[str, list[Isl]] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._adj.update({s: [] for s in self.nodes})
        for e in self.isls:
            self._adj[e.a].append(e)
            if e.b != e.a:
                self._adj[e.b].append(e)

    def edges_of(self, s: str) -> list[Isl]:
        """Every ISL of ``s`` (a cable twice between the same switches is two)."""
        return self._adj.get(s, [])

    def neighbors(self, s: str) -> Iterator[str]:
        """The switches cabled to ``s``, each once."""
        return iter(dict.fromkeys(e.other(s) for e in self._adj.get(s, [])))

    def degree(self, s: str) -> int:
        return len(self._adj.get(s, []))

    def distances(self, sources: Iterable[str]) -> dict[str, int]:
        """ISL hops from the nearest of ``sources`` (breadth first); unreachable switches are absent."""
        dist = dict.fromkeys(sources, 0)
        queue = deque(dist)
        while queue:
            s = queue.popleft()
            for n in self.neighbors(s):
                if n not in dist:
                    dist[n] = dist[s] + 1
                    queue.append(n)
        return dist

    def components(self, within: Collection[str] | None = None) -> list[set[str]]:
        """The connected parts, each a set of switches; ``within``: of the subgraph of those switches
        (a three-tier tree's leaves and spines: its pods)."""
        keep = set(self.nodes) if within is None else set(within)
        seen: set[str] = set()
        parts: list[set[str]] = []
        for s in self.nodes:
            if s in seen or s not in keep:
                continue
            part, stack = {s}, [s]
            while stack:
                for n in self.neighbors(stack.pop()):
                    if n in keep and n not in part:
                        part.add(n)
                        stack.append(n)
            seen |= part
            parts.append(part)
        return parts


def max_flow(cap: dict[str, dict[str, float]], source: str, sink: str) -> float:
    """The maximum flow from ``source`` to ``sink`` (Edmonds-Karp: shortest augmenting paths);
    ``cap[x][y]`` the capacity of the arc x -> y."""
    res: dict[str, dict[str, float]] = {x: dict(ys) for x, ys in cap.items()}
    for x, ys in cap.items():
        for y in ys:
            res.setdefault(y, {}).setdefault(x, 0.0)
    total = 0.0
    while True:
        parent = {source: source}
        queue = deque([source])
        while queue and sink not in parent:
            x = queue.popleft()
            for y, c in res[x].items():
                if c > 1e-9 and y not in parent:
                    parent[y] = x
                    queue.append(y)
        if sink not in parent:
            return total
        path, y = [], sink
        while y != source:
            path.append((parent[y], y))
            y = parent[y]
        push = min(res[x][y] for x, y in path)
        for x, y in path:
            res[x][y] -= push
            res[y][x] += push
        total += push
