"""``[collective]`` settings: straggler detection and expectations for ``ibdiag bench collective``.

Example::

    [collective]
    straggler_share = 0.2       # a rank that keeps the others waiting 20 % of each collective
    min_busbw_gbs = 170         # fail when the largest size's busbw is lower (8 x 400G rails, NVLink inside)
    max_setup_s = 120           # warn when the rendezvous takes longer
"""

from __future__ import annotations

from dataclasses import dataclass

from ibdiag.errors import InputError


@dataclass(frozen=True)
class CollectiveConfig:
    """``[collective]`` settings (also used by ``ibdiag bench import`` for nccl-tests logs)."""

    straggler_share: float = 0.2
    """A rank is late when the other ranks wait for it, per collective, more than this share of the
    collective's time (median rank's in-collective time minus its own, over the row's time). 0.2:
    on a healthy node the arrival skew between ranks stays within a few percent of a bandwidth-bound
    collective (nccl-tests reports min/max rank times within ~5 % on healthy DGX-class systems); a fifth
    is well outside that noise and is the scale of slowdown seed 000 describes ("one rank ... makes 511
    GPUs wait")."""
    straggler_min_fraction: float = 0.5
    """"Consistently": late in at least this fraction of the rows judged (one slow row is jitter)."""
    straggler_min_time_us: float = 50.0
    """Rows faster than this (µs) are not judged: a latency-bound collective of a few µs is dominated by
    scheduling noise (a single OS timer tick is 1-4 ms, a context switch several µs)."""
    min_busbw_gbs: float | None = None
    """Fail when the busbw of the largest size measured is below this (GB/s). None: no expectation.
    Compare with rails x per-rail bandwidth (DESIGN.md: busbw vs r x rail bandwidth)."""
    max_setup_s: float | None = None
    """Warn when the rendezvous (process-group setup and first collective) takes longer (s). None: no
    expectation. At thousands of ranks naive setup takes minutes (seed 001: over 15 minutes at 10,000
    GPUs, under 30 s after tuning)."""

    def __post_init__(self) -> None:
        if not 0 < self.straggler_share < 10:
            raise InputError(
                "config [collective] straggler_share must be above 0 (a share, e.g. 0.2)",
                hint="e.g. straggler_share = 0.2",
            )
        if not 0 < self.straggler_min_fraction <= 1:
            raise InputError(
                "config [collective] straggler_min_fraction must be in (0, 1]",
                hint="e.g. straggler_min_fraction = 0.5",
            )
        if self.straggler_min_time_us < 0:
            raise InputError(
                "config [collective] straggler_min_time_us must not be negative",
                hint="e.g. straggler_min_time_us = 50",
            )
        if self.min_busbw_gbs is not None and self.min_busbw_gbs <= 0:
            raise InputError(
                "config [collective] min_busbw_gbs must be positive",
                hint="e.g. min_busbw_gbs = 170",
            )
        if self.max_setup_s is not None and self.max_setup_s <= 0:
            raise InputError(
                "config [collective] max_setup_s must be positive", hint="e.g. max_setup_s = 120"
            )
