"""The fabric's shape from the graph alone: tiers (leaf, spine, core), oversubscription, bisection.

The switch graph is the active inter-switch links (:mod:`ibdiag.fabric.graph`, capacities in Gb/s at
each link's actual width and speed). A *leaf* is a switch with an active host link; every other switch's tier is
its distance from the nearest leaf (1 spine, 2 core). It is a *tree of tiers* when every ISL joins
adjacent tiers and every switch above the leaves has a link down to the tier below; otherwise the
shape is said (a single switch, a mesh with ISLs inside a tier, parts not connected), never guessed.

Oversubscription of a switch: its down capacity (host links for a leaf, links to the tier below
otherwise) over its up capacity (links to the tier above). The fabric's bisection bandwidth is the
maximum flow between two halves of the leaves (split in name order, host capacity balanced), each
half's hosts limited by their host links.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ibdiag.fabric.graph import Isl, SwitchGraph, max_flow
from ibdiag.fabric.model import SWITCH, Fabric, FabricPort

TIER_NAMES = ("leaf", "spine", "core")
TIER_PLURALS = ("leaves", "spines", "cores")

TREE = "tree"
SINGLE = "single-switch"
MESH = "mesh"
DISCONNECTED = "disconnected"
NO_SWITCH = "no-switch"


def tier_name(t: int) -> str:
    return TIER_NAMES[t] if t < len(TIER_NAMES) else f"tier{t}"


def tier_plural(t: int, n: int) -> str:
    if n == 1:
        return tier_name(t)
    return TIER_PLURALS[t] if t < len(TIER_PLURALS) else f"tier{t} switches"


def up(p: FabricPort) -> bool:
    """Active (or, in a bare topology dump, listed): the link carries traffic."""
    return p.peer is not None and p.state in ("Active", None)


@dataclass(frozen=True)
class SwitchLoad:
    guid: str
    tier: int
    hosts: int
    """Active host links."""
    down_gbps: float
    up_gbps: float
    uplinks: int
    slow_uplinks: tuple[FabricPort, ...] = ()
    """Uplinks narrower or slower than the switch's fastest uplink."""

    @property
    def ratio(self) -> float | None:
        """down : up (2.0 is 2:1); None when the switch has no uplink (the top tier) or carries nothing."""
        if self.up_gbps <= 0 or self.down_gbps <= 0:
            return None
        return self.down_gbps / self.up_gbps

    def to_json(self) -> dict[str, Any]:
        return {
            "guid": self.guid,
            "tier": tier_name(self.tier),
            "hosts": self.hosts,
            "down_gbps": self.down_gbps,
            "up_gbps": self.up_gbps,
            "uplinks": self.uplinks,
            "oversubscription": self.ratio,
        }


@dataclass(frozen=True)
class Shape:
    kind: str
    """``tree``, ``single-switch``, ``mesh``, ``disconnected`` or ``no-switch``."""
    tiers: dict[str, int]
    """Switch GUID -> tier (0 leaf); empty unless the distances could be taken."""
    text: str
    """What it is, in words (``two-tier fat tree: 4 leaves, 2 spines``)."""
    loads: tuple[SwitchLoad, ...] = ()
    """Per switch below the top tier (a tree only)."""
    bisection_gbps: float | None = None
    host_gbps: float = 0.0
    """The sum of active host-link rates."""
    odd: tuple[tuple[str, str], ...] = ()
    """ISLs that break the tiers (GUID pairs), for a mesh."""
    graph: SwitchGraph | None = field(default=None, compare=False, repr=False)

    @property
    def depth(self) -> int:
        return max(self.tiers.values(), default=-1) + 1

    def tier_ratio(self, tier: int) -> float | None:
        down = sum(x.down_gbps for x in self.loads if x.tier == tier)
        upc = sum(x.up_gbps for x in self.loads if x.tier == tier)
        return down / upc if upc > 0 and down > 0 else None

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "text": self.text,
            "tiers": {g: tier_name(t) for g, t in sorted(self.tiers.items())},
            "tier_oversubscription": {
                tier_name(t): self.tier_ratio(t) for t in range(max(self.depth - 1, 0))
            },
            "switches": [x.to_json() for x in self.loads],
            "bisection_gbps": self.bisection_gbps,
            "host_gbps": self.host_gbps,
        }


