"""Which nodes meet in which round: the sweep's schedules, as pure functions of the node count.

Every round is a set of *disjoint* node pairs (a node takes part in at most one test per round), so
all pairs of a round run at once and a round costs one pair test's time. Within a pair, rail k of
one node is tested against rail k of the other (rail-optimised clusters), all rails at once.

* ``ring``: each node with its two neighbours ``rank ± 1 (mod N)``: 2 rounds of N/2 pairs (N even;
  an odd ring needs a third round with one pair, N = 2 one round).
* ``pairwise``: all N(N-1)/2 pairs in N-1 rounds of N/2 pairs (the circle method of round-robin
  tournaments: fix one node, rotate the others); odd N: N rounds with one node sitting out (a bye).
* ``random``: K rounds, each a random perfect matching (seeded, so every rank plans the same rounds;
  a pair may repeat across rounds); odd N: one bye per round.
* second pass: each suspect (a node with a slow or failed link) against nodes already known good,
  so that each suspect meets at least ``partners`` distinct good nodes, disjoint per round.

Rounds are generated lazily: a 16384-node pairwise schedule has 134 million pairs and is never held whole.
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from ibdiag.errors import UsageError
from ibdiag.sweep.nodes import End, FleetNode

NodePair = tuple[int, int]
"""Two ranks, the lower first."""
Round = tuple[NodePair, ...]


class Pattern(str, Enum):
    RING = "ring"
    PAIRWISE = "pairwise"
    RANDOM = "random"

    def __str__(self) -> str:
        return self.value


class Phase(str, Enum):
    FIRST = "first"
    """The pattern's own rounds."""
    SECOND = "second"
    """Suspects re-tested against known-good nodes."""
    CONFIRM = "confirm"
    """Slow results of shared rounds re-tested alone, or in rounds proven free of shared links."""

    def __str__(self) -> str:
        return self.value


#: Largest fleet a schedule is planned for (a sanity bound on input, far above any cluster's node count).
MAX_NODES = 1 << 20
#: Most random rounds one sweep may ask for.
MAX_RANDOM_ROUNDS = 4096


def _pair(a: int, b: int) -> NodePair:
    return (a, b) if a < b else (b, a)


def _check_n(n: int) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 2:
        raise UsageError(
            f"a sweep needs at least 2 nodes, got {n!r}", hint="start one process per node"
        )
    if n > MAX_NODES:
        raise UsageError(
            f"{n} nodes is more than a sweep plans for ({MAX_NODES})",
            hint="sweep the cluster in parts",
        )


def ring_rounds(n: int) -> Iterator[Round]:
    """Each node with ``rank + 1 (mod n)``: even edges, then odd edges (then the closing edge for odd n)."""
    _check_n(n)
    if n == 2:
        yield ((0, 1),)
        return
    if n % 2 == 0:
        yield tuple((i, i + 1) for i in range(0, n, 2))
        yield tuple(_pair(i, (i + 1) % n) for i in range(1, n, 2))
        return
    # An odd cycle cannot be split into two matchings: (0,1),(2,3)..; (1,2),(3,4)..; then (n-1, 0).
    yield tuple((i, i + 1) for i in range(0, n - 1, 2))
    yield tuple((i, i + 1) for i in range(1, n - 1, 2))
    yield ((0, n - 1),)


