"""Per link of a sweep: its tests, its value, the rail's typical link and limits, and whether it is slow.

Every answered test of (rail, a, b), whichever end served, counts for the link. A test that ran in a
round where another test may have crossed a link of its path (:attr:`PairResult.shared`) can only have
been slowed by that, never sped up: its fine result is evidence of a fine link, its slow result proves
nothing (*confounded*). So a link's value is the median of its *clean* tests (alone in their round, or
in a round proven free of shared links) and of the shared ones better than those, else the best of
its shared ones; a link
slow on that value with no clean test is confounded — not slow, not fine, and not evidence against its
ends — until the confirmation pass re-tests it alone; a link with a slow shared test and a clean value
that is fine was *cleared* by that re-test.

The rail's reference, limits and robust scale are the attribution's (:mod:`~ibdiag.sweep.attribution`'s
module docstring): the first pass's links less those at or below ``ratio_limit`` of the rail's
upper-quartile node, over their values as above.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from ibdiag.sweep.analysis import RailStats, SweepConfig, share_of
from ibdiag.sweep.nodes import FleetNode
from ibdiag.sweep.runner import PairResult
from ibdiag.sweep.schedule import Phase
from ibdiag.sweep.stats import robust_scale

Key = tuple[int, int, int]
"""A link: (rail, lower rank, higher rank)."""

End = tuple[int, int]
"""One end of links: (rank, rail)."""

#: Reference links below which a rail has nothing to compare a link with but the line rate.
MIN_COMPARABLE_LINKS = 3


def median(values: Sequence[float]) -> float | None:
    if len(values) <= 2:  # most links are tested once or twice: skip the sort
        return (
            None if not values else (values[0] if len(values) == 1 else (values[0] + values[1]) / 2)
        )
    return statistics.median(values)


class Tests:
    """One link's answered tests: counts, and values apart by clean and shared."""

    __slots__ = ("tests", "failed", "bws", "lats", "shared_bws", "shared_lats", "clean")

    def __init__(self) -> None:
        self.tests = self.failed = self.clean = 0
        self.bws: list[float] = []
        self.lats: list[float] = []
        self.shared_bws: list[float] = []
        self.shared_lats: list[float] = []

    def add(self, res: PairResult) -> None:
        self.tests += 1
        if res.error is not None:
            self.failed += 1
            return
        if not res.shared:
            self.clean += 1
        bws, lats = (self.shared_bws, self.shared_lats) if res.shared else (self.bws, self.lats)
        if res.bw_gbs is not None:
            bws.append(res.bw_gbs)
        if res.lat_us is not None:
            lats.append(res.lat_us)

    @property
    def bw(self) -> float | None:
        """A collision only slows a test, so a shared result is a lower bound: without clean results,
        the best shared one; with them, the median of the clean ones and of the shared ones above
        their median (a clean result the host's noise made low does not outvote what the link did)."""
        if not self.bws:
            return max(self.shared_bws, default=None)
        m = median(self.bws)
        above = [v for v in self.shared_bws if m is not None and v > m]
        return median(self.bws + above) if above else m

    @property
    def lat(self) -> float | None:
        if not self.lats:
            return min(self.shared_lats, default=None)
        m = median(self.lats)
        below = [v for v in self.shared_lats if m is not None and v < m]
        return median(self.lats + below) if below else m


def answered_tests(results: Sequence[PairResult], n: int) -> tuple[dict[Key, Tests], set[Key]]:
    """Every answered test of each link, and the links the first pass measured."""
    acc: dict[Key, Tests] = {}
    first_pass: set[Key] = set()
    for res in results:
        if res.unreachable or not (0 <= res.a < n and 0 <= res.b < n) or res.a == res.b:
            continue
        key = (res.rail, res.a, res.b) if res.a < res.b else (res.rail, res.b, res.a)
        entry = acc.get(key)
        if entry is None:
            entry = acc[key] = Tests()
        entry.add(res)
        if res.phase is Phase.FIRST:
            first_pass.add(key)
    return acc, first_pass


_Medians = list[tuple[Key, float | None, float | None]]


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


#: Clean links (measured alone, or proven apart) from which a rail's reference may be theirs alone.
MIN_CLEAN_REFERENCE = 3


def _reference(
    rows: _Medians, first_pass: set[Key], idx: int, sign: int, ratio: float, clean: set[Key]
) -> list[float]:
    """The rail's reference values: the first pass's links (all where it measured none), less those
    ``ratio`` or worse of the upper-quartile node's best link. A collision only slows a test, so
    when the rail has :data:`MIN_CLEAN_REFERENCE` clean links or more and they are better than the
    whole reference, the shared values are biased low by collisions: the clean ones alone are the
    reference (what the confirmation pass's calibration re-tests are for)."""
    measured = [(key, bw if idx == 1 else lat) for key, bw, lat in rows]
    keys = {key for key, v in measured if key in first_pass and v is not None} or {
        key for key, v in measured if v is not None
    }
    top = _typical_best(rows, idx, sign)

    def kept(values: list[float]) -> list[float]:
        if top is None:
            return values
        if sign > 0:
            out = [v for v in values if v > top * ratio]
        else:
            out = [v for v in values if 0 < v < top / ratio]
        return out or values

    everything = kept([v for key, v in measured if key in keys and v is not None])
    alone = kept([v for key, v in measured if key in keys and key in clean and v is not None])
    if len(alone) >= MIN_CLEAN_REFERENCE and everything:
        if statistics.median(alone) * sign > statistics.median(everything) * sign:
            return alone
    return everything


