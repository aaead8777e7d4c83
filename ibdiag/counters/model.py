"""Counter readings and deltas as frozen dataclasses. No I/O, no display strings; unknown is ``None``.

Keys: counters under ``ports/N/counters/`` keep their sysfs names (``symbol_error``); hw_counters
keep theirs (``out_of_sequence``) unless a name clashes with a ``counters/`` name, in which case
it becomes ``hw_counters/<name>``; the reader adds ``xmit_bytes``/``rcv_bytes`` (the data counters
x 4). The flat key space is what deltas, rates and the CSV use.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ibdiag.counters.spec import DATA_BYTES, VARIABLE_WIDTH

if TYPE_CHECKING:  # the annotation only: a fabric's counters need no node model (start-up)
    from ibdiag.node.model import Port

HW_PREFIX = "hw_counters/"


@dataclass(frozen=True)
class PortCounters:
    """One read of one port (``perfquery -x`` plus the driver's hw_counters), or of a device's own
    ``hw_counters/`` when ``port`` is None."""

    adapter: str
    port: int | None
    """None for the device-level ``/sys/class/infiniband/<dev>/hw_counters``."""
    info: Port | None
    """State, physical state, rate and link layer (read by topo's reader); None for device-level."""
    counters: Mapping[str, int | None] | None
    """``counters/`` as sysfs prints them (data counters in 4-octet words); None: no counters/ directory."""
    hw_counters: Mapping[str, int | None] | None
    """``hw_counters/`` without ``lifespan``; None: no hw_counters/ directory."""
    unavailable: Mapping[str, str] = field(default_factory=dict)
    """Counter name -> why it has no value (``N/A (no PMA)``, ``unreadable: Input/output error``, ...)."""
    saturated: frozenset[str] = frozenset()
    """``counters/`` names at the all-ones value of their width: the value is a lower bound."""
    data_bits: int = 64
    """Width of the data and packet counters: 64 with extended counters, else 32."""
    xmit_bytes: int | None = None
    """``port_xmit_data`` x 4."""
    rcv_bytes: int | None = None
    """``port_rcv_data`` x 4."""
    hw_lifespan_ms: int | None = None
    """``hw_counters/lifespan``: how long the driver caches hw_counters (ms)."""

    @property
    def subject(self) -> str:
        return self.adapter if self.port is None else f"{self.adapter}:{self.port}"

    @property
    def key(self) -> tuple[str, int | None]:
        return (self.adapter, self.port)

    def hw_key(self, name: str) -> str:
        """Flat key of a hw_counter: its name, or ``hw_counters/<name>`` when counters/ has the same name."""
        return HW_PREFIX + name if self.counters is not None and name in self.counters else name

    def values(self) -> dict[str, int | None]:
        """Flat ``{key: value}``: counters/, hw_counters/, then ``xmit_bytes``/``rcv_bytes``."""
        out: dict[str, int | None] = dict(self.counters or {})
        for name, value in (self.hw_counters or {}).items():
            out[self.hw_key(name)] = value
        if self.counters is not None:
            for src, derived in DATA_BYTES.items():
                if src in self.counters:
                    out[derived] = self.xmit_bytes if derived == "xmit_bytes" else self.rcv_bytes
        return out

    def sources(self) -> dict[str, str]:
        """Flat key -> ``counters``, ``hw_counters`` or ``derived``."""
        out = {name: "counters" for name in self.counters or {}}
        for name in self.hw_counters or {}:
            out[self.hw_key(name)] = "hw_counters"
        if self.counters is not None:
            for src, derived in DATA_BYTES.items():
                if src in self.counters:
                    out[derived] = "derived"
        return out

    def saturated_keys(self) -> frozenset[str]:
        """Saturated flat keys: the saturated counters and the byte values derived from them."""
        derived = {DATA_BYTES[n] for n in self.saturated if n in DATA_BYTES}
        return self.saturated | derived

    def to_json(self) -> dict[str, Any]:
        info = self.info
        doc: dict[str, Any] = {"adapter": self.adapter}
        if self.port is not None:
            doc.update(
                {
                    "port": self.port,
                    "state": info.state if info else None,
                    "phys_state": info.phys_state if info else None,
                    "rate_gbps": info.rate_gbps if info else None,
                    "link_layer": info.link_layer if info else None,
                    "data_counter_bits": self.data_bits if self.counters is not None else None,
                }
            )
        doc.update(
            {
                "counters": None if self.counters is None else dict(self.counters),
                "hw_counters": None if self.hw_counters is None else dict(self.hw_counters),
                "saturated": sorted(self.saturated),
                "unavailable": dict(self.unavailable),
                "hw_counters_lifespan_ms": self.hw_lifespan_ms,
            }
        )
        if self.port is not None:
            doc["xmit_bytes"] = self.xmit_bytes
            doc["rcv_bytes"] = self.rcv_bytes
        return doc


@dataclass(frozen=True)
class Sample:
    """Every port read once."""

    taken_at_s: float
    """Wall clock (Unix epoch seconds) when the read finished."""
    monotonic_s: float | None
    """Monotonic clock at the same moment; None for a baseline loaded from a file."""
    ports: tuple[PortCounters, ...]
    """Ports, then device-level records (port None), in adapter order."""

    def port(self, key: tuple[str, int | None]) -> PortCounters | None:
        for p in self.ports:
            if p.key == key:
                return p
        return None


@dataclass(frozen=True)
class PortDelta:
    """What one port counted between two samples (or over a whole series, summed)."""

    adapter: str
    port: int | None
    interval_s: float
    deltas: Mapping[str, int | None]
    """Flat key -> increase; None when unknown (saturated, unavailable, a hw_counter that went down)."""
    rates: Mapping[str, float | None]
    """Flat key -> increase per second over ``interval_s``."""
    peak_rates: Mapping[str, float | None]
    """Highest per-sample rate (equals ``rates`` for a single interval)."""
    unknown: Mapping[str, str] = field(default_factory=dict)
    """Flat key -> why its delta is unknown: ``saturated``, ``unavailable``, ``reset``, ``no baseline``."""
    resets: tuple[str, ...] = ()
    """Keys whose value went down (counters were reset). For counters/ the delta then counts from zero
    (a lower bound); for hw_counters (width and wrap unknown) it is unknown."""
    samples: int = 1

    @property
    def subject(self) -> str:
        return self.adapter if self.port is None else f"{self.adapter}:{self.port}"

    @property
    def key(self) -> tuple[str, int | None]:
        return (self.adapter, self.port)


@dataclass(frozen=True)
class Figures:
    """Throughput and backpressure of one port over an interval (computed from a :class:`PortDelta`)."""

    tx_gbps: float | None
    rx_gbps: float | None
    tx_util_pct: float | None
    """Share of the port rate (sysfs ``rate``) used for sending."""
    rx_util_pct: float | None
    xmit_wait_per_s: float | None
    xmit_wait_est_pct: float | None
    """Estimated share of the interval the port waited for credits: count x bytes-per-count / (rate x interval)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "tx_gbps": self.tx_gbps,
            "rx_gbps": self.rx_gbps,
            "tx_util_pct": self.tx_util_pct,
            "rx_util_pct": self.rx_util_pct,
            "xmit_wait_per_s": self.xmit_wait_per_s,
            "xmit_wait_est_pct": self.xmit_wait_est_pct,
        }


@dataclass(frozen=True)
class SeriesStep:
    """One sample of a series and what each port counted since the previous one."""

    index: int
    """1-based sample number."""
    sample: Sample
    elapsed_s: float
    """Seconds since the first read."""
    deltas: tuple[PortDelta, ...]


@dataclass(frozen=True)
class Span:
    """Counting over time: ``--interval`` (one step), ``--interval --count N`` (N steps), ``--since`` (baseline file)."""

    mode: str
    """``interval``, ``series`` or ``since``."""
    first: Sample
    last: Sample
    steps: tuple[SeriesStep, ...]
    """Every step, when kept (JSON of a series needs them; a long series printed otherwise does not)."""
    totals: tuple[PortDelta, ...]
    """Per port over the whole span: deltas summed over the steps, rates over the whole time, peak step rates."""
    interval_s: float
    """Seconds from the first read to the last."""
    samples_count: int = 1
    """Steps in the span (1 for --interval and --since)."""
    missing: tuple[str, ...] = ()
    """Ports in the first sample (the baseline) that the last sample no longer has."""

    def total(self, key: tuple[str, int | None]) -> PortDelta | None:
        for d in self.totals:
            if d.key == key:
                return d
        return None


def is_variable_width(key: str) -> bool:
    return key in VARIABLE_WIDTH or key in DATA_BYTES.values()
