"""``[sweep]`` settings: defaults of ``ibdiag sweep``'s options and the attribution's thresholds.

Example::

    [sweep]
    pattern = "ring"            # --pattern
    sizes = "64M"               # --sizes: the message size of each bandwidth test
    duration_s = 1.0            # --duration: measured seconds per pair test
    timeout_s = 10.0            # --timeout: a node silent this long is unreachable
    start_timeout_s = 60.0      # how long rank 0 waits for every node to start
    z_limit = 5.0               # robust units below the rail's median at which a link is slow
    floor_share = 0.02          # smallest robust scale, as a share of the median
    ratio_limit = 0.5           # a link at or below this share of the rail's typical link is slow
    z_min_links = 8             # reference links a rail needs before z_limit applies
    confirm_partners = 2        # slow partners, each fine elsewhere, that a bad node needs
    second_pass_partners = 2    # known-good nodes each suspect meets in the second pass
    min_bw_share = 0.8          # a rail's median below this share of line rate warns
    confirm_max_rounds = 100    # most rounds the confirmation pass adds (0: none)

A flag given on the command line wins over the file. The thresholds' defaults and their sources are
:class:`~ibdiag.sweep.analysis.SweepConfig`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

from ibdiag.config import bounded
from ibdiag.errors import InputError
from ibdiag.sweep.analysis import SweepConfig

PATTERNS = ("ring", "pairwise", "random")
TRANSPORTS = ("auto", "rdma", "tcp")


@dataclass(frozen=True)
class SweepSettingsFile:
    """``[sweep]`` as read from the config file (every key optional)."""

    pattern: str = "ring"
    transport: str = "auto"
    sizes: str = "64M"
    duration_s: float = bounded(1.0, low=0, low_open=True, high=3600)
    timeout_s: float = bounded(10.0, low=0, low_open=True, high=3600)
    start_timeout_s: float = bounded(60.0, low=0, low_open=True, high=3600)
    z_limit: float = bounded(SweepConfig.z_limit, low=0.5, high=1000)
    floor_share: float = bounded(SweepConfig.floor_share, low=0, high=1)
    ratio_limit: float = bounded(SweepConfig.ratio_limit, low=0, high=0.95)
    z_min_links: int = bounded(SweepConfig.z_min_links, low=1, high=100000)
    confirm_partners: int = bounded(SweepConfig.confirm_partners, low=1, high=1000)
    second_pass_partners: int = bounded(SweepConfig.second_pass_partners, low=0, high=1000)
    min_bw_share: float = bounded(SweepConfig.min_bw_share, low=0, high=1)
    confirm_max_rounds: int = bounded(SweepConfig.confirm_max_rounds, low=0, high=100000)

    def __post_init__(self) -> None:
        if self.pattern not in PATTERNS:
            raise InputError(
                f"config [sweep] pattern {self.pattern!r} is not one of {', '.join(PATTERNS)}",
                hint='e.g. pattern = "ring"',
            )
        if self.transport not in TRANSPORTS:
            raise InputError(
                f"config [sweep] transport {self.transport!r} is not one of {', '.join(TRANSPORTS)}",
                hint='e.g. transport = "auto" (rdma, else tcp; "rdma" refuses a node without RDMA)',
            )

    def thresholds(self) -> SweepConfig:
        return SweepConfig(
            z_limit=self.z_limit,
            floor_share=self.floor_share,
            ratio_limit=self.ratio_limit,
            z_min_links=self.z_min_links,
            confirm_partners=self.confirm_partners,
            second_pass_partners=self.second_pass_partners,
            min_bw_share=self.min_bw_share,
            confirm_max_rounds=self.confirm_max_rounds,
        )
