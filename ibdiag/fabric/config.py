"""``[fabric]`` settings. Counter thresholds, the rate limit and the xmit_wait assumption are
``[counters]``'s (the same meanings on a switch port as on a host port). Example::

    [fabric]
    expect_width = 4          # lanes every link must run at; 0: what its ends and its class's peers run
    expect_speed = "HDR"      # lane speed every link must run at where both ends can; "": no fabric-wide speed
    xmit_wait_warn_pct = 5    # a port waiting for credits this share of an interval or more warns
    congestion_share_pct = 25 # a port holding this share of the fabric's xmit_wait is where it concentrates
    congestion_min_ticks = 10000
    expect_oversubscription = 1.0  # leaves down:up as built (2.0 is 2:1); a fabric above it warns
    route_balance_tolerance = 0.5  # --routes: a leaf's busiest uplink over (1 + this) x the even share warns
"""

from __future__ import annotations

from dataclasses import dataclass

from ibdiag.errors import InputError
from ibdiag.fabric.model import LANE_GBPS


@dataclass(frozen=True)
class FabricConfig:
    expect_width: int = 0
    expect_speed: str = ""
    xmit_wait_warn_pct: float = 5.0
    congestion_share_pct: float = 25.0
    congestion_min_ticks: int = 10000
    expect_oversubscription: float = 1.0
    route_balance_tolerance: float = 0.5

    def __post_init__(self) -> None:
        if self.expect_width not in (0, 1, 2, 4, 8, 12):
            raise InputError(
                f"config [fabric] expect_width = {self.expect_width}",
                hint="0 (judged against its ends and its class's peers), 1, 2, 4, 8 or 12",
            )
        if self.expect_speed and self.expect_speed not in LANE_GBPS:
            raise InputError(
                f"config [fabric] expect_speed = {self.expect_speed[:20]!r}",
                hint=f'one of {", ".join(LANE_GBPS)}, or "" for no fabric-wide speed',
            )
        if not 0 < self.xmit_wait_warn_pct <= 100 or not 0 < self.congestion_share_pct <= 100:
            raise InputError(
                "config [fabric] percentages must be in (0, 100]",
                hint="e.g. xmit_wait_warn_pct = 5",
            )
        if not 0 < self.expect_oversubscription <= 64:
            raise InputError(
                f"config [fabric] expect_oversubscription = {self.expect_oversubscription:g}",
                hint="the leaves' down:up ratio as built, 1.0 (1:1, non-blocking) to 64; e.g. 2.0 for 2:1",
            )
        if not 0 <= self.route_balance_tolerance <= 10:
            raise InputError(
                f"config [fabric] route_balance_tolerance = {self.route_balance_tolerance:g}",
                hint="0 to 10: how far over the even share a leaf's busiest uplink may go; e.g. 0.5",
            )
        if self.congestion_min_ticks < 0:
            raise InputError(
                "config [fabric] congestion_min_ticks must be 0 or more", hint="e.g. 10000"
            )
