"""FAKE: an in-process stand-in for a cluster's fabric, with planted faults — for scale tests only.

:class:`SyntheticFabric` is a :class:`~ibdiag.sweep.runner.PairRunner` that measures nothing: it
returns a bandwidth computed from a nominal value, the planted faults and seeded noise. It exists so
that the planning and the attribution can be run, and their precision and recall measured, at 16384
nodes on one machine (``tests/sweep/test_scale.py``, ``benchmarks/sweep_scale.py``). It is never a
claim that a real fabric was measured: the real runtime runs ibdiag's p2p per pair.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ibdiag.sweep.analysis import Analysis, EndVerdict, LinkVerdict, NodeStatus
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
    ) -> None:
        self.faults = faults
        self.bw_gbs = bw_gbs
        self.noise = noise
        self.spread = spread
        """Noise as a bounded spread: each measurement uniform within ±noise of its value (a loaded
        host), instead of normal with sigma ``noise``."""
        self.lat_us = lat_us
        self._rng = random.Random(seed)

    def run_pair(self, test: PairTest, a: FleetNode, b: FleetNode, spec: PairSpec) -> PairResult:
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
        bw = max(0.0, self.bw_gbs * factor * jitter)
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
