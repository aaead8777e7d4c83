"""PCIe AER counts over the history: each device's increase in the window; pure (no I/O).

The kernel's AER counters are u64 since boot (or since the device was added); one that went down
between two records means a reboot: the increase counts from zero, as ``counters`` does for a reset
(:func:`ibdiag.counters.delta.counter_delta`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ibdiag.counters.delta import counter_delta
from ibdiag.history.model import Record
from ibdiag.node.aer import AER_FILES, AerCounts


@dataclass(frozen=True)
class AerStory:
    """One PCI function's AER errors: now (since boot) and the increase over the window."""

    device: str
    now: AerCounts | None
    """The newest record's counts; None when the newest record does not have the device."""
    increase: dict[str, int] = field(default_factory=dict)
    """``correctable``/``nonfatal``/``fatal`` -> errors counted in the window."""
    bits: dict[str, int] = field(default_factory=dict)
    """Error bit name (``RxErr``, ``BadTLP`` ...) -> its increase in the window."""
    last_s: float | None = None
    """Time of the record that showed the last increase."""
    resets: int = 0
    steps: int = 0


def _step(before: AerCounts, after: AerCounts) -> tuple[dict[str, int], dict[str, int], bool]:
    kinds: dict[str, int] = {}
    bits: dict[str, int] = {}
    reset = False
    for kind in AER_FILES:
        then, now = getattr(before, kind), getattr(after, kind)
        if then is None or now is None:
            continue
        for name, value in now.items():
            d, _why, down = counter_delta(
                then.get(name),
                value,
                saturated_before=False,
                saturated_after=False,
                saturating=True,
            )
            reset = reset or down
            if d is None or not d:
                continue
            if name.startswith("TOTAL_ERR_"):
                kinds[kind] = d
            else:
                bits[name] = bits.get(name, 0) + d
        if kind not in kinds:
            total_then, total_now = before.total(kind), after.total(kind)
            if total_then is not None and total_now is not None and total_now != total_then:
                kinds[kind] = total_now if total_now < total_then else total_now - total_then
    return kinds, bits, reset


def aer_stories(records: Sequence[Record], *, since_s: float) -> tuple[AerStory, ...]:
    """Every device of any record, oldest record first."""
    prev: dict[str, tuple[float, AerCounts]] = {}
    inc: dict[str, dict[str, int]] = {}
    bits: dict[str, dict[str, int]] = {}
    last: dict[str, float] = {}
    resets: dict[str, int] = {}
    steps: dict[str, int] = {}
    for rec in records:
        for counts in rec.aer:
            dev = counts.device
            if dev in prev and rec.taken_at_s >= since_s:
                kinds, b, reset = _step(prev[dev][1], counts)
                steps[dev] = steps.get(dev, 0) + 1
                resets[dev] = resets.get(dev, 0) + int(reset)
                for k, v in kinds.items():
                    inc.setdefault(dev, {})[k] = inc.get(dev, {}).get(k, 0) + v
                for k, v in b.items():
                    bits.setdefault(dev, {})[k] = bits.get(dev, {}).get(k, 0) + v
                if kinds:
                    last[dev] = rec.taken_at_s
            prev[dev] = (rec.taken_at_s, counts)
    newest = {a.device: a for a in records[-1].aer} if records else {}
    return tuple(
        AerStory(
            dev,
            newest.get(dev),
            inc.get(dev, {}),
            bits.get(dev, {}),
            last.get(dev),
            resets.get(dev, 0),
            steps.get(dev, 0),
        )
        for dev in sorted(prev)
    )
