"""Robust statistics: the fleet median and the median absolute deviation (MAD) with a floor.

A bad node or link is an outlier against the rest of the fleet, so its distance is measured in robust
units that the outliers themselves barely move: ``z = (value - median) / scale`` with
``scale = max(1.4826 x MAD, floor_share x |median|)``. 1.4826 makes the MAD estimate the standard
deviation of normally distributed noise (Rousseeuw & Croux 1993); the floor keeps a perfectly uniform
fleet (MAD 0) from calling a 0.1 % wobble an outlier.

The MAD can be taken on one side of the median only (``healthy_side``): a fault only makes a link
slower (less bandwidth, more latency), so the deviations on the other side are healthy noise alone.
Over both sides the faults widen the MAD themselves: with 2 slow links among a small ring's 5 (what
a six-node sweep with a slow node, a slow link and a dead node has), the MAD is the largest healthy
deviation, and 20 % noise among the healthy links hides links at a quarter of their speed. For
normal noise the half-normal's median absolute value is the same 0.6745 sigma, so 1.4826 still
holds; the median itself still breaks down only at half the links.

With ``log=True`` (what the sweep's attribution uses) the deviations are taken as ratios,
``ln(value / median)``: a slowdown is a factor, so 20 % noise around 1 GB/s and around 50 GB/s are the
same spread, and a limit ``median x exp(-k x scale)`` is never negative however wide the noise.
``mad`` and ``scale`` are then still given in the values' unit (``median x`` the log-space figure,
what they are for small spreads), and :meth:`RobustScale.z` measures in log units.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

#: Consistency constant: 1.4826 x MAD estimates sigma for normal data (1 / Phi^-1(3/4)).
MAD_TO_SIGMA = 1.4826

SMALL_SAMPLE = 2.0


@dataclass(frozen=True)
class RobustScale:
    """Median, MAD and the scale (MAD as sigma, floored) of one set of values."""

    count: int
    median: float | None
    mad: float | None
    scale: float | None
    """``max(1.4826 x mad, floor_share x |median|)``; None without values, or when both are 0."""
    log_scale: float | None = None
    """Set by ``robust_scale(..., log=True)``: the scale of ``ln(value / median)`` (``scale / median``)."""

    def z(self, value: float | None) -> float | None:
        """Robust distance of ``value`` from the median (negative below it); None when unknown (and,
        in log space, for a value or median that is not positive)."""
        if value is None or self.median is None or not self.scale:
            return None
        if self.log_scale is not None:
            if value <= 0 or self.median <= 0:
                return None
            return math.log(value / self.median) / self.log_scale
        return (value - self.median) / self.scale

    def at(self, z: float) -> float | None:
        """The value at robust distance ``z`` (the inverse of :meth:`z`); in log space always positive."""
        if self.median is None or not self.scale:
            return None
        if self.log_scale is not None:
            return self.median * math.exp(z * self.log_scale)
        return self.median + z * self.scale

    def to_json(self) -> dict[str, float | int | None]:
        return {"count": self.count, "median": self.median, "mad": self.mad, "scale": self.scale}


def robust_scale(
    values: Sequence[float], *, floor_share: float, healthy_side: int = 0, log: bool = False
) -> RobustScale:
    """The :class:`RobustScale` of ``values`` (an empty sequence gives unknowns).

    ``healthy_side`` +1 takes the MAD over the values at or above the median (bandwidth: faults lie
    below), -1 at or below it (latency), 0 over all; ``log`` measures deviations as ratios, over the
    positive values only (module docstring)."""
    if log:
        return _log_scale([v for v in values if v > 0], floor_share, healthy_side)
    if not values:
        return RobustScale(0, None, None, None)
    med = statistics.median(values)
    side = [v for v in values if healthy_side == 0 or (v - med) * healthy_side >= 0]
    mad = statistics.median([abs(v - med) for v in side])
    scale = max(MAD_TO_SIGMA * mad, floor_share * abs(med))
    return RobustScale(len(values), med, mad, scale if scale > 0 else None)


def _log_scale(values: Sequence[float], floor_share: float, healthy_side: int) -> RobustScale:
    if not values:
        return RobustScale(0, None, None, None)
    med = statistics.median(values)
    devs = [math.log(v / med) for v in values]
    side = [d for d in devs if healthy_side == 0 or d * healthy_side >= 0]
    mad = max(statistics.median([abs(d) for d in side]), statistics.median([abs(d) for d in devs]))
    scale = max(MAD_TO_SIGMA * mad * (1 + SMALL_SAMPLE / math.sqrt(len(values))), floor_share)
    if scale <= 0:
        return RobustScale(len(values), med, mad * med, None)
    return RobustScale(len(values), med, mad * med, scale * med, scale)


def gbs_text(v: float | None) -> str:
    """``48.2 GB/s``; below 1 GB/s three significant digits (``0.0218 GB/s``: a TCP or shaped link)."""
    if v is None:
        return "n/a"
    return f"{v:.1f} GB/s" if abs(v) >= 1 else f"{v:.3g} GB/s"
