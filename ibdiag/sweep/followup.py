"""What a sweep tests after its pattern: the second pass and the confirmation pass, planned from results.

* **second pass**: each suspect (a node with a slow link, or an end not ok) meets
  ``second_pass_partners`` nodes already known good. With the fabric known, the partners are chosen
  by where they sit — on the suspect's own leaf first (a test inside a leaf crosses no inter-switch
  link and can collide with nothing), then the nearest in leaf order — and the rounds are packed so
  that no two tests claim one link (:class:`~ibdiag.sweep.contention.Packer`). Without it, partners
  spread over the good nodes by rank, and their slow results, shared, go to the confirmation pass.
* **confirmation pass**: every *confounded* link — slow, but only in rounds where another test may
  have crossed a link of its path — is re-tested (its node pair, every rail at once, as measured
  first) alone in its round, or beside others only where the fabric proves they share no link. Only
  what stays slow then is named. A node whose slow links are all confounded is judged on the
  re-tests; at most ``confirm_partners + 1`` of one node's links are re-tested per iteration (enough to
  find it bad: its other confounded links are then explained by it).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from functools import partial

from ibdiag.sweep.analysis import Analysis, LinkVerdict, SweepConfig
from ibdiag.sweep.attribution import analyse, suspects_and_good
from ibdiag.sweep.contention import Packer
from ibdiag.sweep.layout import FabricLayout
from ibdiag.sweep.linkstats import MIN_CLEAN_REFERENCE
from ibdiag.sweep.nodes import FleetNode
from ibdiag.sweep.runner import PairResult
from ibdiag.sweep.schedule import NodePair, Phase, Round, second_pass_rounds


def _met(results: Sequence[PairResult]) -> dict[int, set[int]]:
    met: dict[int, set[int]] = {}
    for res in results:
        if res.phase is Phase.FIRST:
            met.setdefault(res.a, set()).add(res.b)
            met.setdefault(res.b, set()).add(res.a)
    return met


def second_pass_plan(
    nodes: Sequence[FleetNode],
    results: Sequence[PairResult],
    config: SweepConfig = SweepConfig(),
    packer: Packer | None = None,
) -> list[Round]:
    """The second pass's rounds from the results so far: each suspect against known-good nodes."""
    analysis = analyse(nodes, results, config)
    suspects, good = suspects_and_good(analysis)
    met = _met(results)
    layout = packer.layout if packer is not None else None
    if layout is None or packer is None:
        return second_pass_rounds(suspects, good, met, partners=config.second_pass_partners)
    pairs = nearby_partners(suspects, good, met, layout, config.second_pass_partners)
    return packer.pack(pairs)


def nearby_partners(
    suspects: Sequence[int],
    good: Sequence[int],
    met: dict[int, set[int]],
    layout: FabricLayout,
    partners: int,
) -> list[NodePair]:
    """Each suspect's ``partners`` good nodes by where they sit: its own leaf first, then the nearest
    in leaf order; fresh partners before ones it met; a good node chosen less often before one chosen
    more. Looks at the good nodes of the suspect's leaf and its nearest ones in leaf order only, so it
    costs O(S log G) for S suspects and G good nodes."""
    sus = set(suspects)
    ref = [g for g in good if g not in sus]
    if not ref or partners < 1:
        return []
    order = layout.leaf_order(ref)
    where = {g: i for i, g in enumerate(order)}
    keyed = [layout.place_key(g) for g in order]
    by_leaf: dict[str | None, list[int]] = {}
    for g in order:
        seat = layout.seat(g, 0)
        by_leaf.setdefault(seat.leaf if seat else None, []).append(g)
    load: dict[int, int] = {}
    out: list[NodePair] = []
    for s in sorted(suspects, key=lambda r: layout.place_key(r)):
        seat = layout.seat(s, 0)
        leaf = seat.leaf if seat else None
        p = bisect_left(keyed, layout.place_key(s))
        window = 4 * partners
        near = order[max(0, p - window) : p + window]
        local = by_leaf.get(leaf, []) if leaf is not None else []
        candidates = dict.fromkeys([*local, *near])
        key = partial(_nearness, layout, where, load, met.get(s, set()), leaf, p)
        for g in sorted(candidates, key=key)[:partners]:
            load[g] = load.get(g, 0) + 1
            out.append((s, g) if s < g else (g, s))
    return out


