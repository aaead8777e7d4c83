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
it failed while both ends answered. Then, per node end (node, rail):

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
import statistics
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

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
from ibdiag.sweep.nodes import FleetNode
from ibdiag.sweep.runner import PairResult
from ibdiag.sweep.schedule import Phase, Round, second_pass_rounds
from ibdiag.sweep.stats import robust_scale


def _median(values: Sequence[float]) -> float | None:
    if len(values) <= 2:  # most links are tested once or twice: skip the sort
        return (
            None if not values else (values[0] if len(values) == 1 else (values[0] + values[1]) / 2)
        )
    return statistics.median(values)


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


_Key = tuple[int, int, int]
"""A link: (rail, lower rank, higher rank)."""


_End = tuple[int, int]
"""One end of links: (rank, rail)."""


_Medians = list[tuple[_Key, float | None, float | None]]


_LinkRow = tuple[
    _Key,
    int,
    int,
    float | None,
    float | None,
    float | None,
    float | None,
    float | None,
    bool,
]


def _analyse(
    nodes: Sequence[FleetNode], results: Iterable[PairResult], config: SweepConfig
) -> Analysis:
    n = len(nodes)
    results = list(results)
    dead = unreachable_ranks(results, n)
    acc, first_pass = _answered_tests(results, n)
    by_rail, rails = _rail_stats(nodes, acc, first_pass, config)
    link_rows, adjacency = _link_rows(nodes, acc, by_rail, rails, config)
    fine_count = {end: sum(1 for _, slow in met if not slow) for end, met in adjacency.items()}
    end_verdict, end_counts = _end_verdicts(adjacency, fine_count, config)
    links = _link_verdicts(link_rows, end_verdict, fine_count)
    verdicts = _node_verdicts(nodes, links, rails, adjacency, end_verdict, end_counts, dead)
    return Analysis(config, tuple(rails[k] for k in sorted(rails)), tuple(links), tuple(verdicts))


def _answered_tests(results: list[PairResult], n: int) -> tuple[dict[_Key, list[Any]], set[_Key]]:
    """1. Links: every answered test of (rail, a, b), whichever end served: [tests, failed, bws, lats];
    and the links the first pass measured."""
    acc: dict[tuple[int, int, int], list[Any]] = {}
    first_pass: set[tuple[int, int, int]] = set()
    for res in results:
        if res.unreachable or not (0 <= res.a < n and 0 <= res.b < n) or res.a == res.b:
            continue
        key = (res.rail, res.a, res.b) if res.a < res.b else (res.rail, res.b, res.a)
        entry = acc.get(key)
        if entry is None:
            entry = acc[key] = [0, 0, [], []]
        entry[0] += 1
        if res.phase is Phase.FIRST:
            first_pass.add(key)
        if res.error is not None:
            entry[1] += 1
        else:
            if res.bw_gbs is not None:
                entry[2].append(res.bw_gbs)
            if res.lat_us is not None:
                entry[3].append(res.lat_us)
    return acc, first_pass


