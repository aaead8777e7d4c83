"""FAKE: an in-process stand-in for a cluster's fabric, with planted faults — for scale tests only.

:class:`SyntheticFabric` is a :class:`~ibdiag.sweep.runner.PairRunner` that measures nothing: it
returns a bandwidth computed from a nominal value, the planted faults and seeded noise. It exists so
that the planning and the attribution can be run, and their precision and recall measured, at 16384
nodes on one machine (``tests/sweep/test_scale.py``, ``benchmarks/sweep_scale.py``). It is never a
claim that a real fabric was measured: the real runtime runs ibdiag's p2p per pair.

With a :class:`Tree` it also models the collisions of a round's tests: the nodes sit on the leaves of
a two-tier tree (rail k of every node on rail k's own leaves: rail-optimised), each leaf cabled once to
each spine; a test's data (the measuring node sends) crosses its leaf's uplink to a spine and that
spine's downlink to the far leaf, unless both ends are on one leaf. The spine is chosen per
destination (static routes, as an InfiniBand subnet manager's: a fixed spine per destination, from a
seeded hash) or per flow (ECMP: a random spine per test). Each test's share is 1 / the most tests on
any link of its path in its round; its bandwidth is the nominal x its faults x that share x noise.
:meth:`Tree.description` is the same tree as the sweep's fabric description
(:class:`~ibdiag.sweep.layout.FabricDescription`: exact routes for the per-destination variant, a
cabling plan's ``hashed`` for the per-flow one).
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ibdiag.sweep.analysis import Analysis, EndVerdict, LinkVerdict, NodeStatus
from ibdiag.sweep.layout import HASHED, ROUTES, FabricDescription, Seat
from ibdiag.sweep.nodes import FleetNode
from ibdiag.sweep.runner import PairResult, PairSpec
from ibdiag.sweep.schedule import NodePair, PairTest

LinkKey = tuple[int, int, int]
"""(rail, lower rank, higher rank)."""


@dataclass(frozen=True)
class PlantedFaults:
    slow_nodes: Mapping[int, float] = field(default_factory=dict)
    """Rank -> bandwidth factor on every rail (a host problem: PCIe, NUMA, CPU)."""
    slow_ends: Mapping[tuple[int, int], float] = field(default_factory=dict)
    """(rank, rail) -> factor on that rail only (one adapter, its cable or port)."""
    slow_links: Mapping[LinkKey, float] = field(default_factory=dict)
    """(rail, a, b) -> factor of that pair only (a route or switch port between them)."""
    broken_links: frozenset[LinkKey] = frozenset()
    """Pairs whose test fails with both ends answering."""
    dead: Mapping[int, int] = field(default_factory=dict)
    """Rank -> first round in which it no longer answers."""

    def bad_ends(self, nodes: Sequence[FleetNode]) -> set[tuple[int, int]]:
        """(rank, rail) the attribution should call bad."""
        out = {(r, k) for r in self.slow_nodes for k in range(len(nodes[r].rails))}
        return out | set(self.slow_ends)

    def bad_links(self) -> set[LinkKey]:
        return set(self.slow_links) | set(self.broken_links)


PER_DESTINATION = "destination"
PER_FLOW = "flow"

Link = tuple[str, int, int, int]
"""A directed leaf-spine link of rail k's plane: ("up", rail, leaf, spine) or ("down", rail, spine, leaf)."""


@dataclass(frozen=True)
class Tree:
    """FAKE: a two-tier tree for :class:`SyntheticFabric` (module docstring)."""

    leaf_of: tuple[int, ...]
    """Rank -> its leaf (the same leaf number on every rail's plane)."""
    spines: int
    routing: str = PER_DESTINATION
    """``destination`` (static: a fixed spine per destination) or ``flow`` (a random spine per test)."""
    seed: int = 0

    def spine_to(self, rail: int, dst: int) -> int:
        """The static route's spine towards ``dst`` (every leaf sends ``dst``'s traffic through it)."""
        digest = hashlib.blake2b(f"{self.seed}/{rail}/{dst}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") % self.spines

    def path(self, rail: int, src: int, dst: int, rng: random.Random) -> tuple[Link, ...]:
        a, b = self.leaf_of[src], self.leaf_of[dst]
        if a == b:
            return ()
        s = (
            self.spine_to(rail, dst)
            if self.routing == PER_DESTINATION
            else rng.randrange(self.spines)
        )
        return (("up", rail, a, s), ("down", rail, s, b))

    def description(self, nodes: Sequence[FleetNode]) -> FabricDescription:
        """The tree as the sweep reads a fabric: exact routes (per destination) or a plan (per flow)."""
        seats: dict[tuple[str, str], Seat] = {}
        counts: Counter[int] = Counter()
        for node in nodes:
            index = counts[self.leaf_of[node.rank]]
            counts[self.leaf_of[node.rank]] += 1
            for r in node.rails:
                leaf = f"r{r.index}-leaf{self.leaf_of[node.rank]}"
                seats[(node.host, r.adapter or "tcp")] = Seat(
                    leaf, index + 1, index, str(node.rank)
                )
        uplinks = {s.leaf: self.spines for s in seats.values()}
        if self.routing == PER_FLOW:
            return FabricDescription("synthetic tree (hashed)", HASHED, seats, uplinks, True)

        def route(a: Seat, b: Seat) -> tuple[str, ...] | None:
            rail = int(a.leaf.split("-")[0][1:])
            s = self.spine_to(rail, int(b.ca or 0))
            return (f"{a.leaf}>spine{s}", f"spine{s}>{b.leaf}")

        return FabricDescription("synthetic tree (routes)", ROUTES, seats, uplinks, True, route)


