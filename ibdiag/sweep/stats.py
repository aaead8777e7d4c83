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
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

#: Consistency constant: 1.4826 x MAD estimates sigma for normal data (1 / Phi^-1(3/4)).
MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True)
class RobustScale:
    """Median, MAD and the scale (MAD as sigma, floored) of one set of values."""

    count: int
    median: float | None
    mad: float | None
    scale: float | None
    """``max(1.4826 x mad, floor_share x |median|)``; None without values, or when both are 0."""

    def z(self, value: float | None) -> float | None:
        """Robust distance of ``value`` from the median (negative below it); None when unknown."""
        if value is None or self.median is None or not self.scale:
            return None
        return (value - self.median) / self.scale

    def to_json(self) -> dict[str, float | int | None]:
        return {"count": self.count, "median": self.median, "mad": self.mad, "scale": self.scale}


def robust_scale(
    values: Sequence[float], *, floor_share: float, healthy_side: int = 0
) -> RobustScale:
    """The :class:`RobustScale` of ``values`` (an empty sequence gives unknowns).

    ``healthy_side`` +1 takes the MAD over the values at or above the median (bandwidth: faults lie
    below), -1 at or below it (latency), 0 over all (module docstring)."""
    if not values:
        return RobustScale(0, None, None, None)
    med = statistics.median(values)
    side = [v for v in values if healthy_side == 0 or (v - med) * healthy_side >= 0]
    mad = statistics.median([abs(v - med) for v in side])
    scale = max(MAD_TO_SIGMA * mad, floor_share * abs(med))
    return RobustScale(len(values), med, mad, scale if scale > 0 else None)


def gbs_text(v: float | None) -> str:
    """``48.2 GB/s``; below 1 GB/s three significant digits (``0.0218 GB/s``: a TCP or shaped link)."""
    if v is None:
        return "n/a"
    return f"{v:.1f} GB/s" if abs(v) >= 1 else f"{v:.3g} GB/s"
