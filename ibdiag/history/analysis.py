"""Records -> each port's story over the window: flaps, error bursts, resets; pure (no I/O).

A flap between two records of a port is any of:

* ``link_downed`` rose (LinkDownedCounter: the link went down and retrained; each count is a flap),
  compared by :func:`ibdiag.counters.delta.port_delta`, so a counter reset between two records counts
  from zero (a lower bound) and a saturated counter (255: it is 8 bits) is not compared;
* the port was ACTIVE in one record and not in the next (a down seen by ``counters`` or ``topo``);
* its rate changed while ACTIVE in both (it retrained at another speed).

Within one step of counters-bearing records the larger of the link_downed increase and the downs and
rate changes seen is counted, so one outage seen both ways is one flap, never two.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ibdiag.counters.config import CountersConfig
from ibdiag.counters.delta import port_delta
from ibdiag.counters.model import PortCounters
from ibdiag.counters.spec import ERROR_COUNTERS
from ibdiag.history.model import Burst, Flap, PortStory, Record

LINK_DOWNED = "link_downed"


def _active(p: PortCounters) -> bool | None:
    if p.info is None or p.info.state is None:
        return None
    return p.info.state == "ACTIVE"


def _rate(p: PortCounters) -> float | None:
    return None if p.info is None else p.info.rate_gbps


def _burst(delta: Mapping[str, int | None], cfg: CountersConfig) -> dict[str, int]:
    """Error counters that rose by more than their threshold (``[counters.thresholds]``) in one step."""
    out = {}
    for name in ERROR_COUNTERS:
        if name == LINK_DOWNED or name in cfg.ignore_counters:
            continue
        d = delta.get(name)
        limit = cfg.thresholds.get(name)
        if d is not None and limit is not None and d > limit:
            out[name] = d
    return out


class _Walk:
    """One port through its records, oldest first."""

    def __init__(self, counters_cfg: CountersConfig) -> None:
        self.cfg = counters_cfg
        self.flaps: list[Flap] = []
        self.bursts: list[Burst] = []
        self.resets = 0
        self.unknown = 0
        self.prev: tuple[float, PortCounters] | None = None
        self.prev_counted: tuple[float, PortCounters] | None = None
        self.pending = 0  # flaps seen by state or rate since prev_counted

    def step(self, at_s: float, p: PortCounters) -> None:
        if self.prev is not None:
            _t0, q = self.prev
            was, now = _active(q), _active(p)
            if was and now is False:
                self.flaps.append(Flap(at_s, 1, f"state {q.info.state} -> {p.info.state}"))  # type: ignore[union-attr]  # _active is not None only with info
                self.pending += 1
            elif was and now and _rate(q) != _rate(p) and None not in (_rate(q), _rate(p)):
                self.flaps.append(Flap(at_s, 1, f"rate {_rate(q):g} -> {_rate(p):g} Gb/s"))
                self.pending += 1
        if p.counters is not None:
            if self.prev_counted is not None and at_s > self.prev_counted[0]:
                self._counted_step(at_s, p)
            self.prev_counted = (at_s, p)
            self.pending = 0
        self.prev = (at_s, p)

    def _counted_step(self, at_s: float, p: PortCounters) -> None:
        t0, q = self.prev_counted  # type: ignore[misc]  # checked by the caller
        d = port_delta(q, p, at_s - t0)
        if d.resets:
            self.resets += 1
        downed = d.deltas.get(LINK_DOWNED)
        if downed is None and LINK_DOWNED in p.values():
            self.unknown += 1
        extra = (downed or 0) - self.pending
        if extra > 0:
            reset = " (counters were reset: at least)" if LINK_DOWNED in d.resets else ""
            self.flaps.append(Flap(at_s, extra, f"link_downed +{downed}{reset}"))
        burst = _burst(d.deltas, self.cfg)
        if burst:
            self.bursts.append(Burst(at_s, burst))


def port_stories(
    records: Sequence[Record], *, since_s: float, counters_cfg: CountersConfig | None = None
) -> tuple[PortStory, ...]:
    """Every port of the newest record (and any other port the window saw), its flaps and bursts
    detected at ``since_s`` or later. ``records`` oldest first."""
    cfg = counters_cfg or CountersConfig()
    walks: dict[tuple[str, int], _Walk] = {}
    firsts: dict[tuple[str, int], float] = {}
    counts: dict[tuple[str, int], int] = {}
    for rec in records:
        for p in rec.ports:
            if p.port is None:
                continue
            key = (p.adapter, p.port)
            walks.setdefault(key, _Walk(cfg)).step(rec.taken_at_s, p)
            firsts.setdefault(key, rec.taken_at_s)
            counts[key] = counts.get(key, 0) + 1
    latest = records[-1] if records else None
    out = []
    for key in sorted(walks):
        w = walks[key]
        now = latest.port(key) if latest is not None else None
        out.append(
            PortStory(
                adapter=key[0],
                port=key[1],
                flaps=tuple(f for f in w.flaps if f.at_s >= since_s),
                bursts=tuple(b for b in w.bursts if b.at_s >= since_s),
                resets=w.resets,
                unknown_steps=w.unknown,
                up_now=None if now is None else _active(now),
                first_s=firsts[key],
                records=counts[key],
            )
        )
    return tuple(out)