def pairwise_rounds(n: int) -> Iterator[Round]:
    """Every pair once: the circle method (node ``m-1`` fixed, the others rotating), a bye for odd n."""
    _check_n(n)
    m = n if n % 2 == 0 else n + 1  # odd: a phantom node m-1 = n; its partner sits the round out
    ring = m - 1
    for r in range(ring):
        pairs: list[NodePair] = []
        if m - 1 < n:
            pairs.append(_pair(r, m - 1))
        for i in range(1, m // 2):
            pairs.append(_pair((r + i) % ring, (r - i) % ring))
        yield tuple(pairs)


def pairwise_partner(n: int, round_index: int, rank: int) -> int | None:
    """``rank``'s partner in round ``round_index`` of :func:`pairwise_rounds` without building the round
    (None: its bye). O(1), so each rank of a 16384-node sweep finds its own partner at once: the circle
    method pairs ``x`` with ``(2r - x) mod (m - 1)``, and node ``m - 1`` with ``r``."""
    _check_n(n)
    m = n if n % 2 == 0 else n + 1
    ring = m - 1
    if not (0 <= round_index < ring and 0 <= rank < n):
        raise UsageError(
            f"round {round_index} / rank {rank} is outside a {n}-node pairwise schedule",
            hint="rounds are 0..N-2 (N-1 for odd N), ranks 0..N-1",
        )
    fixed = m - 1
    if rank == fixed:
        return round_index
    partner = fixed if rank == round_index else (2 * round_index - rank) % ring
    return partner if partner < n else None


def random_rounds(n: int, rounds: int, seed: int) -> Iterator[Round]:
    """``rounds`` random perfect matchings from ``random.Random(seed)``: every rank computes the same ones."""
    _check_n(n)
    if not isinstance(rounds, int) or rounds < 1 or rounds > MAX_RANDOM_ROUNDS:
        raise UsageError(
            f"--rounds {rounds!r}: give 1 to {MAX_RANDOM_ROUNDS} random rounds",
            hint="8 rounds meet 8 partners per node",
        )
    rng = random.Random(seed)
    order = list(range(n))
    for _ in range(rounds):
        rng.shuffle(order)
        yield tuple(_pair(order[i], order[i + 1]) for i in range(0, n - 1, 2))


def first_pass(
    pattern: Pattern, n: int, *, rounds: int | None = None, seed: int = 0
) -> Iterator[Round]:
    """The pattern's rounds (``rounds`` is the number of random rounds; the other patterns fix it)."""
    pattern = Pattern(pattern)
    if pattern is not Pattern.RANDOM and rounds is not None:
        raise UsageError(
            f"--rounds is for --pattern random, not {pattern}",
            hint=f"{pattern} has a fixed number of rounds",
        )
    if pattern is Pattern.RING:
        return ring_rounds(n)
    if pattern is Pattern.PAIRWISE:
        return pairwise_rounds(n)
    return random_rounds(n, DEFAULT_RANDOM_ROUNDS if rounds is None else rounds, seed)


#: Random rounds when ``--rounds`` is not given: 8 partners per node, enough to confirm a bad node.
DEFAULT_RANDOM_ROUNDS = 8


def round_count(pattern: Pattern, n: int, rounds: int | None = None) -> int:
    """Rounds of the first pass, without generating them."""
    _check_n(n)
    pattern = Pattern(pattern)
    if pattern is Pattern.RING:
        return 1 if n == 2 else (2 if n % 2 == 0 else 3)
    if pattern is Pattern.PAIRWISE:
        return n - 1 if n % 2 == 0 else n
    return DEFAULT_RANDOM_ROUNDS if rounds is None else rounds


def pair_count(pattern: Pattern, n: int, rounds: int | None = None) -> int:
    """Node pairs tested in the first pass (each pair tests every common rail)."""
    _check_n(n)
    pattern = Pattern(pattern)
    if pattern is Pattern.RING:
        return 1 if n == 2 else n
    if pattern is Pattern.PAIRWISE:
        return n * (n - 1) // 2
    return round_count(pattern, n, rounds) * (n // 2)


def second_pass_rounds(
    suspects: Collection[int],
    good: Collection[int],
    met: Mapping[int, Collection[int]] | None = None,
    *,
    partners: int = 2,
) -> list[Round]:
    """Rounds that pair each suspect with ``partners`` distinct known-good nodes (fewer when fewer are good).

    Disjoint per round: a good node serves one suspect per round, so with S suspects and G good nodes
    it takes about ``ceil(partners * S / G)`` rounds. Good nodes a suspect already met (``met``) are
    taken only when no fresh one is free, since a fresh partner is new evidence. Suspects are given
    their partners in rank order, each starting its search at a different good node, so the load spreads.
    """
    sus = sorted(set(suspects))
    ref = sorted(set(good) - set(sus))
    if not sus or not ref or partners < 1:
        return []
    want = min(partners, len(ref))
    chosen: dict[int, list[int]] = {s: [] for s in sus}
    seen = met or {}
    out: list[Round] = []
    start = 0
    while True:
        used: set[int] = set()
        pairs: list[NodePair] = []
        for i, s in enumerate(sus):
            if len(chosen[s]) >= want:
                continue
            pick = fallback = None
            before = seen.get(s, ())
            for j in range(len(ref)):
                g = ref[(start + i + j) % len(ref)]
                if g in used or g in chosen[s]:
                    continue
                if g in before:
                    if fallback is None:
                        fallback = g
                    continue
                pick = g
                break
            pick = pick if pick is not None else fallback
            if pick is None:
                continue
            used.add(pick)
            chosen[s].append(pick)
            pairs.append(_pair(s, pick))
        if not pairs:
            return out
        out.append(tuple(sorted(pairs)))
        start += len(sus)


@dataclass(frozen=True)
class PairTest:
    """One test of one rail between two nodes: ``a`` serves, ``b`` connects and measures."""

    round: int
    """0-based over the whole sweep (second-pass rounds follow the first pass's)."""
    phase: Phase
    a: End
    b: End

    @property
    def rail(self) -> int:
        return self.a.rail


def pair_tests(
    round_index: int, phase: Phase, pairs: Sequence[NodePair], nodes: Sequence[FleetNode]
) -> list[PairTest]:
    """The rail tests of a round: for each node pair, rail k against rail k for every rail both have."""
    out: list[PairTest] = []
    for ra, rb in pairs:
        a, b = nodes[ra], nodes[rb]
        for k in range(min(len(a.rails), len(b.rails))):
            out.append(
                PairTest(
                    round_index,
                    phase,
                    End(ra, k, a.rails[k].adapter),
                    End(rb, k, b.rails[k].adapter),
                )
            )
    return out


@dataclass(frozen=True)
class Cost:
    """What a sweep costs: rounds and tests, and the wall time from one pair test's time."""

    pattern: Pattern
    nodes: int
    rails: int
    rounds: int
    """First-pass rounds."""
    pairs: int
    """First-pass node pairs."""
    second_pass_rounds: int
    """Expected second-pass rounds (``partners`` when the suspects are fewer than the good nodes)."""
    pair_s: float
    """Seconds one pair test takes (all rails at once), connection set-up included."""
    round_overhead_s: float
    """Seconds each round adds for coordination (partners announced, results gathered)."""

    @property
    def rail_tests(self) -> int:
        return self.pairs * self.rails

    @property
    def wall_s(self) -> float:
        """``(rounds + second-pass rounds) x (pair_s + round_overhead_s)``."""
        return (self.rounds + self.second_pass_rounds) * (self.pair_s + self.round_overhead_s)

    def to_json(self) -> dict[str, object]:
        return {
            "pattern": self.pattern.value,
            "nodes": self.nodes,
            "rails": self.rails,
            "rounds": self.rounds,
            "pairs": self.pairs,
            "rail_tests": self.rail_tests,
            "second_pass_rounds": self.second_pass_rounds,
            "pair_s": self.pair_s,
            "round_overhead_s": self.round_overhead_s,
            "wall_s": self.wall_s,
        }


def estimate(
    pattern: Pattern,
    n: int,
    *,
    rails: int = 1,
    rounds: int | None = None,
    pair_s: float = 2.0,
    round_overhead_s: float = 0.5,
    partners: int = 2,
) -> Cost:
    """The cost of a sweep of ``n`` nodes before it runs (a second pass of ``partners`` rounds assumed)."""
    if not (math.isfinite(pair_s) and pair_s > 0) or not (
        math.isfinite(round_overhead_s) and round_overhead_s >= 0
    ):
        raise UsageError(
            "the pair time must be > 0 s and the round overhead >= 0 s",
            hint="e.g. --pair-seconds 2",
        )
    pattern = Pattern(pattern)
    return Cost(
        pattern,
        n,
        rails,
        round_count(pattern, n, rounds),
        pair_count(pattern, n, rounds),
        partners,
        pair_s,
        round_overhead_s,
    )
