"""Paired comparisons for the benchmark scripts: A B, B A, A B ... and the median of the pair ratios.

Each pair runs ibdiag and the reference back to back, the order alternating from pair to pair, so a
disturbance from other work on the machine hits both sides of a pair alike. A script reports, per
comparison, the median of the pair ratios (ibdiag / reference), their spread (lowest and highest
pair) and the target; ``make bench`` sets ``IBDIAG_BENCH_SUMMARY`` to a file and prints every line
written there at the end, so all ratios and targets appear together.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Paired:
    """``pairs`` measurements of ibdiag (``mine``) and the reference (``theirs``), pair by pair."""

    mine: tuple[float, ...]
    theirs: tuple[float, ...]

    @property
    def ratios(self) -> tuple[float, ...]:
        return tuple(a / b for a, b in zip(self.mine, self.theirs, strict=True) if b)

    @property
    def median_ratio(self) -> float:
        return statistics.median(self.ratios)

    @property
    def spread(self) -> tuple[float, float]:
        return min(self.ratios), max(self.ratios)

    @classmethod
    def of(
        cls, mine: Sequence[Sequence[float]], theirs: Sequence[Sequence[float]], index: int
    ) -> Paired:
        """Figure ``index`` of measurements that return several (bandwidth, CPU s/GB, ...)."""
        return cls(tuple(m[index] for m in mine), tuple(t[index] for t in theirs))


def alternate(
    mine: Callable[[], T],
    theirs: Callable[[], T],
    pairs: int,
    *,
    on_pair: Callable[[int, T, T], None] | None = None,
) -> tuple[list[T], list[T]]:
    """``pairs`` rounds of both; even rounds run ibdiag first, odd rounds the reference first."""
    a: list[T] = []
    b: list[T] = []
    for i in range(pairs):
        if i % 2 == 0:
            a.append(mine())
            b.append(theirs())
        else:
            b.append(theirs())
            a.append(mine())
        if on_pair is not None:
            on_pair(i, a[-1], b[-1])
    return a, b


def run_pairs(
    mine: Callable[[], float],
    theirs: Callable[[], float],
    pairs: int,
    *,
    on_pair: Callable[[int, float, float], None] | None = None,
) -> Paired:
    """:func:`alternate` for measurements of one figure."""
    a, b = alternate(mine, theirs, pairs, on_pair=on_pair)
    return Paired(tuple(a), tuple(b))


def verdict(ratio: float, op: str, target: float) -> str:
    """PASS when ``ratio op target`` holds (``op`` is ``>=`` or ``<=``), else MISS."""
    ok = ratio >= target if op == ">=" else ratio <= target
    return "PASS" if ok else "MISS"


def report(name: str, result: Paired, op: str | None, target: float | None, unit: str = "") -> str:
    """One line: median ratio, spread over the pairs, medians of both sides, target and PASS/MISS
    (``op`` None: a figure shown for information, no target).

    Printed, and appended to ``$IBDIAG_BENCH_SUMMARY`` when it is set.
    """
    lo, hi = result.spread
    med_a, med_b = statistics.median(result.mine), statistics.median(result.theirs)
    judged = (
        f"target {op} {target:.2f}  {verdict(result.median_ratio, op, target)}"
        if op and target is not None
        else "(information, no target)"
    )
    line = (
        f"{name}: ratio {result.median_ratio:.2f} (pairs {lo:.2f}-{hi:.2f}, n={len(result.ratios)}; "
        f"medians {med_a:.3g} vs {med_b:.3g}{' ' + unit if unit else ''})  {judged}"
    )
    print(line, flush=True)
    append_summary(line)
    return line


def report_value(name: str, value: float, op: str, target: float, unit: str = "") -> str:
    """One line for a figure with an absolute target (a start-up time), not a ratio: printed and
    appended to ``$IBDIAG_BENCH_SUMMARY`` like :func:`report`'s."""
    line = f"{name}: {value:.3g}{' ' + unit if unit else ''}  target {op} {target:g}  {verdict(value, op, target)}"
    print(line, flush=True)
    append_summary(line)
    return line


def append_summary(line: str) -> None:
    """Append ``line`` to ``$IBDIAG_BENCH_SUMMARY`` (``make bench``'s list) when it is set."""
    summary = os.environ.get("IBDIAG_BENCH_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as f:
            f.write(line + "\n")
