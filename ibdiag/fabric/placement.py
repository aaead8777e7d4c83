"""Where a job landed on the fabric, and what that lets its collectives reach.

The job's hosts, in rank order (one entry per node; ranks inside a node talk over NVLink), each with
an adapter per rail on some leaf. Per rail r and algorithm, the traffic that leaves each leaf through
its uplinks is counted in units of ``b``, the busbw one rail carries (nccl-tests' busbw: the rate each
node puts on its rail's wire for ring and tree):

* **ring** (rank order): each ring edge ``i -> i+1`` (and the last back to the first) carries ``b``;
  an edge whose ends sit on different leaves leaves one leaf: ``+1`` for it.
* **tree** (NCCL's double binary tree over the nodes, :func:`double_tree`): each tree carries half
  the data, up and down, so an edge carries ``n / (4 (n-1))`` x ``b`` each way; a crossing edge
  loads both leaves' uplinks that much.
* **all-to-all** (MoE): a node spreads ``b`` evenly over the ``n-1`` others, so a leaf with ``k`` of the
  ``n`` nodes sends ``k (n-k) / (n-1)`` x ``b`` off the leaf.

Rails that share a leaf (a fabric that is not rail-optimised) add up on its uplinks.

Three tiers: a *pod* is a group of leaves and the spines joined to them below the cores. Traffic between
pods leaves its pod through the spines' uplinks to the cores: the same three counts per pod (a ring edge
whose ends are in different pods, ...) give the pod's load, summed over the rails, shared among its spines
as the leaves reach them (in proportion to each spine's capacity down, ECMP from the leaves). The ceiling
per rail is the least of the host links' rate and, over the leaves and spines, uplink capacity / load
units; the job's is that x rails / 8 x the payload share. It assumes ECMP (or the SM's static routes)
spreads the crossing flows evenly over a switch's uplinks; a static route that puts two flows on one
uplink does worse. Four tiers or more: only leaves and spines are counted.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ibdiag.errors import InputError
from ibdiag.fabric.hosts import Names
from ibdiag.fabric.model import Fabric, PortRef
from ibdiag.fabric.rails import rail_ends
from ibdiag.fabric.shape import SINGLE, TREE, Shape

RING = "ring"
TREE_ALGO = "tree"
ALLTOALL = "alltoall"
ALGORITHMS = (RING, TREE_ALGO, ALLTOALL)
ASSUMPTION = "crossing flows spread evenly over a leaf's (and a pod's spines') uplinks (ECMP or the SM's static routes; a static route that stacks two flows on one uplink does worse)"


def btree_parent(rank: int, n: int) -> int | None:
    """NCCL's binary tree (``ncclGetBtree``): the parent of ``rank`` among ``n``; None for the root."""
    if rank == 0:
        return None
    bit = 1
    while bit < n and not bit & rank:
        bit <<= 1
    up = (rank ^ bit) | (bit << 1)
    return rank ^ bit if up >= n else up


def double_tree(n: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """NCCL's two trees (``ncclGetDtree``) as (child, parent) edges: the second is the first mirrored
    (``n`` even) or shifted by one (``n`` odd), so a leaf of one is an inner node of the other."""
    first = [(r, p) for r in range(n) if (p := btree_parent(r, n)) is not None]
    if n % 2:
        second = [((c + 1) % n, (p + 1) % n) for c, p in first]
    else:
        second = [(n - 1 - c, n - 1 - p) for c, p in first]
    return first, second


class _UplinkLoad:
    """A switch's uplink capacity ``up_gbps`` over its load ``units`` (of ``b``)."""

    up_gbps: float
    units: float

    @property
    def per_unit_gbps(self) -> float | None:
        return self.up_gbps / self.units if self.units > 0 else None


@dataclass(frozen=True)
class LeafLoad(_UplinkLoad):
    leaf: str
    name: str
    nodes: int
    """Job nodes with an adapter on it (any rail)."""
    up_gbps: float
    units: float
    """Load on its uplinks, in units of one rail's busbw ``b`` (summed over the rails it carries)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "leaf": self.name,
            "guid": self.leaf,
            "nodes": self.nodes,
            "up_gbps": self.up_gbps,
            "load_units": round(self.units, 6),
            "gbps_per_unit": self.per_unit_gbps,
        }


@dataclass(frozen=True)
class SpineLoad(_UplinkLoad):
    spine: str
    name: str
    pod: str
    """The pod's name (its first spine's, in name order)."""
    up_gbps: float
    """Its uplinks to the cores."""
    share: float
    """Its share of the pod's traffic to and from the other pods (its capacity down over the pod's)."""
    units: float
    """Load on its uplinks in units of ``b``: the pod's crossings x share."""

    def to_json(self) -> dict[str, Any]:
        return {
            "spine": self.name,
            "guid": self.spine,
            "pod": self.pod,
            "up_gbps": self.up_gbps,
            "share": round(self.share, 6),
            "load_units": round(self.units, 6),
            "gbps_per_unit": self.per_unit_gbps,
        }


