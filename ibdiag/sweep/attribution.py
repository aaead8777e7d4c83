"""What a sweep's results mean: per link and per node values, robust distances, and attribution.

Per rail (rail k is compared with rail k only), every tested link gets its bandwidth (the median of
its tests), its share of the line rate and its distance ``z`` from the rail's typical healthy link,
in log space (:mod:`ibdiag.sweep.stats`). That typical link must hold when half the links are slow
(one slow node in a ring of 4): each node's best link is a healthy level unless the node itself is
slow, so the rail's upper-quartile node sets a level, and the *reference links* are the first pass's
links less those at or below ``ratio_limit`` of it. The second pass's links are never in the
reference: that pass is a biased sample by design (every suspect against good nodes, so a bad node
adds slow links). Over the reference: the median, and the MAD (the larger of the healthy side's and
both sides', widened for few links). A link is *slow* at or below the higher of ``median x
exp(-z_limit x scale)`` (with ``z_min_links`` reference links or more) and ``median x ratio_limit``,
a limit that is never negative; where the rail has fewer than 3 reference links (2 nodes) also at or
below ``ratio_limit x min_bw_share`` of its line rate; the same upwards for latency; or when a test of
it failed while both ends answered. A test that ran beside others that may have crossed a link of its
path proves nothing when it is slow (:mod:`~ibdiag.sweep.linkstats`): such a *confounded* link is
neither slow nor fine until it is re-tested alone, and its ends are judged without it. Then, per node
end (node, rail):

* **bad node** (rail): slow with most of its partners (more than half), and confirmed: at least
  ``confirm_partners`` of those slow partners are fine with somebody else — the second pass makes
  sure every suspect meets at least two nodes already known good. Its slow links are explained by it,
  and left out of its partners' counts (repeated until no more ends turn bad): a node slow only with
  bad nodes is not a suspect.
* **bad link**: a slow link whose two ends are not bad and are each fine with some other partner.
* **unreachable**: a node the runner named as not answering; its unanswered tests are left out.
* What the evidence cannot separate (a majority slow but not confirmed, a slow link whose end has no
  fine partner) is *suspect*, never called bad.

A node is reported as a whole when most of its rails are bad, rail by rail otherwise.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

from ibdiag.sweep.analysis import (
    Analysis,
    EndStat,
    EndVerdict,
    LinkStat,
    LinkVerdict,
    NodeStatus,
    NodeVerdict,
    RailStats,
    SweepConfig,
    share_of,
)
from ibdiag.sweep.linkstats import End as _End
from ibdiag.sweep.linkstats import LinkRow, answered_tests, link_rows, median, rail_stats
from ibdiag.sweep.nodes import FleetNode
from ibdiag.sweep.runner import PairResult


def unreachable_ranks(results: Iterable[PairResult], n: int) -> set[int]:
    return {r for res in results for r in res.unreachable if 0 <= r < n}


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector: the analysis builds hundreds of thousands of records without
    cycles, and the collector would walk them all again at every threshold (~40 % of the time at 16384 nodes)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def analyse(
    nodes: Sequence[FleetNode], results: Iterable[PairResult], config: SweepConfig = SweepConfig()
) -> Analysis:
    """The whole attribution (module docstring) of ``results`` of a sweep over ``nodes``."""
    with _collector_paused():
        return _analyse(nodes, results, config)


def _analyse(
    nodes: Sequence[FleetNode], results: Iterable[PairResult], config: SweepConfig
) -> Analysis:
    n = len(nodes)
    results = list(results)
    dead = unreachable_ranks(results, n)
    acc, first_pass = answered_tests(results, n)
    by_rail, rails = rail_stats(nodes, acc, first_pass, config)
    rows, adjacency = link_rows(nodes, acc, by_rail, rails, config)
    fine_count = {end: sum(1 for _, slow in met if not slow) for end, met in adjacency.items()}
    end_verdict, end_counts = _end_verdicts(adjacency, fine_count, config)
    links = _link_verdicts(rows, end_verdict, fine_count)
    verdicts = _node_verdicts(nodes, links, rails, adjacency, end_verdict, end_counts, dead)
    cleared = _cleared_nodes(rows, verdicts, config) if any(r.cleared for r in rows) else ()
    return Analysis(
        config, tuple(rails[k] for k in sorted(rails)), tuple(links), tuple(verdicts), cleared
    )


def _cleared_nodes(
    rows: list[LinkRow], verdicts: list[NodeVerdict], config: SweepConfig
) -> tuple[int, ...]:
    """Ranks that are ok now and would not be on the shared rounds' results alone: judged again with
    every cleared link slow, as it measured beside other tests."""
    naive: dict[_End, list[tuple[int, bool]]] = {}
    for row in rows:
        if row.confounded:
            continue
        k, a, b = row.key
        slow = row.slow or row.cleared
        naive.setdefault((a, k), []).append((b, slow))
        naive.setdefault((b, k), []).append((a, slow))
    fine = {end: sum(1 for _, slow in met if not slow) for end, met in naive.items()}
    judged, _ = _end_verdicts(naive, fine, config)
    flagged = {r for (r, _k), v in judged.items() if v is not EndVerdict.OK}
    flagged |= {row.key[i] for row in rows if row.cleared for i in (1, 2)}
    return tuple(v.rank for v in verdicts if v.status is NodeStatus.OK and v.rank in flagged)


def _end_verdicts(
    adjacency: dict[_End, list[tuple[int, bool]]],
    fine_count: dict[_End, int],
    config: SweepConfig,
) -> tuple[dict[_End, EndVerdict], dict[_End, tuple[int, int, int]]]:
    """4. Ends: bad when most partners are slow and enough of them are fine elsewhere; a slow link to a
    partner already found bad is explained by that partner, so it is left out of the other end's
    count, until no more ends turn bad (module docstring)."""
    bad: set[_End] = set()
    pending: set[_End] = set(adjacency)
    while pending:
        new = {
            end
            for end in pending
            if _judge(end, adjacency[end], bad, fine_count, config) is EndVerdict.BAD
        }
        if not new:
            break
        bad |= new
        pending = {(p, end[1]) for end in new for p, _ in adjacency[end]} - bad
    end_verdict: dict[tuple[int, int], EndVerdict] = {}
    end_counts: dict[tuple[int, int], tuple[int, int, int]] = {}
    for end, met in adjacency.items():
        slow_partners = [p for p, slow in met if slow]
        confirming = sum(1 for p in slow_partners if fine_count.get((p, end[1]), 0) > 0)
        end_verdict[end] = (
            EndVerdict.BAD if end in bad else _judge(end, met, bad, fine_count, config)
        )
        end_counts[end] = (len(met), len(slow_partners), confirming)
    return end_verdict, end_counts


def _judge(
    end: _End,
    met: list[tuple[int, bool]],
    bad: set[_End],
    fine_count: dict[_End, int],
    config: SweepConfig,
) -> EndVerdict:
    """One end against its partners not already bad: bad, suspect or ok."""
    rail = end[1]
    open_ = [(p, slow) for p, slow in met if (p, rail) not in bad]
    slow_partners = [p for p, slow in open_ if slow]
    confirming = sum(1 for p in slow_partners if fine_count.get((p, rail), 0) > 0)
    if 2 * len(slow_partners) > len(open_):
        if confirming >= config.confirm_partners:
            return EndVerdict.BAD
        return EndVerdict.SUSPECT
    return EndVerdict.OK


def _link_verdicts(
    rows: list[LinkRow], end_verdict: dict[_End, EndVerdict], fine_count: dict[_End, int]
) -> list[LinkStat]:
    """5. Links: explained by a bad end, a bad link, unresolved, or confounded."""
    links: list[LinkStat] = []
    for row in sorted(rows, key=lambda r: r.key):
        k, a, b = row.key
        verdict = LinkVerdict.OK
        va, vb = end_verdict.get((a, k), EndVerdict.OK), end_verdict.get((b, k), EndVerdict.OK)
        if row.slow or row.confounded:
            if EndVerdict.BAD in (va, vb):
                verdict = LinkVerdict.NODE
            elif row.confounded:
                verdict = LinkVerdict.CONFOUNDED
            elif EndVerdict.SUSPECT in (va, vb):
                verdict = LinkVerdict.UNRESOLVED
            elif fine_count.get((a, k), 0) > 0 and fine_count.get((b, k), 0) > 0:
                verdict = LinkVerdict.BAD
            else:
                verdict = LinkVerdict.UNRESOLVED
        links.append(
            LinkStat(
                k,
                a,
                b,
                row.tests,
                row.failed,
                row.bw,
                row.lat,
                row.share,
                row.z,
                row.lat_z,
                row.slow,
                verdict,
                row.confounded,
                row.cleared,
                row.clean,
            )
        )
    return links


def _node_verdicts(
    nodes: Sequence[FleetNode],
    links: list[LinkStat],
    rails: dict[int, RailStats],
    adjacency: dict[_End, list[tuple[int, bool]]],
    end_verdict: dict[_End, EndVerdict],
    end_counts: dict[_End, tuple[int, int, int]],
    dead: set[int],
) -> list[NodeVerdict]:
    """6. Ends' own values (median over their links) and nodes."""
    end_bws: dict[tuple[int, int], list[float]] = {}
    for link in links:
        if link.bw_gbs is not None:
            end_bws.setdefault((link.a, link.rail), []).append(link.bw_gbs)
            end_bws.setdefault((link.b, link.rail), []).append(link.bw_gbs)
    verdicts: list[NodeVerdict] = []
    for node in nodes:
        ends: list[EndStat] = []
        for rail in node.rails:
            end = (node.rank, rail.index)
            if end not in adjacency:
                continue
            partners, slow_partners, confirming = end_counts[end]
            bw_med = median(end_bws.get(end, []))
            stats = rails.get(rail.index)
            ends.append(
                EndStat(
                    node.rank,
                    rail.index,
                    partners,
                    slow_partners,
                    confirming,
                    bw_med,
                    share_of(bw_med, rail.rate_gbps),
                    stats.bw.z(bw_med) if stats else None,
                    end_verdict[end],
                )
            )
        if node.rank in dead:
            status = NodeStatus.UNREACHABLE
        elif not ends:
            status = NodeStatus.UNTESTED
        elif any(e.verdict is EndVerdict.BAD for e in ends):
            status = NodeStatus.BAD
        elif any(e.verdict is EndVerdict.SUSPECT for e in ends):
            status = NodeStatus.SUSPECT
        else:
            status = NodeStatus.OK
        verdicts.append(NodeVerdict(node.rank, status, tuple(ends)))
    return verdicts


def suspects_and_good(analysis: Analysis) -> tuple[list[int], list[int]]:
    """After the first pass: the suspects — ranks with an end not ok, or with a slow link whose other
    end is ok (it could be either end or the link); and the good — every other tested rank. A node
    whose slow links all go to suspect or bad partners is explained by them: it serves as a good
    partner (in a small ring every node has a slow link when two neighbours are slow)."""
    verdict = {(e.rank, e.rail): e.verdict for n in analysis.nodes for e in n.ends}
    suspects: set[int] = set()
    tested: set[int] = set()
    for link in analysis.links:
        tested.update((link.a, link.b))
        if not link.slow:
            continue
        va = verdict.get((link.a, link.rail), EndVerdict.OK)
        vb = verdict.get((link.b, link.rail), EndVerdict.OK)
        if va is not EndVerdict.OK or vb is EndVerdict.OK:
            suspects.add(link.a)
        if vb is not EndVerdict.OK or va is EndVerdict.OK:
            suspects.add(link.b)
    dead = set(analysis.unreachable)
    return sorted(suspects - dead), sorted(tested - suspects - dead)