def _nearness(
    layout: FabricLayout,
    where: dict[int, int],
    load: dict[int, int],
    before: set[int],
    leaf: str | None,
    pos: int,
    g: int,
) -> tuple[int, int, int, int, int]:
    """How good a partner ``g`` is (smaller first): on the leaf, fresh, chosen least, nearest in order."""
    gs = layout.seat(g, 0)
    same = 0 if leaf is not None and gs is not None and gs.leaf == leaf else 1
    return (same, 1 if g in before else 0, load.get(g, 0), abs(where[g] - pos), g)


def confounded_pairs(analysis: Analysis, per_node: int) -> list[NodePair]:
    """The node pairs of the confounded links (not explained by a bad end), at most ``per_node`` per
    node: the links of the nodes with the most of them first, then the slowest."""
    dead = set(analysis.unreachable)
    confounded = [lk for lk in analysis.links if lk.verdict is LinkVerdict.CONFOUNDED]
    per: dict[int, int] = {}
    for lk in confounded:
        per[lk.a] = per.get(lk.a, 0) + 1
        per[lk.b] = per.get(lk.b, 0) + 1
    # the links of the nodes with the most confounded links first (a bad node is confirmed by two of
    # them, and explains the rest), then the slowest: what matters most comes first under the cap
    links = sorted(
        confounded,
        key=lambda lk: (
            -max(per[lk.a], per[lk.b]),
            lk.z if lk.z is not None else 0.0,
            lk.rail,
            lk.a,
            lk.b,
        ),
    )
    count: dict[int, int] = {}
    out: dict[NodePair, None] = {}
    for lk in links:
        pair = (lk.a, lk.b)
        if pair in out or lk.a in dead or lk.b in dead:
            continue
        if count.get(lk.a, 0) >= per_node or count.get(lk.b, 0) >= per_node:
            continue
        out[pair] = None
        count[lk.a] = count.get(lk.a, 0) + 1
        count[lk.b] = count.get(lk.b, 0) + 1
    return list(out)


def calibration_pairs(analysis: Analysis) -> list[NodePair]:
    """Per rail with fewer than :data:`~ibdiag.sweep.linkstats.MIN_CLEAN_REFERENCE` clean links: that
    many of its links measured only beside others, fine-looking and nearest its median, to re-test
    alone — a collision only slows a test, so a rail whose every test may have collided has its
    typical level pulled down (every test of a small fleet beside another can be), and the slow
    links below it hide; alone, they show the level (:func:`~ibdiag.sweep.linkstats.rail_stats`)."""
    dead = set(analysis.unreachable)
    out: dict[NodePair, None] = {}
    for rail in analysis.rails:
        links = [lk for lk in analysis.links if lk.rail == rail.rail]
        clean = sum(1 for lk in links if lk.clean_tests > 0)
        need = MIN_CLEAN_REFERENCE - clean
        median = rail.bw.median if rail.bw.median is not None else rail.lat.median
        if need <= 0 or median is None:
            continue
        by_bw = rail.bw.median is not None
        candidates: list[tuple[float, int, int]] = []
        for lk in links:
            value = lk.bw_gbs if by_bw else lk.lat_us
            if (
                value is not None
                and lk.verdict is LinkVerdict.OK
                and lk.clean_tests == 0
                and lk.a not in dead
                and lk.b not in dead
            ):
                candidates.append((abs(value - median), lk.a, lk.b))
        candidates.sort()
        for _, a, b in candidates[:need]:
            out[(a, b)] = None
    return list(out)


def confirmation_rounds(analysis: Analysis, packer: Packer) -> list[Round]:
    """Rounds that re-test the confounded links (and calibrate a rail that has too few clean links):
    alone, or packed where the fabric proves them apart."""
    pairs = confounded_pairs(analysis, analysis.config.confirm_partners + 1)
    if pairs or any(lk.clean_tests < lk.tests for lk in analysis.links):
        pairs += [p for p in calibration_pairs(analysis) if p not in pairs]
    return packer.pack(pairs, alone_unless_proven=True)
