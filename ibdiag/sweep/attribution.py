"""What a sweep's results mean: per link and per node values, robust distances, and attribution.

Per rail (rail k is compared with rail k only), every tested link gets its bandwidth (the median of
its tests), its share of the line rate and its robust distance ``z`` from the rail's median
(:mod:`ibdiag.sweep.stats`; the MAD on the healthy side only). The rail's median and scale come from
the links the first pass tested: the second pass is a biased sample by design (every suspect against
good nodes, so a bad node adds slow links), and in a small fleet its links would drag the median
toward the faults it is meant to confirm. A link is *slow* when ``z <= -z_limit`` (or its latency's ``z >=
z_limit``), or when a test of it failed while both ends answered. Then, per node end (node, rail):

* **bad node** (rail): slow with most of its partners (more than half), and confirmed: at least
  ``confirm_partners`` of those slow partners are fine with somebody else — the second pass makes
  sure every suspect meets at least two nodes already known good. Its slow links are explained by it.
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


def _answered_tests(results: list[PairResult], n: int) -> tuple[dict[_Key, list], set[_Key]]:
    """1. Links: every answered test of (rail, a, b), whichever end served: [tests, failed, bws, lats];
    and the links the first pass measured."""
    acc: dict[tuple[int, int, int], list] = {}
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


def _rail_stats(
    nodes: Sequence[FleetNode],
    acc: dict[_Key, list],
    first_pass: set[_Key],
    config: SweepConfig,
) -> tuple[dict[int, _Medians], dict[int, RailStats]]:
    """2. Rails: robust scale over the links' medians."""
    by_rail: dict[int, list[tuple[tuple[int, int, int], float | None, float | None]]] = {}
    for key, (_, _, bws, lats) in acc.items():
        by_rail.setdefault(key[0], []).append((key, _median(bws), _median(lats)))
    rails: dict[int, RailStats] = {}
    for k in sorted(by_rail):
        # The reference: the first pass's links, where the rail has measured ones (module docstring).
        ref = [row for row in by_rail[k] if row[0] in first_pass]
        ref_bw = [v for _, v, _ in ref if v is not None] or [
            v for _, v, _ in by_rail[k] if v is not None
        ]
        ref_lat = [v for _, _, v in ref if v is not None] or [
            v for _, _, v in by_rail[k] if v is not None
        ]
        bw = robust_scale(ref_bw, floor_share=config.floor_share, healthy_side=+1)
        lat = robust_scale(ref_lat, floor_share=config.floor_share, healthy_side=-1)
        rates = [r.rate_gbps for node in nodes if (r := node.rail(k)) is not None and r.rate_gbps]
        rails[k] = RailStats(
            rail=k,
            bw=bw,
            lat=lat,
            line_rate_gbps=_median(rates),
            bw_limit_gbs=None
            if bw.median is None or bw.scale is None
            else bw.median - config.z_limit * bw.scale,
            lat_limit_us=None
            if lat.median is None or lat.scale is None
            else lat.median + config.z_limit * lat.scale,
        )
    return by_rail, rails


def _link_rows(
    nodes: Sequence[FleetNode],
    acc: dict[_Key, list],
    by_rail: dict[int, _Medians],
    rails: dict[int, RailStats],
    config: SweepConfig,
) -> tuple[list[_LinkRow], dict[_End, list[tuple[int, bool]]]]:
    """3. Slow links, and who each end met."""
    rate = {(node.rank, r.index): r.rate_gbps for node in nodes for r in node.rails if r.rate_gbps}
    link_rows: list[_LinkRow] = []
    adjacency: dict[tuple[int, int], list[tuple[int, bool]]] = {}
    for k, rows in by_rail.items():
        stats = rails[k]
        for key, bw_med, lat_med in rows:
            tests, failed = acc[key][0], acc[key][1]
            z = stats.bw.z(bw_med)
            lat_z = stats.lat.z(lat_med)
            slow = (
                failed > 0
                or (z is not None and z <= -config.z_limit)
                or (lat_z is not None and lat_z >= config.z_limit)
            )
            _, a, b = key
            ra, rb = rate.get((a, k)), rate.get((b, k))
            slower = min(ra, rb) if ra and rb else (ra or rb)
            link_rows.append(
                (key, tests, failed, bw_med, lat_med, share_of(bw_med, slower), z, lat_z, slow)
            )
            adjacency.setdefault((a, k), []).append((b, slow))
            adjacency.setdefault((b, k), []).append((a, slow))
    return link_rows, adjacency


def _end_verdicts(
    adjacency: dict[_End, list[tuple[int, bool]]],
    fine_count: dict[_End, int],
    config: SweepConfig,
) -> tuple[dict[_End, EndVerdict], dict[_End, tuple[int, int, int]]]:
    """4. Ends: bad when most partners are slow and enough of them are fine elsewhere."""
    end_verdict: dict[tuple[int, int], EndVerdict] = {}
    end_counts: dict[tuple[int, int], tuple[int, int, int]] = {}
    for end, met in adjacency.items():
        slow_partners = [p for p, slow in met if slow]
        confirming = sum(1 for p in slow_partners if fine_count.get((p, end[1]), 0) > 0)
        if 2 * len(slow_partners) > len(met):
            verdict = (
                EndVerdict.BAD if confirming >= config.confirm_partners else EndVerdict.SUSPECT
            )
        else:
            verdict = EndVerdict.OK
        end_verdict[end] = verdict
        end_counts[end] = (len(met), len(slow_partners), confirming)
    return end_verdict, end_counts


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
    """After the first pass: ranks with a slow link (suspects), and ranks with tests and none slow (good)."""
    slow_ranks: set[int] = set()
    tested: set[int] = set()
    for link in analysis.links:
        tested.update((link.a, link.b))
        if link.slow:
            slow_ranks.update((link.a, link.b))
    dead = set(analysis.unreachable)
    suspects = sorted(slow_ranks - dead)
    good = sorted(tested - slow_ranks - dead)
    return suspects, good


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
