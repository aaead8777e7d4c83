"""Rounds whose tests do not cross one link at the same time, and which tests may have.

A round runs all its pair tests at once. Two tests whose paths share a directed inter-switch link each
get about half of it (two flows on one 100 Mbit/s spine link: 44-52 Mbit/s each; three: 27-39), below
the sweep's slow limit: the sweep would measure its own collision. What a round may hold depends on
what is known of the fabric (:mod:`~ibdiag.sweep.layout`). Each direction of each rail test (a *flow*:
the measuring end sends to the serving end; ``--test collective`` both ways) *claims* what it crosses:

* on one leaf: nothing (no inter-switch link; its host links belong to its own two nodes);
* ``routes``: each directed inter-switch link of its route — a round admits a test only if no link of
  it is already claimed: **proven** free of shared links;
* ``hashed`` (per-flow ECMP, or only the cabling known): its leaf's uplinks upwards and the far leaf's
  downwards, one flow each way per leaf per round — on a two-tier tree no two flows can then meet
  on a leaf-spine link whatever the hash: **proven**;
* ``destination`` (static routes not read): the uplink group a fat tree's destination routing
  (ftree, D-mod-K) takes to the destination — its position on its leaf modulo the uplink groups —
  at both leaves: at most as many cross-leaf flows per leaf and direction as it has uplink groups, in
  a shift pattern such a tree routes without contention. The routes are assumed, not read: **not proven**;
* a node not on the description, or a route that cannot be followed: unknown.

:class:`Packer` fills each round greedily in the pattern's order, deferring a pair whose claims are
taken to a later round (the cost: more rounds, said by the plan and the result). :meth:`Packer.shared`
marks the tests that may have shared a link with another test of their round — every test in a round
of more than one pair when nothing is proven — whose slow results the confirmation pass re-tests
(:mod:`~ibdiag.sweep.confirm`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from ibdiag.sweep.layout import DESTINATION, HASHED, ROUTES, FabricLayout, Flow
from ibdiag.sweep.nodes import FleetNode
from ibdiag.sweep.schedule import NodePair, Pattern, Round, first_pass

Claim = tuple[str, ...]
"""Something a flow occupies for its round: a directed link, or a leaf's uplinks one way (a slot)."""


@dataclass(frozen=True)
class PairPath:
    """What one node pair's test (every common rail) claims in its round."""

    claims: tuple[Claim, ...]
    proven: bool
    """Its path is known well enough that claims no other test holds prove it shares no link."""
    known: bool
    """Its path is known at all (else it may cross anything, and taints proven tests beside it)."""


def pair_flows(
    pair: NodePair, nodes: Sequence[FleetNode], *, both_ways: bool = False
) -> list[Flow]:
    """The flows of a node pair's test: on every common rail, the measuring (higher) rank sends to the
    serving one; ``both_ways`` (an all_reduce) adds the other direction."""
    a, b = pair
    rails = min(len(nodes[a].rails), len(nodes[b].rails))
    out: list[Flow] = [(k, b, a) for k in range(rails)]
    return out + [(k, a, b) for k in range(rails)] if both_ways else out


def flow_claims(layout: FabricLayout, flow: Flow) -> tuple[tuple[Claim, ...], bool, bool]:
    """A flow's claims, whether they prove it alone on its links, whether its path is known at all."""
    rail, src, dst = flow
    s, d = layout.seat(src, rail), layout.seat(dst, rail)
    if s is None or d is None:
        return (), False, False
    if s.leaf == d.leaf:
        return (), True, True
    desc = layout.description
    if desc.routing == ROUTES:
        hops = layout.routed(flow)
        if hops is None:
            return (), False, False
        return tuple(("isl", h) for h in hops), True, True
    if desc.routing == HASHED:
        return (("up", s.leaf), ("down", d.leaf)), desc.two_tier, True
    up_groups = max(1, desc.uplinks.get(s.leaf, 1))
    down_groups = max(1, desc.uplinks.get(d.leaf, 1))
    return (
        (("up", s.leaf, str(d.index % up_groups)), ("down", d.leaf, str(d.index % down_groups))),
        False,
        True,
    )


