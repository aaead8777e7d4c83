"""What a client asks a server to run, and the limits both sides check.

The request travels as the ``run`` message of the control channel; the server validates it as
untrusted input (:meth:`RunRequest.from_json` and :meth:`RunRequest.check_limits`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ibdiag.units import format_bytes

TRANSPORTS = ("tcp", "rdma")
MODES = ("bw", "lat", "both")

#: Most parallel TCP connections per run (``--streams``).
MAX_STREAMS = 32
#: Most iterations per size (``--iters``).
MAX_ITERS = 10**9
#: Longest measurement per size and mode (``--duration``), seconds.
MAX_DURATION_S = 3600.0
#: Most warm-up iterations.
MAX_WARMUP = 10**6
#: Most latency samples one size may record (``--duration`` on a fast link); 8 bytes each.
MAX_LAT_SAMPLES = 5_000_000
#: Measure for this long per size and mode when neither --iters nor --duration is given.
DEFAULT_DURATION_S = 1.0
#: Default RDMA send-queue depth (perftest's ib_write_bw ``--tx-depth`` default is 128).
DEFAULT_TX_DEPTH = 128
MAX_TX_DEPTH = 8192

#: Automatic warm-up: enough messages to move this many bytes (bandwidth) ...
WARMUP_BW_BYTES = 32 * 2**20
#: ... or this many (latency), within the bounds below.
WARMUP_LAT_BYTES = 8 * 2**20
WARMUP_MIN = 2
WARMUP_BW_MAX = 1000
WARMUP_LAT_MAX = 200


@dataclass(frozen=True)
class RunRequest:
    """One benchmark run: transport, mode, sizes (bytes) and how long to measure each."""

    transport: str
    mode: str
    sizes: tuple[int, ...]
    iters: int | None = None
    duration_s: float | None = None
    warmup: int | None = None
    """Warm-up iterations per size; None = automatic (:func:`auto_warmup`)."""
    streams: int = 1
    bidir: bool = False
    tx_depth: int = DEFAULT_TX_DEPTH

    @property
    def kinds(self) -> tuple[str, ...]:
        return ("bw", "lat") if self.mode == "both" else (self.mode,)

    @property
    def max_size(self) -> int:
        return max(self.sizes)

    @property
    def measure_duration_s(self) -> float | None:
        """Seconds per size and mode, or None when counting iterations."""
        if self.iters is not None:
            return None
        return self.duration_s if self.duration_s is not None else DEFAULT_DURATION_S

    def warmup_for(self, size: int, kind: str) -> int:
        return self.warmup if self.warmup is not None else auto_warmup(size, kind)

    def describe(self) -> str:
        """``tcp bw+lat, 4 sizes 4 KiB..64 MiB, 1 s per size``."""
        return describe_request(self.transport, self.mode, self.sizes, streams=self.streams, bidir=self.bidir, iters=self.iters, duration_s=self.measure_duration_s)

    def to_json(self) -> dict[str, Any]:
        return {
            "transport": self.transport,
            "mode": self.mode,
            "sizes": list(self.sizes),
            "iters": self.iters,
            "duration_s": self.duration_s,
            "warmup": self.warmup,
            "streams": self.streams,
            "bidir": self.bidir,
            "tx_depth": self.tx_depth,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> RunRequest:
        """Parse and sanity-check a request from the wire; ValueError names the bad field."""
        transport = doc.get("transport")
        if transport not in TRANSPORTS:
            raise ValueError(f"transport {transport!r} is not one of {', '.join(TRANSPORTS)}")
        mode = doc.get("mode")
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is not one of {', '.join(MODES)}")
        sizes = doc.get("sizes")
        if not isinstance(sizes, list) or not sizes or len(sizes) > 64:
            raise ValueError("sizes must be a list of 1 to 64 byte counts")
        checked = tuple(_int(s, "size", 1, 2**50) for s in sizes)
        iters = doc.get("iters")
        duration = doc.get("duration_s")
        if iters is not None and duration is not None:
            raise ValueError("give iters or duration_s, not both")
        req = cls(
            transport=transport,
            mode=mode,
            sizes=checked,
            iters=None if iters is None else _int(iters, "iters", 1, MAX_ITERS),
            duration_s=None if duration is None else _float(duration, "duration_s", 1e-3, MAX_DURATION_S),
            warmup=None if doc.get("warmup") is None else _int(doc.get("warmup"), "warmup", 0, MAX_WARMUP),
            streams=_int(doc.get("streams", 1), "streams", 1, MAX_STREAMS),
            bidir=_bool(doc.get("bidir", False), "bidir"),
            tx_depth=_int(doc.get("tx_depth", DEFAULT_TX_DEPTH), "tx_depth", 1, MAX_TX_DEPTH),
        )
        return req

    def buffer_problem(self, max_buffer_bytes: int) -> str | None:
        """Why a server limited to ``max_buffer_bytes`` per buffer must refuse this request, or None."""
        if self.max_size > max_buffer_bytes:
            return (
                f"a {format_bytes(self.max_size)} message needs {format_bytes(self.max_size)} buffers, "
                f"more than this server's --max-size of {format_bytes(max_buffer_bytes)} per buffer"
            )
        return None


def describe_request(transport: str, mode: str, sizes: Sequence[int], *, streams: int, bidir: bool, iters: int | None, duration_s: float | None) -> str:
    """A run in words, for the server's log and the client's table title: ``tcp bw+lat, 4 sizes 4 KiB..64 MiB, 1 s per size``."""
    what = format_bytes(sizes[0]) if len(sizes) == 1 else f"{len(sizes)} sizes {format_bytes(min(sizes))}..{format_bytes(max(sizes))}"
    kinds = "bw+lat" if mode == "both" else mode
    how = f"{iters} iterations" if iters is not None else f"{duration_s if duration_s is not None else DEFAULT_DURATION_S:g} s"
    extra = f", {streams} streams" if streams > 1 else ""
    extra += ", bidirectional" if bidir else ""
    return f"{transport} {kinds}, {what}{extra}, {how} per size"


def auto_warmup(size: int, kind: str) -> int:
    """Warm-up iterations when ``--warmup`` is not given: enough to move tens of MiB, bounded.

    Bandwidth: ceil(32 MiB / size) within 2..1000 (fills socket buffers and the congestion window,
    or the send queue); latency: ceil(8 MiB / size) within 2..200 (caches, page tables, the peer's
    scheduler).
    """
    if kind == "bw":
        return max(WARMUP_MIN, min(WARMUP_BW_MAX, math.ceil(WARMUP_BW_BYTES / size)))
    return max(WARMUP_MIN, min(WARMUP_LAT_MAX, math.ceil(WARMUP_LAT_BYTES / size)))


def latency_iterations(duration_s: float, warmup_rtt_ns: list[int] | tuple[int, ...]) -> int:
    """Iterations that fill ``duration_s`` of ping-pong, from the warm-up's median round trip.

    At least 10 (so p50 means something) and at most :data:`MAX_LAT_SAMPLES`.
    """
    if warmup_rtt_ns:
        ordered = sorted(warmup_rtt_ns)
        rtt_s = max(ordered[len(ordered) // 2], 1) / 1e9
    else:
        rtt_s = 1e-4
    return max(10, min(MAX_LAT_SAMPLES, round(duration_s / rtt_s)))


def _int(value: Any, name: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, not {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} {value} is outside {lo}..{hi}")
    return value


def _float(value: Any, name: str, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a number, not {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} {value} is outside {lo:g}..{hi:g}")
    return float(value)


def _bool(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, not {value!r}")
    return value