def switch_graph(fab: Fabric) -> SwitchGraph:
    """Switches and their active ISLs (one edge per cable, ``gbps`` its rate, ``ports`` both ends)."""
    isls = tuple(
        Isl(a.guid, b.guid, a.rate_gbps or 0.0, (a, b))
        for a, b in fab.links()
        if b is not None and fab.is_isl(a) and up(a) and up(b)
    )
    return SwitchGraph(tuple(n.guid for n in fab.nodes if n.kind == SWITCH), isls)


def host_links(fab: Fabric) -> dict[str, list[FabricPort]]:
    """Switch GUID -> its ports with an active host link."""
    out: dict[str, list[FabricPort]] = {}
    for p in fab.ports:
        node = fab.node(p.guid)
        if node is None or node.kind != SWITCH or not up(p) or fab.is_isl(p):
            continue
        far = fab.port(p.peer) if p.peer else None
        if far is not None and not up(far):
            continue
        out.setdefault(p.guid, []).append(p)
    return out


def _names(fab: Fabric, guids: Iterable[str]) -> list[str]:
    return sorted((fab.node(g).desc if fab.node(g) else g) or g for g in guids)  # type: ignore[union-attr]


def shape(fab: Fabric) -> Shape:
    g = switch_graph(fab)
    hosts = host_links(fab)
    host_gbps = sum(p.rate_gbps or 0.0 for ports in hosts.values() for p in ports)
    if not g.nodes:
        return Shape(NO_SWITCH, {}, "no switch: adapters cabled back to back", host_gbps=host_gbps)
    if len(g.nodes) == 1:
        (only,) = g.nodes
        return Shape(
            SINGLE,
            {only: 0},
            f"a single switch ({_names(fab, [only])[0]}): no tiers, no oversubscription",
            host_gbps=host_gbps,
            graph=g,
        )
    parts = g.components()
    if len(parts) > 1:
        sizes = ", ".join(str(len(c)) for c in sorted(parts, key=len, reverse=True))
        return Shape(
            DISCONNECTED,
            {},
            f"not connected: {len(parts)} groups of switches ({sizes}) with no active ISL between them",
            host_gbps=host_gbps,
            graph=g,
        )
    leaves = [s for s in g.nodes if s in hosts]
    if not leaves:
        return Shape(MESH, {}, "no switch has a host link: tiers cannot be told", graph=g)
    tiers, odd = _tiers(g, leaves)
    stray: list[str] = []
    if odd:
        # A switch above the leaves with a host or two of its own (an SM or UFM server on a spine):
        # every switch it is cabled to has hosts, and it has more ISLs than host links.
        stray = [
            s
            for s in leaves
            if g.degree(s) >= 2
            and all(n in hosts for n in g.neighbors(s))
            and len(hosts[s]) < g.degree(s)
        ]
        if stray and len(stray) < len(leaves):
            again = _tiers(g, [s for s in leaves if s not in stray])
            if not again[1]:
                tiers, odd = again
        if odd:
            stray = []
    if odd:
        pairs = [" — ".join(_names(fab, pair)) for pair in odd[:4]]
        return Shape(
            MESH,
            tiers,
            f"not a tree of tiers: {len(odd)} ISL(s) join switches of the same tier ({'; '.join(pairs)})"
            + ": switches cabled to each other, a mesh or dragonfly-like",
            host_gbps=host_gbps,
            odd=odd,
            graph=g,
        )
    loads = tuple(_load(fab, g, tiers, hosts, s) for s in sorted(tiers) if _has_up(g, tiers, s))
    counts = [sum(1 for t in tiers.values() if t == k) for k in range(max(tiers.values()) + 1)]
    words = {2: "two-tier fat tree", 3: "three-tier fat tree"}.get(
        len(counts), f"{len(counts)}-tier tree"
    )
    text = f"{words}: " + ", ".join(f"{n} {tier_plural(t, n)}" for t, n in enumerate(counts))
    if stray:
        text += "; " + ", ".join(
            f"{name} ({tier_name(tiers[s])}) also has {len(hosts[s])} host link(s)"
            for s, name in sorted((s, _names(fab, [s])[0]) for s in stray)
        )
    return Shape(
        TREE,
        tiers,
        text,
        loads,
        bisection(g, tiers, hosts, fab, loads),
        host_gbps,
        graph=g,
    )


