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
from dataclasses import dataclass, field, replace
from typing import Any

from ibdiag.fabric.chassis import Chassis, chassis, chassis_of
from ibdiag.fabric.devices import is_aggregation_node
from ibdiag.fabric.graph import SwitchGraph, new_isl
from ibdiag.fabric.model import SWITCH, Fabric, FabricPort
from ibdiag.fabric.naming import labels
from ibdiag.fabric.tiers import Tiering, tiering

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
    up_to: tuple[int, ...] = ()
    """Its uplinks per switch above it (how many cables to each)."""

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
    empty: tuple[str, ...] = ()
    """Leaves without a host yet (placed by their uplinks)."""
    boxes: tuple[Chassis, ...] = ()
    """Directors: switch chips in one chassis."""

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
            # Not a tree: a switch with hosts is a leaf, any other's tier is unknown (never invented).
            "tiers": {
                g: tier_name(t) if self.kind in (TREE, SINGLE) or t == 0 else "unknown"
                for g, t in sorted(self.tiers.items())
            },
            "tier_oversubscription": {
                tier_name(t): self.tier_ratio(t) for t in range(max(self.depth - 1, 0))
            },
            "switches": [x.to_json() for x in self.loads],
            "bisection_gbps": self.bisection_gbps,
            "host_gbps": self.host_gbps,
            "empty_leaves": list(self.empty),
            "chassis": [c.to_json() for c in self.boxes],
        }


def switch_graph(fab: Fabric) -> SwitchGraph:
    """Switches and their active ISLs (one edge per cable, ``gbps`` its rate, ``ports`` both ends); a
    cable from a switch to itself is no ISL (:func:`loopbacks`)."""
    live = ("Active", None)
    isls = []
    for a, b in fab.links():
        if b is None or a.guid == b.guid or not fab.is_isl(a):
            continue
        if a.state in live and b.state in live and b.peer is not None:
            isls.append(new_isl(a.guid, b.guid, a.rate_gbps or 0.0, (a, b)))
    return SwitchGraph(tuple(n.guid for n in fab.nodes if n.kind == SWITCH), tuple(isls))


def loopbacks(fab: Fabric) -> list[tuple[FabricPort, FabricPort]]:
    """Cables from one port of a switch to another port of the same switch (both ends listed).
    Found once per fabric (the check and the document both ask)."""
    kept = fab.memo.get("loopbacks")
    if kept is None:
        kept = fab.memo["loopbacks"] = tuple(
            (a, b)
            for a, b in fab.links()
            if b is not None and a.guid == b.guid and fab.node(a.guid) is not None
        )
    return list(kept)


def host_links(fab: Fabric) -> dict[str, list[FabricPort]]:
    """Switch GUID -> its ports with an active host link (a SHARP Aggregation Node is no host).
    Computed once per fabric (shape, rails and the checks all ask)."""
    kept = fab.memo.get("host_links")
    if kept is not None:
        return {k: list(v) for k, v in kept.items()}
    out: dict[str, list[FabricPort]] = {}
    for p in fab.ports:
        peer = p.peer
        if (
            peer is None
            or not fab.is_switch(p.guid)
            or fab.is_switch(peer.guid)  # an ISL
            or p.state not in ("Active", None)
        ):
            continue
        far_node = fab.node(peer.guid)
        if far_node is None or far_node.kind == SWITCH or is_aggregation_node(far_node):
            continue
        far = fab.port(peer)
        if far is not None and not up(far):
            continue
        out.setdefault(p.guid, []).append(p)
    fab.memo["host_links"] = {k: tuple(v) for k, v in out.items()}
    return out


def _names(fab: Fabric, guids: Iterable[str]) -> list[str]:
    shown, _ = labels(fab, {})
    return sorted(shown.get(g, g) for g in guids)


def _plain(
    fab: Fabric, g: SwitchGraph, hosts: dict[str, list[FabricPort]], host_gbps: float
) -> Shape | None:
    """The shapes that have no tiers: no switch, one switch, parts not connected."""
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
    if not any(s in hosts for s in g.nodes):
        return Shape(MESH, {}, "no switch has a host link: tiers cannot be told", graph=g)
    return None


