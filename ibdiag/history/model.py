"""The port history's models: a record (one run's reading of the node), a flap, a port's story.

A record is what one run of ``ibdiag counters --history DIR`` or ``ibdiag topo --history DIR`` saw:
every port's state and rate, its counters when counters read them (``None`` from topo), and the PCIe
AER counts of the GPUs, NICs and bridges between them. Counters keep the meaning and the keys of
:class:`~ibdiag.counters.model.PortCounters` (one concept, one model).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ibdiag.counters.model import PortCounters
from ibdiag.node.aer import AerCounts

SCHEMA = "ibdiag.history/1"


@dataclass(frozen=True)
class Record:
    """One run's reading of the node, as stored."""

    taken_at_s: float
    """Wall clock (Unix epoch seconds) of the reading."""
    host: str
    source: str
    """``counters`` or ``topo``: the command that recorded it."""
    ports: tuple[PortCounters, ...]
    aer: tuple[AerCounts, ...] = ()

    def port(self, key: tuple[str, int | None]) -> PortCounters | None:
        for p in self.ports:
            if p.key == key:
                return p
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "host": self.host,
            "source": self.source,
            "taken_at_epoch_s": self.taken_at_s,
            "ports": [_port_json(p) for p in self.ports if p.port is not None],
            "aer": [a.to_json() for a in self.aer],
        }


def _port_json(p: PortCounters) -> dict[str, Any]:
    info = p.info
    return {
        "adapter": p.adapter,
        "port": p.port,
        "state": info.state if info else None,
        "phys_state": info.phys_state if info else None,
        "rate_gbps": info.rate_gbps if info else None,
        "link_layer": info.link_layer if info else None,
        "data_counter_bits": p.data_bits,
        "counters": None if p.counters is None else dict(p.counters),
        "hw_counters": None if p.hw_counters is None else dict(p.hw_counters),
        "saturated": sorted(p.saturated),
    }


@dataclass(frozen=True)
class Flap:
    """A port's link went down (or retrained) between two records: seen at ``at_s``."""

    at_s: float
    """Time of the record that showed it (the flap happened since the record before)."""
    count: int
    """Flaps it stands for: a link_downed increase of 3 is 3 flaps."""
    how: str
    """``link_downed +3``, ``state ACTIVE -> DOWN``, ``rate 400 -> 200 Gb/s``."""


@dataclass(frozen=True)
class Burst:
    """Error counters that rose above their threshold between two records."""

    at_s: float
    counts: Mapping[str, int]


@dataclass(frozen=True)
class PortStory:
    """One port over the history's window."""

    adapter: str
    port: int
    flaps: tuple[Flap, ...]
    """In the window, oldest first."""
    bursts: tuple[Burst, ...] = ()
    resets: int = 0
    """Steps in which the port's counters went down (reset): their deltas counted from zero."""
    unknown_steps: int = 0
    """Steps in which link_downed could not be compared (saturated at 255, unavailable)."""
    up_now: bool | None = None
    """The latest record's state is ACTIVE (None: the port is not in the latest record)."""
    first_s: float | None = None
    """The oldest record of this port that the window used."""
    records: int = 0
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def subject(self) -> str:
        return f"{self.adapter}:{self.port}"

    @property
    def flap_count(self) -> int:
        return sum(f.count for f in self.flaps)

    @property
    def last_flap_s(self) -> float | None:
        return self.flaps[-1].at_s if self.flaps else None