def rail_stats(
    nodes: Sequence[FleetNode], acc: dict[Key, Tests], first_pass: set[Key], config: SweepConfig
) -> tuple[dict[int, _Medians], dict[int, RailStats]]:
    """Rails: the typical link and the limits, from the reference links."""
    by_rail: dict[int, _Medians] = {}
    for key, t in acc.items():
        by_rail.setdefault(key[0], []).append((key, t.bw, t.lat))
    rails: dict[int, RailStats] = {}
    ratio = config.ratio_limit
    clean_bw = {key for key, t in acc.items() if t.bws}
    clean_lat = {key for key, t in acc.items() if t.lats}
    for k in sorted(by_rail):
        ref_bw = _reference(by_rail[k], first_pass, 1, +1, ratio, clean_bw)
        ref_lat = _reference(by_rail[k], first_pass, 2, -1, ratio, clean_lat)
        bw = robust_scale(ref_bw, floor_share=config.floor_share, healthy_side=+1, log=True)
        lat = robust_scale(ref_lat, floor_share=config.floor_share, healthy_side=-1, log=True)
        rates = [r.rate_gbps for node in nodes if (r := node.rail(k)) is not None and r.rate_gbps]
        use_z = bw.count >= config.z_min_links
        use_lat_z = lat.count >= config.z_min_links
        rails[k] = RailStats(
            rail=k,
            bw=bw,
            lat=lat,
            line_rate_gbps=median(rates),
            bw_limit_gbs=_limit(bw.median, bw.at(-config.z_limit) if use_z else None, ratio),
            lat_limit_us=_limit(
                lat.median,
                lat.at(config.z_limit) if use_lat_z else None,
                1 / ratio if ratio else 0.0,
            ),
        )
    return by_rail, rails


def _limit(median_value: float | None, z_limit: float | None, ratio: float) -> float | None:
    """The value at which a link is slow: ``ratio x median`` (bandwidth, ratio < 1) or ``median /
    ratio_limit`` (latency, ratio > 1), or the z limit where that is stricter; positive or None."""
    if median_value is None or median_value <= 0:
        return None
    by_ratio = median_value * ratio
    if z_limit is None or by_ratio <= 0:
        return by_ratio if by_ratio > 0 else z_limit
    return max(by_ratio, z_limit) if ratio < 1 else min(by_ratio, z_limit)


@dataclass(frozen=True, slots=True)
class LinkRow:
    """One link judged against its rail (before its ends are)."""

    key: Key
    tests: int
    failed: int
    bw: float | None
    lat: float | None
    share: float | None
    z: float | None
    lat_z: float | None
    slow: bool
    """Evidence of a slow link: a failed test, or slow on a clean value."""
    confounded: bool
    """Slow on its value, every test of it shared: proves nothing until re-tested alone."""
    cleared: bool
    """A shared test of it was slow, its clean value is not."""
    clean: int = 0
    """Its answered tests no other test may have collided with."""


def _beyond(bw: float | None, lat: float | None, stats: RailStats) -> bool:
    return (
        (bw is not None and stats.bw_limit_gbs is not None and bw <= stats.bw_limit_gbs)
        or (bw is not None and bw <= 0)
        or (lat is not None and stats.lat_limit_us is not None and lat >= stats.lat_limit_us)
    )


def link_rows(
    nodes: Sequence[FleetNode],
    acc: dict[Key, Tests],
    by_rail: dict[int, _Medians],
    rails: dict[int, RailStats],
    config: SweepConfig,
) -> tuple[list[LinkRow], dict[End, list[tuple[int, bool]]]]:
    """Each link judged (slow, confounded or cleared), and who each end met with clear evidence
    (confounded links are left out: they tell neither slow nor fine)."""
    rate = {(node.rank, r.index): r.rate_gbps for node in nodes for r in node.rails if r.rate_gbps}
    rows: list[LinkRow] = []
    adjacency: dict[End, list[tuple[int, bool]]] = {}
    line_floor = config.ratio_limit * config.min_bw_share
    for k, medians in by_rail.items():
        stats = rails[k]
        alone = stats.bw.count < MIN_COMPARABLE_LINKS
        for key, bw_med, lat_med in medians:
            t = acc[key]
            _, a, b = key
            ra, rb = rate.get((a, k)), rate.get((b, k))
            share = share_of(bw_med, min(ra, rb) if ra and rb else (ra or rb))
            beyond = _beyond(bw_med, lat_med, stats) or (
                alone and share is not None and share <= line_floor
            )
            confounded = beyond and t.failed == 0 and t.clean == 0
            slow = t.failed > 0 or (beyond and not confounded)
            cleared = (
                not slow
                and t.clean > 0
                and (
                    any(_beyond(v, None, stats) for v in t.shared_bws)
                    or any(_beyond(None, v, stats) for v in t.shared_lats)
                )
            )
            rows.append(
                LinkRow(
                    key,
                    t.tests,
                    t.failed,
                    bw_med,
                    lat_med,
                    share,
                    stats.bw.z(bw_med),
                    stats.lat.z(lat_med),
                    slow,
                    confounded,
                    cleared,
                    t.clean,
                )
            )
            if not confounded:
                adjacency.setdefault((a, k), []).append((b, slow))
                adjacency.setdefault((b, k), []).append((a, slow))
    return rows, adjacency
