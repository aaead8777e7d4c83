"""Deltas between samples, aware of saturation and resets; never negative.

Rules (IBA counters saturate at all ones instead of wrapping; DESIGN.md "Domain facts"):

* a counter at its maximum before or after is *saturated*: no delta is computed across it (unknown);
* a ``counters/`` value lower than before means the counters were reset: the delta counts from zero
  (the value now), a lower bound, and the key is listed in ``resets``;
* a ``hw_counters/`` value lower than before is unknown: their width and whether they wrap are the
  driver's business and not in sysfs;
* a counter with no value on either side is unknown (``unavailable``), one the baseline lacks is
  ``no baseline``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ibdiag.counters.model import (
    Figures,
    PortCounters,
    PortDelta,
    Sample,
    SeriesStep,
    Span,
    is_variable_width,
)
from ibdiag.counters.spec import max_value
from ibdiag.errors import InputError


def counter_delta(
    before: int | None,
    after: int | None,
    *,
    saturated_before: bool,
    saturated_after: bool,
    saturating: bool,
) -> tuple[int | None, str | None, bool]:
    """One counter: ``(delta, why unknown, went down)``.

    >>> counter_delta(10, 25, saturated_before=False, saturated_after=False, saturating=True)
    (15, None, False)
    >>> counter_delta(10, 3, saturated_before=False, saturated_after=False, saturating=True)
    (3, None, True)
    """
    if before is None or after is None:
        return None, "unavailable", False
    if after < before:
        if saturated_after:
            return None, "saturated", True
        if saturating:
            return after, None, True  # reset, then counted from zero: a lower bound
        return None, "reset", True
    if saturated_before or saturated_after:
        return None, "saturated", False
    return after - before, None, False


def _still_saturated(key: str, before: PortCounters, after: PortCounters) -> bool:
    if key not in before.saturated_keys():
        return False
    # The later read proved 64-bit counters: the earlier all-ones 32-bit value was not saturation.
    if is_variable_width(key) and before.data_bits == 32 and after.data_bits == 64:
        value = before.values().get(key)
        return value is not None and value >= max_value(64)
    return True


def port_delta(before: PortCounters | None, after: PortCounters, interval_s: float) -> PortDelta:
    """What ``after`` counted since ``before`` over ``interval_s`` seconds (``before`` None: no baseline)."""
    if not interval_s > 0:
        raise ValueError(f"interval must be positive, not {interval_s}")
    now = after.values()
    sources = after.sources()
    sat_after = after.saturated_keys()
    deltas: dict[str, int | None] = {}
    unknown: dict[str, str] = {}
    resets: list[str] = []
    then = before.values() if before is not None else {}
    for key, value in now.items():
        if before is None or key not in then:
            deltas[key] = None
            unknown[key] = "no baseline"
            continue
        d, why, down = counter_delta(
            then[key],
            value,
            saturated_before=_still_saturated(key, before, after),
            saturated_after=key in sat_after,
            saturating=sources.get(key) != "hw_counters",
        )
        deltas[key] = d
        if why:
            unknown[key] = why
        if down:
            resets.append(key)
    rates = {k: (None if d is None else d / interval_s) for k, d in deltas.items()}
    return PortDelta(
        after.adapter, after.port, interval_s, deltas, rates, dict(rates), unknown, tuple(resets), 1
    )


def sample_interval_s(before: Sample, after: Sample) -> float:
    """Seconds between two samples: the monotonic clock when both have it, else the wall clock."""
    if before.monotonic_s is not None and after.monotonic_s is not None:
        return after.monotonic_s - before.monotonic_s
    return after.taken_at_s - before.taken_at_s


def sample_deltas(before: Sample, after: Sample) -> tuple[tuple[PortDelta, ...], tuple[str, ...]]:
    """Per-port deltas from ``before`` to ``after`` and the subjects ``after`` no longer has."""
    interval = sample_interval_s(before, after)
    if not interval > 0:
        raise InputError(
            f"the baseline is not older than this reading ({interval:+.3f} s)",
            hint="the baseline must have been taken earlier on this node; check the clock (timedatectl) and the file",
        )
    out = tuple(port_delta(before.port(p.key), p, interval) for p in after.ports)
    now = {p.key for p in after.ports}
    missing = tuple(p.subject for p in before.ports if p.key not in now)
    return out, missing


class _PortTotal:
    """One port's totals so far: interval, steps, sums of the known deltas, why unknown, peaks, resets."""

    def __init__(self) -> None:
        self.interval_s = 0.0
        self.steps = 0
        self.sums: dict[str, int] = {}
        self.known: dict[str, int] = {}
        self.why: dict[str, str] = {}
        self.peaks: dict[str, float | None] = {}
        self.resets: list[str] = []

    def add(self, d: PortDelta) -> None:
        self.interval_s += d.interval_s
        self.steps += 1
        for k, v in d.deltas.items():
            self.sums.setdefault(k, 0)
            self.known.setdefault(k, 0)
            if v is not None:
                self.sums[k] += v
                self.known[k] += 1
            else:
                self.why[k] = d.unknown.get(k, "unavailable")
            r = d.peak_rates.get(k)
            peak = self.peaks.get(k)
            self.peaks[k] = r if r is not None and (peak is None or r > peak) else peak
        self.resets.extend(k for k in d.resets if k not in self.resets)

    def delta(self, adapter: str, port: int | None) -> PortDelta:
        deltas: dict[str, int | None] = {}
        unknown: dict[str, str] = {}
        for k, total in self.sums.items():
            known = self.known[k]
            deltas[k] = total if known else None
            if not known:
                unknown[k] = self.why.get(k, "unavailable")
            elif known < self.steps and k in self.why:
                unknown[k] = f"partly {self.why[k]}"
        secs = self.interval_s
        rates = {k: (None if v is None or not secs else v / secs) for k, v in deltas.items()}
        return PortDelta(
            adapter,
            port,
            secs,
            deltas,
            rates,
            dict(self.peaks),
            unknown,
            tuple(self.resets),
            self.steps,
        )


