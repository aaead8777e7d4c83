"""Timed sampling for ``--interval``, ``--count`` and ``--watch``: reads on a fixed schedule (no drift
when a read is slow), deltas step by step, totals in constant memory."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from ibdiag.counters.delta import Accumulator
from ibdiag.counters.model import Sample, SeriesStep, Span
from ibdiag.counters.read import PortLayout, read_sample
from ibdiag.node.sysfs import SysfsRoot


def wait(seconds: float) -> None:
    """The one place ibdiag counters waits between samples (Ctrl-C interrupts it)."""
    time.sleep(seconds)


class Sampler:
    """Reads ``layout`` at ``t0``, ``t0 + interval``, ``t0 + 2 x interval`` ... (monotonic clock)."""

    def __init__(
        self,
        sysfs: SysfsRoot,
        layout: Sequence[PortLayout],
        *,
        interval_s: float,
        data_bits: int | None = None,
    ) -> None:
        self.sysfs = sysfs
        self.layout = tuple(layout)
        self.interval_s = interval_s
        self.data_bits = data_bits
        self._t0: float | None = None
        self._n = 0

    def read(self) -> Sample:
        return read_sample(self.sysfs, self.layout, data_bits=self.data_bits)

    def first(self) -> Sample:
        self._t0 = time.monotonic()
        self._n = 0
        return self.read()

    def next(self) -> Sample:
        if self._t0 is None:
            return self.first()
        self._n += 1
        delay = self._t0 + self._n * self.interval_s - time.monotonic()
        if delay > 0:
            wait(delay)
        return self.read()


def run_series(
    sampler: Sampler,
    count: int,
    *,
    mode: str,
    keep_steps: bool,
    on_step: Callable[[SeriesStep], None] | None = None,
    first: Sample | None = None,
) -> Span:
    """Take ``count`` samples after the first; ``on_step`` sees each as it arrives (CSV streams from it)."""
    acc = Accumulator(
        first if first is not None else sampler.first(), mode=mode, keep_steps=keep_steps
    )
    for _ in range(count):
        step = acc.add(sampler.next())
        if on_step is not None:
            on_step(step)
    return acc.span()
