"""The analysis of a sweep: per rail, link, node end and node, the values and the verdicts, in the
words :mod:`ibdiag.sweep.attribution` (which makes it) decides them by; and the sweep's thresholds."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ibdiag.sweep.stats import RobustScale
from ibdiag.units import gbs_to_gbps


@dataclass(frozen=True)
class SweepConfig:
    """Thresholds of the attribution; every default names its source."""

    z_limit: float = 5.0
    """Robust units (of ``ln(bw / median)``) below the rail's typical link at which a link is slow.
    For normal measurement noise 5 sigma is a false alarm in ~3e-7 of links (about one in 24 sweeps
    of 16384 nodes x 8 rails, ring + second pass); a real fault (a link at half speed) sits tens of
    units away."""
    floor_share: float = 0.02
    """Smallest scale, as a share of the median: with z_limit 5 nothing within ~10 % of the median
    is slow. perftest runs of one healthy link at a large message size repeat within ~1-2 %."""
    ratio_limit: float = 0.5
    """A link at or below this share of its rail's typical link is slow whatever the noise (a node
    or link at half speed or worse is a finding even where the spread hides it from ``z_limit``);
    where the rail holds fewer than 3 reference links (2 nodes) a link at or below ``ratio_limit x
    min_bw_share`` of its line rate is slow. 0.5: on a loaded host healthy TCP links spread over
    ±30 % (0.66-1.3 GB/s in one netns run), never to half the typical link."""
    z_min_links: int = 8
    """Reference links a rail needs before ``z_limit`` is applied: the MAD of fewer is too unsure
    (a small ring's few healthy links can agree by chance); below it only ``ratio_limit`` judges."""
    confirm_partners: int = 2
    """Slow partners, each fine with somebody else, that a bad node needs (the issue's "second pass:
    each suspect against >= 2 known-good nodes"): one slow partner cannot tell node from link."""
    second_pass_partners: int = 2
    """Known-good nodes each suspect meets in the second pass."""
    min_bw_share: float = 0.8
    """Median bandwidth of a rail below this share of its line rate is a fleet-wide warning (the same
    80 % as ``bench p2p``'s min_bw_share: below it a healthy link is not what is measured)."""
    confirm_max_rounds: int = 100
    """Most rounds the confirmation pass may add (each re-tests confounded links: alone where nothing
    proves tests apart). A round costs one pair test, about 2.5 s at the defaults: 100 rounds is about
    4 min. What is still confounded after it is a warning, never named bad. With the fabric known
    (``routes``, or ``hashed`` on two tiers) the re-tests pack many to a round."""


class LinkVerdict(str, Enum):
    OK = "ok"
    NODE = "node"
    """Slow, explained by a bad end."""
    BAD = "bad"
    """Slow while both ends are fine with others: the link (cable, switch port, route)."""
    UNRESOLVED = "unresolved"
    """Slow, and the evidence cannot tell the link from an end."""
    CONFOUNDED = "confounded"
    """Slow only in rounds where another test may have crossed a link of its path (a collision can be
    what was measured), and not re-tested alone: named neither slow nor fine."""

    def __str__(self) -> str:
        return self.value


class EndVerdict(str, Enum):
    OK = "ok"
    BAD = "bad"
    SUSPECT = "suspect"
    UNTESTED = "untested"

    def __str__(self) -> str:
        return self.value


class NodeStatus(str, Enum):
    OK = "ok"
    BAD = "bad"
    SUSPECT = "suspect"
    UNREACHABLE = "unreachable"
    UNTESTED = "untested"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class RailStats:
    rail: int
    bw: RobustScale
    """Over the bandwidths (GB/s) of the rail's reference links, in log space: the links the first
    pass tested (all its links where it measured none), less those at or below ``ratio_limit`` of the
    rail's upper-quartile node (each node's best link): the typical healthy link every link is
    judged against, which the slow links cannot drag down or widen."""
    lat: RobustScale
    """The same over their latencies (us); count 0 when latency was not measured."""
    line_rate_gbps: float | None
    """Median line rate of the rail's ports, where known."""
    bw_limit_gbs: float | None
    """Bandwidth at or below which a link is slow: the higher of ``median x exp(-z_limit x
    log_scale)`` (with ``z_min_links`` reference links or more) and ``median x ratio_limit``; never
    negative."""
    lat_limit_us: float | None

    @property
    def share(self) -> float | None:
        """The rail's median bandwidth as a share of its line rate."""
        return share_of(self.bw.median, self.line_rate_gbps)

    def to_json(self) -> dict[str, object]:
        return {
            "rail": self.rail,
            "links": self.bw.count,
            "median_bw_gbs": self.bw.median,
            "mad_bw_gbs": self.bw.mad,
            "scale_bw_gbs": self.bw.scale,
            "limit_bw_gbs": self.bw_limit_gbs,
            "median_lat_us": self.lat.median,
            "scale_lat_us": self.lat.scale,
            "limit_lat_us": self.lat_limit_us,
            "line_rate_gbps": self.line_rate_gbps,
            "line_rate_share": self.share,
        }


@dataclass(frozen=True, slots=True)
class LinkStat:
    rail: int
    a: int
    b: int
    """Ranks, ``a < b``."""
    tests: int
    failed: int
    """Tests that failed with both ends answering."""
    bw_gbs: float | None
    """Median bandwidth over the link's successful tests."""
    lat_us: float | None
    share: float | None
    """``bw_gbs`` as a share of the slower end's line rate."""
    z: float | None
    """Robust distance of ``bw_gbs`` from the rail's median (negative: slower)."""
    lat_z: float | None
    slow: bool
    """Slow on clear evidence: a failed test, or slow in a test no other test may have collided with."""
    verdict: LinkVerdict
    confounded: bool = False
    """Slow only in shared rounds (:class:`LinkVerdict` ``confounded`` unless an end is bad)."""
    cleared: bool = False
    """Slow in a shared round, fine when re-tested alone: a collision, not the link."""
    clean_tests: int = 0
    """Its answered tests that ran alone, or in a round proven free of shared links."""

    def to_json(self) -> dict[str, object]:
        return {
            "rail": self.rail,
            "a": self.a,
            "b": self.b,
            "tests": self.tests,
            "failed": self.failed,
            "bw_gbs": self.bw_gbs,
            "lat_us": self.lat_us,
            "line_rate_share": self.share,
            "z": self.z,
            "lat_z": self.lat_z,
            "slow": self.slow,
            "verdict": self.verdict.value,
            "confounded": self.confounded,
            "cleared": self.cleared,
            "clean_tests": self.clean_tests,
        }


@dataclass(frozen=True, slots=True)
class EndStat:
    """One node's rail: its partners, how many were slow, and what that makes it."""

    rank: int
    rail: int
    partners: int
    slow_partners: int
    confirming: int
    """Slow partners that are fine with somebody else."""
    bw_gbs: float | None
    """Median bandwidth over this end's links."""
    share: float | None
    z: float | None
    verdict: EndVerdict

    def to_json(self) -> dict[str, object]:
        return {
            "rail": self.rail,
            "partners": self.partners,
            "slow_partners": self.slow_partners,
            "confirming_partners": self.confirming,
            "bw_gbs": self.bw_gbs,
            "line_rate_share": self.share,
            "z": self.z,
            "verdict": self.verdict.value,
        }


@dataclass(frozen=True)
class NodeVerdict:
    rank: int
    status: NodeStatus
    ends: tuple[EndStat, ...]
    """One per rail tested, in rail order."""

    @property
    def bad_rails(self) -> tuple[int, ...]:
        return tuple(e.rail for e in self.ends if e.verdict is EndVerdict.BAD)

    @property
    def suspect_rails(self) -> tuple[int, ...]:
        return tuple(e.rail for e in self.ends if e.verdict is EndVerdict.SUSPECT)

    @property
    def whole_node(self) -> bool:
        """Most of its rails are bad: the node, not one adapter or cable, is the problem."""
        return 2 * len(self.bad_rails) > len(self.ends)

    def worst_end(self) -> EndStat | None:
        """The end with the lowest robust distance (the slowest rail); the first when none has one."""
        scored = [(e.z, e.rail, e) for e in self.ends if e.z is not None]
        if scored:
            return min(scored, key=lambda t: (t[0], t[1]))[2]
        return self.ends[0] if self.ends else None


@dataclass(frozen=True)
class Analysis:
    config: SweepConfig
    rails: tuple[RailStats, ...]
    links: tuple[LinkStat, ...]
    nodes: tuple[NodeVerdict, ...]
    """One per rank, in rank order."""
    cleared_nodes: tuple[int, ...] = ()
    """Ranks the shared rounds' slow results alone would have made suspect or bad, fine on the
    re-tests alone (the confirmation pass cleared them)."""

    @property
    def cleared_links(self) -> tuple[LinkStat, ...]:
        return tuple(link for link in self.links if link.cleared)

    @property
    def unreachable(self) -> tuple[int, ...]:
        return tuple(n.rank for n in self.nodes if n.status is NodeStatus.UNREACHABLE)

    @property
    def bad_nodes(self) -> tuple[NodeVerdict, ...]:
        return tuple(n for n in self.nodes if n.status is NodeStatus.BAD)

    def links_with(self, verdict: LinkVerdict) -> tuple[LinkStat, ...]:
        return tuple(link for link in self.links if link.verdict is verdict)

    def rail(self, index: int) -> RailStats | None:
        return next((r for r in self.rails if r.rail == index), None)


def share_of(bw_gbs: float | None, rate_gbps: float | None) -> float | None:
    """GB/s as a share of a line rate in Gb/s (x 8 bits per byte)."""
    if bw_gbs is None or not rate_gbps:
        return None
    return gbs_to_gbps(bw_gbs) / rate_gbps