def _tiers(g: SwitchGraph, leaves: list[str]) -> tuple[dict[str, int], tuple[tuple[str, str], ...]]:
    """Each switch's distance from the nearest leaf (breadth first), and the ISLs inside a tier."""
    tiers = g.distances(sorted(leaves))
    odd = tuple(
        sorted({(min(e.a, e.b), max(e.a, e.b)) for e in g.isls if tiers[e.a] == tiers[e.b]})
    )
    return tiers, odd


def _has_up(g: SwitchGraph, tiers: dict[str, int], s: str) -> bool:
    return any(tiers[n] > tiers[s] for n in g.neighbors(s))


def _load(
    fab: Fabric,
    g: SwitchGraph,
    tiers: dict[str, int],
    hosts: dict[str, list[FabricPort]],
    s: str,
) -> SwitchLoad:
    t = tiers[s]
    ups: list[FabricPort] = []
    down = 0.0
    for e in g.edges_of(s):
        b = e.other(s)
        if tiers[b] > t:
            ups.append(e.mine(s))
        elif tiers[b] < t:
            down += e.gbps
    if t == 0:
        down = sum(p.rate_gbps or 0.0 for p in hosts.get(s, []))
    best = max((p.rate_gbps or 0.0 for p in ups), default=0.0)
    slow = tuple(p for p in ups if (p.rate_gbps or 0.0) < best)
    return SwitchLoad(
        s,
        t,
        len(hosts.get(s, [])),
        down,
        sum(p.rate_gbps or 0.0 for p in ups),
        len(ups),
        slow,
    )


def bisection(
    g: SwitchGraph,
    tiers: dict[str, int],
    hosts: dict[str, list[FabricPort]],
    fab: Fabric,
    loads: tuple[SwitchLoad, ...] = (),
) -> float | None:
    """Max flow (Gb/s, one direction) from one half of the leaves' hosts to the other's: the least of
    two leaf-aligned splits, each where the host capacity is halved along an order of the leaves: name
    order, and weakest first (pods, for three tiers, by their spines' uplinks to the cores, kept together;
    leaves by their uplinks)."""
    name = {s: (fab.node(s).desc if fab.node(s) else "") or s for s in tiers}  # type: ignore[union-attr]
    leaves = sorted((s for s, t in tiers.items() if t == 0), key=lambda s: (name[s], s))
    if len(leaves) < 2:
        return None
    cap = {s: sum(p.rate_gbps or 0.0 for p in hosts.get(s, [])) for s in leaves}
    up = {x.guid: x.up_gbps for x in loads}
    pod_of: dict[str, tuple[float, str]] = {}
    for part in g.components(within=[s for s, t in tiers.items() if t <= 1]):
        spines = [s for s in part if tiers[s] == 1]
        key = (sum(up.get(s, 0.0) for s in spines), min(name[s] for s in part))
        pod_of.update(dict.fromkeys(part, key if max(tiers.values()) >= 2 else (0.0, "")))
    weakest = sorted(leaves, key=lambda s: (pod_of.get(s, (0.0, "")), up.get(s, 0.0), name[s], s))
    flows = []
    seen: set[frozenset[str]] = set()
    for order in (leaves, weakest):
        half = _half(order, cap)
        if half not in seen and frozenset(leaves) - half not in seen:
            seen.add(half)
            flows.append(_flow(g, leaves, half, cap))
    return min(flows)


def _half(order: list[str], cap: dict[str, float]) -> frozenset[str]:
    """The first leaves of ``order`` up to half the host capacity."""
    total, acc = sum(cap.values()), 0.0
    half: list[str] = []
    for s in order:
        if acc + cap[s] / 2 > total / 2 and half:
            break
        half.append(s)
        acc += cap[s]
    return frozenset(half)


def _flow(g: SwitchGraph, leaves: list[str], half: frozenset[str], cap: dict[str, float]) -> float:
    arcs: dict[str, dict[str, float]] = {"<src>": {}}
    for e in g.isls:
        for x, y in ((e.a, e.b), (e.b, e.a)):
            arcs.setdefault(x, {})[y] = arcs.get(x, {}).get(y, 0.0) + e.gbps
    for s in leaves:
        if s in half:
            arcs["<src>"][s] = cap[s]
        else:
            arcs.setdefault(s, {})["<sink>"] = cap[s]
    return max_flow(arcs, "<src>", "<sink>")