@dataclass(frozen=True)
class Pods:
    """A three-tier tree's pods, for the job: leaf -> pod, and each spine of a spanned pod."""

    of_leaf: dict[str, str]
    spines: tuple[tuple[str, str, str, float, float], ...] = ()
    """(guid, name, pod, up Gb/s, share of its pod's crossings)."""


@dataclass(frozen=True)
class AlgoCeiling:
    algorithm: str
    rail_gbps: float
    """The busbw one rail can carry, Gb/s on the wire."""
    busbw_gbs: float
    """The job's: rails x rail_gbps / 8 x payload share."""
    binding: str
    """``host links`` or the leaf or spine whose uplinks bind."""
    leaves: tuple[LeafLoad, ...]
    arithmetic: tuple[str, ...]
    spines: tuple[SpineLoad, ...] = ()
    """Three tiers: the spines of the pods the job spans."""

    def to_json(self) -> dict[str, Any]:
        return {
            "algorithm": self.algorithm,
            "rail_gbps": self.rail_gbps,
            "busbw_gbs": self.busbw_gbs,
            "binding": self.binding,
            "leaves": [x.to_json() for x in self.leaves],
            "spines": [x.to_json() for x in self.spines],
            "arithmetic": list(self.arithmetic),
        }


@dataclass(frozen=True)
class Placement:
    order: tuple[str, ...]
    rails: tuple[int, ...]
    leaves: tuple[tuple[str, int], ...]
    """(leaf name, job nodes on it), the most first."""
    spines: int
    """Switches above the spanned leaves (their uplinks' far ends)."""
    host_gbps: float
    payload_share: float
    ceilings: dict[str, AlgoCeiling]
    leaf_ordered: AlgoCeiling | None
    """The ring with the same nodes ordered leaf by leaf (None when that is the given order)."""
    leaf_order: tuple[str, ...] = ()
    pods: int = 0
    """Three tiers: the pods the job spans (0 for two tiers)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "nodes": len(self.order),
            "pods": self.pods,
            "rank_order": list(self.order),
            "rails": list(self.rails),
            "leaves": [{"leaf": n, "nodes": k} for n, k in self.leaves],
            "spines": self.spines,
            "host_link_gbps": self.host_gbps,
            "payload_share": self.payload_share,
            "ceilings": {k: v.to_json() for k, v in self.ceilings.items()},
            "leaf_ordered_ring": None if self.leaf_ordered is None else self.leaf_ordered.to_json(),
            "assumption": ASSUMPTION,
        }


def _loads(algo: str, seq: list[str]) -> dict[str, float]:
    """Uplink load units per leaf for one rail, ``seq`` the leaf of each node in rank order."""
    n = len(seq)
    out: dict[str, float] = defaultdict(float)
    if n < 2:
        return out
    if algo == RING:
        for i in range(n):
            if seq[i] != seq[(i + 1) % n]:
                out[seq[i]] += 1
    elif algo == TREE_ALGO:
        w = n / (4 * (n - 1))
        for tree in double_tree(n):
            for c, p in tree:
                if seq[c] != seq[p]:
                    out[seq[c]] += w
                    out[seq[p]] += w
    else:
        count = Counter(seq)
        for leaf, k in count.items():
            if k < n:
                out[leaf] += k * (n - k) / (n - 1)
    return out


def _spine_loads(algo: str, by_rail: dict[int, list[str]], pods: Pods) -> tuple[SpineLoad, ...]:
    """Each spanned pod's crossings (the leaves' counts with each leaf replaced by its pod), shared
    among its spines."""
    units: dict[str, float] = defaultdict(float)
    for seq in by_rail.values():
        for pod, load in _loads(algo, [pods.of_leaf[g] for g in seq]).items():
            units[pod] += load
    return tuple(
        SpineLoad(guid, name, pod, up, share, units.get(pod, 0.0) * share)
        for guid, name, pod, up, share in pods.spines
    )


def _ceiling(
    algo: str,
    by_rail: dict[int, list[str]],
    up: dict[str, float],
    names: dict[str, str],
    nodes_on: Counter[str],
    host_gbps: float,
    share: float,
    pods: Pods,
) -> AlgoCeiling:
    units: dict[str, float] = defaultdict(float)
    for seq in by_rail.values():
        for leaf, load in _loads(algo, seq).items():
            units[leaf] += load
    leaves = tuple(
        LeafLoad(leaf, names[leaf], nodes_on[leaf], up.get(leaf, 0.0), units.get(leaf, 0.0))
        for leaf in sorted(nodes_on, key=lambda g: names[g])
    )
    spines = _spine_loads(algo, by_rail, pods) if pods.spines else ()
    rail, binding = host_gbps, "host links"
    worst: LeafLoad | SpineLoad | None = None
    both: tuple[LeafLoad | SpineLoad, ...] = (*leaves, *spines)
    for x in both:
        cap = x.per_unit_gbps
        if cap is not None and cap < rail:
            rail, binding, worst = cap, x.name, x
    nrails = len(by_rail)
    busbw = nrails * rail / 8 * share
    what = {
        RING: "ring edges in rank order leave it",
        TREE_ALGO: "from the tree edges that cross it",
        ALLTOALL: f"k(n-k)/(n-1) with n = {len(next(iter(by_rail.values()), []))}",
    }[algo]
    lines = []
    if isinstance(worst, SpineLoad):
        lines.append(
            f"{worst.name}: {worst.units:.4g} unit(s) of b ({worst.share:.0%} of its pod's; per pod, {what})"
            f" over {worst.up_gbps:g} Gb/s of uplinks to the cores "
            f"= {rail:.4g} Gb/s per rail, below the {host_gbps:g} Gb/s host link"
        )
    elif worst is not None:
        lines.append(
            f"{worst.name}: {worst.units:.4g} unit(s) of b ({what}) over {worst.up_gbps:g} Gb/s of uplinks "
            f"= {rail:.4g} Gb/s per rail, below the {host_gbps:g} Gb/s host link"
        )
    else:
        groups: tuple[tuple[str, tuple[LeafLoad | SpineLoad, ...]], ...] = (
            ("leaf", leaves),
            ("spine", spines),
        )
        for kind, group in groups:
            busiest = max(group, key=lambda x: x.units, default=None)
            if busiest is not None and busiest.units > 0:
                lines.append(
                    f"busiest {kind} {busiest.name}: {busiest.units:.4g} unit(s) of b over {busiest.up_gbps:g} Gb/s of uplinks "
                    f"= {busiest.per_unit_gbps:.4g} Gb/s per rail, above the {host_gbps:g} Gb/s host link"
                )
        if not lines:
            lines.append("no traffic leaves a leaf")
    lines.append(
        f"ceiling: {nrails} rail(s) x {rail:.4g} Gb/s / 8 x {share:g} payload = {busbw:.4g} GB/s busbw (bound by {binding})"
    )
    return AlgoCeiling(algo, rail, busbw, binding, leaves, tuple(lines), spines)


def job_pods(sh: Shape, names: Names, leaves: Iterable[str]) -> Pods:
    """A tree of three tiers or more: its pods (the leaves and spines joined below the cores), each
    job leaf's, and the spines of the pods the job spans with their uplinks and shares."""
    if sh.graph is None or sh.depth < 3:
        return Pods({})
    load = {x.guid: x for x in sh.loads}
    parts = sh.graph.components(within=[s for s, t in sh.tiers.items() if t <= 1])
    pod_of: dict[str, str] = {}
    members: dict[str, list[str]] = {}
    for part in parts:
        spines = sorted((s for s in part if sh.tiers[s] == 1), key=names.node)
        label = names.node(spines[0]) if spines else names.node(min(part, key=names.node))
        pod_of.update(dict.fromkeys(part, label))
        members[label] = spines
    spanned = sorted({pod_of[g] for g in leaves})
    rows = []
    for pod in spanned:
        down = sum(load[s].down_gbps for s in members[pod] if s in load)
        for s in members[pod]:
            if s in load and down > 0:
                x = load[s]
                rows.append((s, names.node(s), pod, x.up_gbps, x.down_gbps / down))
    return Pods(pod_of, tuple(rows))