class Packer:
    """Rounds for a sweep's node pairs on a layout (module docstring); without one, rounds as given."""

    def __init__(
        self, nodes: Sequence[FleetNode], layout: FabricLayout | None, *, both_ways: bool = False
    ) -> None:
        self.nodes, self.layout, self.both_ways = nodes, layout, both_ways
        self._paths: dict[NodePair, PairPath] = {}

    def path(self, pair: NodePair) -> PairPath:
        if pair not in self._paths:
            self._paths[pair] = self._path(pair)
        return self._paths[pair]

    def _path(self, pair: NodePair) -> PairPath:
        if self.layout is None:
            return PairPath((), False, False)
        claims: list[Claim] = []
        proven = known = True
        for flow in pair_flows(pair, self.nodes, both_ways=self.both_ways):
            c, p, k = flow_claims(self.layout, flow)
            claims += c
            proven, known = proven and p, known and k
        if len(set(claims)) < len(claims):  # its own rails cross one link (rails sharing leaves)
            proven = False
        return PairPath(tuple(claims), proven and known, known)

    # --- packing ------------------------------------------------------------------------------

    def rounds(self, planned: Iterable[Round]) -> Iterator[Round]:
        """The pattern's rounds repacked so that no two tests of a round claim the same link: each
        round takes the pairs left of the current pattern round first, then fills up from the next."""
        if self.layout is None:
            yield from planned
            return
        it = iter(planned)
        current: list[NodePair] = []
        ahead: list[NodePair] = []
        more = True
        while True:
            while more and len(ahead) == 0:  # keep a round of the pattern ahead to fill up from
                nxt = next(it, None)
                more = nxt is not None
                ahead = list(nxt or ())
            if not current:
                if not ahead:
                    return
                current, ahead = ahead, []
                continue
            taken, current, ahead = self._fill(current, ahead)
            yield taken

    def pack(self, pairs: Sequence[NodePair], *, alone_unless_proven: bool = False) -> list[Round]:
        """Rounds for any pairs (a second or confirmation pass): node-disjoint, no claim twice;
        ``alone_unless_proven``: a pair not proven to share no link gets a round of its own."""
        todo = list(dict.fromkeys(pairs))
        out: list[Round] = []
        if alone_unless_proven:
            out += [(p,) for p in todo if not self.path(p).proven]
            todo = [p for p in todo if self.path(p).proven]
        while todo:
            taken, todo, _ = self._fill(todo, [])
            out.append(taken)
        return out

    def _fill(
        self, current: list[NodePair], ahead: list[NodePair]
    ) -> tuple[Round, list[NodePair], list[NodePair]]:
        used_nodes: set[int] = set()
        used: set[Claim] = set()
        taken: list[NodePair] = []
        left: tuple[list[NodePair], list[NodePair]] = ([], [])
        for side, pairs in enumerate((current, ahead)):
            for p in pairs:
                claims = self.path(p).claims
                if p[0] in used_nodes or p[1] in used_nodes or any(c in used for c in claims):
                    left[side].append(p)
                    continue
                taken.append(p)
                used_nodes.update(p)
                used.update(claims)
        return tuple(sorted(taken)), left[0], left[1]

    # --- what a round shares -------------------------------------------------------------------

    def shared(self, rnd: Round) -> set[NodePair]:
        """The pairs of a round that may have crossed a link another test of it crossed."""
        if len(rnd) <= 1:
            return set()
        unknown = [p for p in rnd if not self.path(p).known]
        out = set()
        for p in rnd:
            path = self.path(p)
            if not path.proven or (path.claims and any(q != p for q in unknown)):
                out.add(p)
        return out

    def load(self, rnd: Round) -> int | None:
        """The most flows of the round on one claim (1: no link shared); None without a layout."""
        if self.layout is None:
            return None
        counts = Counter(c for p in rnd for c in self.path(p).claims)
        return max(counts.values(), default=0)


def ordered_first_pass(
    pattern: Pattern,
    nodes: Sequence[FleetNode],
    layout: FabricLayout | None,
    *,
    rounds: int | None = None,
    seed: int = 0,
) -> Iterator[Round]:
    """The pattern's rounds over the nodes in leaf order (a ring then meets its leaf neighbours and
    crosses each leaf boundary once); without a layout, in rank order."""
    n = len(nodes)
    order = layout.leaf_order(range(n)) if layout is not None else list(range(n))
    for rnd in first_pass(pattern, n, rounds=rounds, seed=seed):
        pairs = ((order[i], order[j]) for i, j in rnd)
        yield tuple(sorted((a, b) if a < b else (b, a) for a, b in pairs))


#: Routings under which every test the packer admits is proven alone on its links (a two-tier tree
#: for ``hashed``).
PROVEN_ROUTINGS = (ROUTES, HASHED)
#: The routing whose rounds follow an assumed pattern.
ASSUMED_ROUTING = DESTINATION