def synthetic_tree(
    n: int,
    hosts_per_leaf: int,
    *,
    order: str = "leaf",
    routing: str = PER_DESTINATION,
    seed: int = 0,
) -> Tree:
    """``n`` nodes on leaves of ``hosts_per_leaf`` (1:1: as many spines), ranks placed ``leaf`` by leaf,
    ``interleaved`` over the leaves (rank r on leaf r mod L) or ``shuffled``."""
    leaves = max(1, -(-n // hosts_per_leaf))
    by_position = [p // hosts_per_leaf for p in range(n)]
    if order == "leaf":
        leaf_of = by_position
    elif order == "interleaved":
        leaf_of = [r % leaves for r in range(n)]
    else:
        leaf_of = list(by_position)
        random.Random(seed).shuffle(leaf_of)
    return Tree(tuple(leaf_of), hosts_per_leaf, routing, seed)


class SyntheticFabric:
    """FAKE pair runner (module docstring): nominal bandwidth x planted factors x (1 + noise)."""

    def __init__(
        self,
        faults: PlantedFaults = PlantedFaults(),
        *,
        bw_gbs: float = 48.0,
        noise: float = 0.01,
        lat_us: float | None = None,
        seed: int = 0,
        spread: bool = False,
        tree: Tree | None = None,
    ) -> None:
        self.faults = faults
        self.tree = tree
        self.worst_load = 0
        """The most tests on one link in any round so far (1: no test ever shared a link)."""
        self.bw_gbs = bw_gbs
        self.noise = noise
        self.spread = spread
        """Noise as a bounded spread: each measurement uniform within ±noise of its value (a loaded
        host), instead of normal with sigma ``noise``."""
        self.lat_us = lat_us
        self._rng = random.Random(seed)

    def run_round(
        self, tests: Sequence[PairTest], nodes: Sequence[FleetNode], spec: PairSpec
    ) -> list[PairResult]:
        """A round's tests at once: each one's share of its most loaded link (module docstring)."""
        if self.tree is None:
            return [self.run_pair(t, nodes[t.a.rank], nodes[t.b.rank], spec) for t in tests]
        flows = [
            (t, self.tree.path(t.rail, t.b.rank, t.a.rank, self._rng))
            for t in tests
            if not self._silent(t)
        ]
        load = Counter(link for _, path in flows for link in path)
        self.worst_load = max(self.worst_load, max(load.values(), default=0))
        share = {id(t): 1.0 / max((load[x] for x in path), default=1) for t, path in flows}
        return [self._measure(t, spec, share.get(id(t), 1.0)) for t in tests]

    def _silent(self, test: PairTest) -> tuple[int, ...]:
        f = self.faults
        return tuple(
            r for r in (test.a.rank, test.b.rank) if r in f.dead and test.round >= f.dead[r]
        )

    def run_pair(self, test: PairTest, a: FleetNode, b: FleetNode, spec: PairSpec) -> PairResult:
        return self._measure(test, spec, 1.0)

    def _measure(self, test: PairTest, spec: PairSpec, share: float) -> PairResult:
        f = self.faults
        ra, rb, k = test.a.rank, test.b.rank, test.rail
        silent = tuple(r for r in (ra, rb) if r in f.dead and test.round >= f.dead[r])
        if silent:
            return PairResult(
                test.round,
                test.phase,
                k,
                ra,
                rb,
                None,
                error=f"no answer within {spec.timeout_s:g} s",
                unreachable=silent,
            )
        key = (k, min(ra, rb), max(ra, rb))
        if key in f.broken_links:
            return PairResult(
                test.round,
                test.phase,
                k,
                ra,
                rb,
                None,
                error="the test failed: queue pair did not connect",
            )
        factor = min(
            f.slow_nodes.get(ra, 1.0),
            f.slow_nodes.get(rb, 1.0),
            f.slow_ends.get((ra, k), 1.0),
            f.slow_ends.get((rb, k), 1.0),
            f.slow_links.get(key, 1.0),
        )
        draw = self._rng.uniform(-1.0, 1.0) if self.spread else self._rng.gauss(0.0, 1.0)
        jitter = 1.0 + self.noise * draw
        bw = max(0.0, self.bw_gbs * factor * share * jitter)
        lat = (
            None
            if self.lat_us is None
            else self.lat_us * (1.0 + self.noise * abs(self._rng.gauss(0.0, 1.0))) / factor
        )
        return PairResult(
            test.round, test.phase, k, ra, rb, bw if spec.mode != "lat" else None, lat_us=lat
        )


def plant_faults(
    nodes: Sequence[FleetNode],
    tested_pairs: Iterable[NodePair],
    *,
    slow_nodes: int = 0,
    slow_ends: int = 0,
    slow_links: int = 0,
    dead: int = 0,
    factor: tuple[float, float] = (0.3, 0.7),
    dead_round: int = 1,
    seed: int = 0,
) -> PlantedFaults:
    """Faults on distinct nodes: slow nodes, slow single rails, slow links (among ``tested_pairs``, between
    otherwise healthy nodes, so the truth is unambiguous) and nodes that stop answering at ``dead_round``."""
    rng = random.Random(seed)
    ranks = list(range(len(nodes)))
    rng.shuffle(ranks)
    need = slow_nodes + slow_ends + dead
    if need > len(ranks):
        raise ValueError(f"cannot plant {need} node faults on {len(ranks)} nodes")
    picked_nodes, rest = ranks[:slow_nodes], ranks[slow_nodes:]
    picked_ends, rest = rest[:slow_ends], rest[slow_ends:]
    picked_dead = rest[:dead]
    faulty = set(ranks[:need])
    candidates = [p for p in tested_pairs if p[0] not in faulty and p[1] not in faulty]
    rng.shuffle(candidates)
    links: dict[LinkKey, float] = {}
    used: set[int] = set()
    for a, b in candidates:
        if len(links) >= slow_links:
            break
        if a in used or b in used:
            continue
        rails = min(len(nodes[a].rails), len(nodes[b].rails))
        links[(rng.randrange(rails), a, b)] = rng.uniform(*factor)
        used.update((a, b))
    if len(links) < slow_links:
        raise ValueError(
            f"only {len(links)} of {slow_links} slow links could be planted on disjoint healthy pairs"
        )
    return PlantedFaults(
        slow_nodes={r: rng.uniform(*factor) for r in picked_nodes},
        slow_ends={
            (r, rng.randrange(len(nodes[r].rails))): rng.uniform(*factor) for r in picked_ends
        },
        slow_links=links,
        dead={r: dead_round for r in picked_dead},
    )


@dataclass(frozen=True)
class Score:
    """How the attribution did against the planted truth: bad ends, bad links and unreachable nodes together."""

    true_positives: int
    false_positives: int
    false_negatives: int
    missed: tuple[str, ...]
    spurious: tuple[str, ...]

    @property
    def precision(self) -> float:
        found = self.true_positives + self.false_positives
        return self.true_positives / found if found else 1.0

    @property
    def recall(self) -> float:
        truth = self.true_positives + self.false_negatives
        return self.true_positives / truth if truth else 1.0


def score(faults: PlantedFaults, nodes: Sequence[FleetNode], analysis: Analysis) -> Score:
    """Compare what the analysis calls bad (ends, links, unreachable nodes) with what was planted."""
    truth = (
        {("end", *e) for e in faults.bad_ends(nodes)}
        | {("link", *k) for k in faults.bad_links()}
        | {("dead", r) for r in faults.dead}
    )
    found: set[tuple[object, ...]] = {("dead", r) for r in analysis.unreachable}
    for node in analysis.nodes:
        if node.status is NodeStatus.UNREACHABLE:
            continue
        found |= {("end", e.rank, e.rail) for e in node.ends if e.verdict is EndVerdict.BAD}
    found |= {
        ("link", link.rail, link.a, link.b)
        for link in analysis.links
        if link.verdict is LinkVerdict.BAD
    }
    tp = truth & found
    return Score(
        len(tp),
        len(found - tp),
        len(truth - tp),
        tuple(sorted(map(str, truth - found))),
        tuple(sorted(map(str, found - truth))),
    )