class Accumulator:
    """Counting over time, one sample at a time: the one way ``--interval``, ``--count``, ``--since``
    and ``--watch`` total what the counters did (constant memory however long the series).

    Each sample is compared with the one before it (:func:`sample_deltas`: saturation- and
    reset-aware), and the steps are summed per port: a counter reset between two samples counts from
    zero in that step and is listed in ``resets``, so 100 -> 0 -> 150 is +150 with a reset, never +50.
    Rates are over the whole time and the peak is the highest step rate. A key no step knew stays
    unknown (the last reason); one some steps did not know is a lower bound, ``partly <reason>``.
    """

    def __init__(self, first: Sample, *, mode: str, keep_steps: bool = True) -> None:
        self.first = first
        self.last = first
        self.mode = mode
        self.keep_steps = keep_steps
        self.count = 0
        self._steps: list[SeriesStep] = []
        self._ports: dict[tuple[str, int | None], _PortTotal] = {}
        self._missing: list[str] = []

    def add(self, sample: Sample) -> SeriesStep:
        """Take the next sample; the step it makes (its deltas since the previous sample)."""
        deltas, gone = sample_deltas(self.last, sample)
        self._missing.extend(g for g in gone if g not in self._missing)
        for d in deltas:
            self._ports.setdefault(d.key, _PortTotal()).add(d)
        self.count += 1
        step = SeriesStep(self.count, sample, sample_interval_s(self.first, sample), deltas)
        if self.keep_steps:
            self._steps.append(step)
        self.last = sample
        return step

    def span(self) -> Span:
        """Everything so far, totals per port of the last sample."""
        if not self.count:
            raise ValueError("a span needs two samples")
        totals = tuple(
            self._ports[p.key].delta(p.adapter, p.port)
            for p in self.last.ports
            if p.key in self._ports
        )
        interval = sample_interval_s(self.first, self.last)
        return Span(
            self.mode,
            self.first,
            self.last,
            tuple(self._steps),
            totals,
            interval,
            self.count,
            tuple(self._missing),
        )


def build_span(samples: Sequence[Sample], *, mode: str, keep_steps: bool = True) -> Span:
    """A span from consecutive samples (the first is the baseline), through :class:`Accumulator`."""
    if len(samples) < 2:
        raise ValueError("a span needs two samples")
    acc = Accumulator(samples[0], mode=mode, keep_steps=keep_steps)
    for sample in samples[1:]:
        acc.add(sample)
    return acc.span()


def figures(
    delta: PortDelta,
    rate_gbps: float | None,
    *,
    xmit_wait_bytes_per_count: float,
    peak: bool = False,
) -> Figures:
    """tx/rx Gb/s, utilisation of the port rate, xmit_wait per second and the estimated wait share.

    The wait share is ``xmit_wait x bytes-per-count / (rate x interval)``: the bytes the port could
    have sent while it waited, over what it could send in the interval (an estimate: the HCA's tick
    is an assumption, see :class:`~ibdiag.counters.config.CountersConfig`).
    """
    rates = delta.peak_rates if peak else delta.rates
    tx_bps = rates.get("xmit_bytes")
    rx_bps = rates.get("rcv_bytes")
    tx = None if tx_bps is None else tx_bps * 8 / 1e9
    rx = None if rx_bps is None else rx_bps * 8 / 1e9
    wait = rates.get("port_xmit_wait")
    usable = rate_gbps is not None and rate_gbps > 0
    return Figures(
        tx_gbps=tx,
        rx_gbps=rx,
        tx_util_pct=(tx / rate_gbps * 100) if tx is not None and usable else None,  # type: ignore[operator]  # usable: rate_gbps is a positive float
        rx_util_pct=(rx / rate_gbps * 100) if rx is not None and usable else None,  # type: ignore[operator]  # usable: rate_gbps is a positive float
        xmit_wait_per_s=wait,
        xmit_wait_est_pct=(wait * xmit_wait_bytes_per_count / (rate_gbps * 1e9 / 8) * 100)  # type: ignore[operator]  # usable: rate_gbps is a positive float
        if wait is not None and usable
        else None,
    )