def _typical_best(rows: _Medians, idx: int, sign: int) -> float | None:
    """The rail's upper-quartile node: each node's best link (``sign`` +1: highest value, -1: lowest),
    then the quarter of nodes with the best of those. A slow node's every link is slow, a healthy
    node has a healthy partner: unless most nodes are slow, this is a healthy link's level however
    many of the links the slow nodes touch (half of a small ring's)."""
    best: dict[int, float] = {}
    for (_, a, b), bw, lat in rows:
        v = bw if idx == 1 else lat
        if v is None or v <= 0:
            continue
        for end in (a, b):
            old = best.get(end)
            if old is None or v * sign > old * sign:
                best[end] = v
    if not best:
        return None
    ordered = sorted((v * sign for v in best.values()), reverse=True)
    return ordered[(len(ordered) - 1) // 4] * sign


def _reference(
    rows: _Medians, first_pass: set[_Key], idx: int, sign: int, ratio: float
) -> list[float]:
    """The rail's reference values (module docstring): the first pass's links (all where it measured
    none), less those ``ratio`` or worse of the upper-quartile node's best link."""
    measured = [(key, bw if idx == 1 else lat) for key, bw, lat in rows]
    values = [v for key, v in measured if key in first_pass and v is not None]
    if not values:
        values = [v for _, v in measured if v is not None]
    top = _typical_best(rows, idx, sign)
    if top is None:
        return values
    if sign > 0:
        kept = [v for v in values if v > top * ratio]
    else:
        kept = [v for v in values if 0 < v < top / ratio]
    return kept or values


def _rail_stats(
    nodes: Sequence[FleetNode],
    acc: dict[_Key, list[Any]],
    first_pass: set[_Key],
    config: SweepConfig,
) -> tuple[dict[int, _Medians], dict[int, RailStats]]:
    """2. Rails: the typical link and the limits, from the reference links (module docstring)."""
    by_rail: dict[int, list[tuple[tuple[int, int, int], float | None, float | None]]] = {}
    for key, (_, _, bws, lats) in acc.items():
        by_rail.setdefault(key[0], []).append((key, _median(bws), _median(lats)))
    rails: dict[int, RailStats] = {}
    ratio = config.ratio_limit
    for k in sorted(by_rail):
        ref_bw = _reference(by_rail[k], first_pass, 1, +1, ratio)
        ref_lat = _reference(by_rail[k], first_pass, 2, -1, ratio)
        bw = robust_scale(ref_bw, floor_share=config.floor_share, healthy_side=+1, log=True)
        lat = robust_scale(ref_lat, floor_share=config.floor_share, healthy_side=-1, log=True)
        rates = [r.rate_gbps for node in nodes if (r := node.rail(k)) is not None and r.rate_gbps]
        use_z = bw.count >= config.z_min_links
        use_lat_z = lat.count >= config.z_min_links
        rails[k] = RailStats(
            rail=k,
            bw=bw,
            lat=lat,
            line_rate_gbps=_median(rates),
            bw_limit_gbs=_limit(bw.median, bw.at(-config.z_limit) if use_z else None, ratio),
            lat_limit_us=_limit(
                lat.median,
                lat.at(config.z_limit) if use_lat_z else None,
                1 / ratio if ratio else 0.0,
            ),
        )
    return by_rail, rails


def _limit(median: float | None, z_limit: float | None, ratio: float) -> float | None:
    """The value at which a link is slow: ``ratio x median`` (bandwidth, ratio < 1) or ``median /
    ratio_limit`` (latency, ratio > 1), or the z limit where that is stricter; positive or None."""
    if median is None or median <= 0:
        return None
    by_ratio = median * ratio
    if z_limit is None or by_ratio <= 0:
        return by_ratio if by_ratio > 0 else z_limit
    return max(by_ratio, z_limit) if ratio < 1 else min(by_ratio, z_limit)


#: Reference links below which a rail has nothing to compare a link with but the line rate.
MIN_COMPARABLE_LINKS = 3


def _link_rows(
    nodes: Sequence[FleetNode],
    acc: dict[_Key, list[Any]],
    by_rail: dict[int, _Medians],
    rails: dict[int, RailStats],
    config: SweepConfig,
) -> tuple[list[_LinkRow], dict[_End, list[tuple[int, bool]]]]:
    """3. Slow links (at or beyond the rail's limits, below the line rate where nothing else compares,
    or failed), and who each end met."""
    rate = {(node.rank, r.index): r.rate_gbps for node in nodes for r in node.rails if r.rate_gbps}
    link_rows: list[_LinkRow] = []
    adjacency: dict[tuple[int, int], list[tuple[int, bool]]] = {}
    line_floor = config.ratio_limit * config.min_bw_share
    for k, rows in by_rail.items():
        stats = rails[k]
        bw_limit, lat_limit = stats.bw_limit_gbs, stats.lat_limit_us
        alone = stats.bw.count < MIN_COMPARABLE_LINKS
        for key, bw_med, lat_med in rows:
            tests, failed = acc[key][0], acc[key][1]
            _, a, b = key
            ra, rb = rate.get((a, k)), rate.get((b, k))
            slower = min(ra, rb) if ra and rb else (ra or rb)
            share = share_of(bw_med, slower)
            slow = (
                failed > 0
                or (bw_med is not None and bw_limit is not None and bw_med <= bw_limit)
                or (bw_med is not None and bw_med <= 0)
                or (lat_med is not None and lat_limit is not None and lat_med >= lat_limit)
                or (alone and share is not None and share <= line_floor)
            )
            link_rows.append(
                (
                    key,
                    tests,
                    failed,
                    bw_med,
                    lat_med,
                    share,
                    stats.bw.z(bw_med),
                    stats.lat.z(lat_med),
                    slow,
                )
            )
            adjacency.setdefault((a, k), []).append((b, slow))
            adjacency.setdefault((b, k), []).append((a, slow))
    return link_rows, adjacency


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
    link_rows: list[_LinkRow], end_verdict: dict[_End, EndVerdict], fine_count: dict[_End, int]
) -> list[LinkStat]:
    """5. Links: explained by a bad end, a bad link, or unresolved."""
    links: list[LinkStat] = []
    for key, tests, failed, bw_med, lat_med, share, z, lat_z, slow in sorted(
        link_rows, key=lambda row: row[0]
    ):
        k, a, b = key
        verdict = LinkVerdict.OK
        if slow:
            va, vb = end_verdict[(a, k)], end_verdict[(b, k)]
            if EndVerdict.BAD in (va, vb):
                verdict = LinkVerdict.NODE
            elif EndVerdict.SUSPECT in (va, vb):
                verdict = LinkVerdict.UNRESOLVED
            elif fine_count[(a, k)] > 0 and fine_count[(b, k)] > 0:
                verdict = LinkVerdict.BAD
            else:
                verdict = LinkVerdict.UNRESOLVED
        links.append(
            LinkStat(k, a, b, tests, failed, bw_med, lat_med, share, z, lat_z, slow, verdict)
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
            bw_med = _median(end_bws.get(end, []))
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


def second_pass_plan(
    nodes: Sequence[FleetNode],
    first_results: Sequence[PairResult],
    config: SweepConfig = SweepConfig(),
) -> list[Round]:
    """The second pass's rounds from the first pass's results: each suspect against known-good nodes."""
    analysis = analyse(nodes, first_results, config)
    suspects, good = suspects_and_good(analysis)
    met: dict[int, set[int]] = {}
    for res in first_results:
        if res.phase is Phase.FIRST:
            met.setdefault(res.a, set()).add(res.b)
            met.setdefault(res.b, set()).add(res.a)
    return second_pass_rounds(suspects, good, met, partners=config.second_pass_partners)