def shape(fab: Fabric) -> Shape:
    g = switch_graph(fab)
    hosts = host_links(fab)
    host_gbps = sum(p.rate_gbps or 0.0 for ports in hosts.values() for p in ports)
    boxes = chassis(fab)
    plain = _plain(fab, g, hosts, host_gbps)
    if plain is not None:
        return replace(plain, boxes=boxes)
    t = tiering(g, hosts, chassis_of(boxes))
    assert t is not None
    tiers, odd = t.tiers, t.odd
    if odd:
        pairs = [" — ".join(_names(fab, pair)) for pair in odd[:4]]
        return Shape(
            MESH,
            tiers,
            f"not a tree of tiers: {len(odd)} ISL(s) join switches of the same tier ({'; '.join(pairs)})"
            + ": leaves cabled to each other, a switch hung below a leaf, or a mesh or dragonfly-like design",
            host_gbps=host_gbps,
            odd=odd,
            graph=g,
            boxes=boxes,
        )
    loads = tuple(_load(fab, g, tiers, hosts, s) for s in sorted(tiers) if _has_up(g, tiers, s))
    return Shape(
        TREE,
        tiers,
        _tree_text(fab, t, hosts, boxes),
        loads,
        bisection(g, tiers, hosts, fab, loads),
        host_gbps,
        graph=g,
        empty=t.empty,
        boxes=boxes,
    )


def _tree_text(
    fab: Fabric, t: Tiering, hosts: dict[str, list[FabricPort]], boxes: tuple[Chassis, ...]
) -> str:
    tiers = t.tiers
    counts = [sum(1 for x in tiers.values() if x == k) for k in range(max(tiers.values()) + 1)]
    words = {2: "two-tier fat tree", 3: "three-tier fat tree"}.get(
        len(counts), f"{len(counts)}-tier tree"
    )
    text = f"{words}: " + ", ".join(f"{n} {tier_plural(k, n)}" for k, n in enumerate(counts))
    if t.empty:
        have = "has" if len(t.empty) == 1 else "have"
        text += f" ({len(t.empty)} of the leaves {have} no host yet)"
    if t.stray:
        text += "; " + ", ".join(
            f"{name} ({tier_name(tiers[s])}) also has {len(hosts[s])} host link(s)"
            for s, name in sorted((s, _names(fab, [s])[0]) for s in t.stray)
        )
    said = [director_text(c, tiers) for c in boxes]
    if said:
        text += "; " + "; ".join(said)
    return text


def director_text(c: Chassis, tiers: dict[str, int]) -> str:
    """``director dir1 (MCS8500, 6 chips): line chips are spines, spine chips are cores``."""
    by_kind: dict[str, set[str]] = {}
    for g in c.members:
        if g in tiers:
            by_kind.setdefault(c.kind(g), set()).add(tier_plural(tiers[g], 2))
    parts = [
        f"{kind} chips are {' and '.join(sorted(ts))}"
        for kind, ts in sorted(
            by_kind.items(), key=lambda kv: ("line", "spine", "chip").index(kv[0])
        )
    ]
    model = f"{c.model}, " if c.model else ""
    return f"director {c.name} ({model}{len(c.members)} chips): " + (
        ", ".join(parts) if parts else "not in the tree"
    )


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
    to: dict[str, int] = {}  # uplinks per switch above
    for b, es in g.adjacent(s):
        tb = tiers[b]
        if tb > t:
            for e in es:
                ups.append(e.ports[0] if s == e.a else e.ports[1])
            to[b] = len(es)
        elif tb < t:
            for e in es:
                down += e.gbps
    if t == 0:
        down = sum(p.rate_gbps or 0.0 for p in hosts.get(s, []))
    rates = [p.rate_gbps or 0.0 for p in ups]
    best = max(rates, default=0.0)
    slow = tuple(p for p, r in zip(ups, rates, strict=True) if r < best)
    return SwitchLoad(
        s, t, len(hosts.get(s, [])), down, sum(rates), len(ups), slow, tuple(sorted(to.values()))
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
    supply = {s: cap[s] for s in leaves if s in half}
    demand = {s: cap[s] for s in leaves if s not in half}
    return g.max_flow(supply, demand)