def place(
    fab: Fabric,
    names: Names,
    sh: Shape,
    order: list[str],
    *,
    rails_used: int | None = None,
    payload_share: float = 1.0,
) -> Placement:
    """The job's nodes (``order``: rank order, one entry per node) on ``fab``."""
    if sh.kind not in (TREE, SINGLE):
        raise InputError(
            f"the fabric is not a tree of tiers ({sh.text}): its ceiling for a job is not computed",
            hint="see `ibdiag fabric`'s fabric.tiers finding",
        )
    ends, _skipped = rail_ends(fab, names)
    where: dict[str, dict[int, tuple[str, float]]] = {}
    for e in ends:
        p = fab.port(PortRef(e.leaf, e.port))
        where.setdefault(e.host, {})[e.rail] = (e.leaf, (p.rate_gbps if p else None) or 0.0)
    missing = [h for h in order if h not in where]
    if missing:
        raise InputError(
            f"{len(missing)} of the job's nodes have no adapter on this fabric: {', '.join(missing[:8])}",
            hint="node descriptions name hosts as `<host> <device>` (rdma-ndd), or --topo files (`ibdiag topo -o json` of each node) do; check --nodes against `ibdiag fabric -o json` adapters",
        )
    rails = sorted(set.intersection(*(set(where[h]) for h in order)))
    if not rails:
        raise InputError(
            "the job's nodes share no rail (no NIC index that every node has on the fabric)",
            hint="check the node descriptions (`gpu03 mlx5_2`) or give --topo",
        )
    if rails_used is not None:
        rails = rails[: max(1, rails_used)]
    by_rail = {r: [where[h][r][0] for h in order] for r in rails}
    host_gbps = min(where[h][r][1] for h in order for r in rails)
    up = {x.guid: x.up_gbps for x in sh.loads if x.tier == 0}
    leaf_names = {g: names.node(g) for seq in by_rail.values() for g in seq}
    nodes_on: Counter[str] = Counter()
    for h in order:
        for leaf in {where[h][r][0] for r in rails}:
            nodes_on[leaf] += 1
    spines = {
        n for leaf in nodes_on for n in (sh.graph.neighbors(leaf) if sh.graph is not None else ())
    }
    pods = job_pods(sh, names, nodes_on)
    args = (up, leaf_names, nodes_on, host_gbps, payload_share, pods)
    ceilings = {a: _ceiling(a, by_rail, *args) for a in ALGORITHMS}
    sorted_order = sorted(order, key=lambda h: (tuple(leaf_names[where[h][r][0]] for r in rails),))
    leaf_ordered = None
    if sorted_order != order:
        leaf_ordered = _ceiling(
            RING, {r: [where[h][r][0] for h in sorted_order] for r in rails}, *args
        )
    spanned = tuple(
        sorted(((leaf_names[g], k) for g, k in nodes_on.items()), key=lambda x: (-x[1], x[0]))
    )
    return Placement(
        tuple(order),
        tuple(rails),
        spanned,
        len(spines),
        host_gbps,
        payload_share,
        ceilings,
        leaf_ordered,
        tuple(sorted_order),
        len({pods.of_leaf[g] for g in nodes_on}) if pods.of_leaf else 0,
    )
