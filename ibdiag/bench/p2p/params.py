"""What a client asks a server to run, where it runs, and the limits both sides check — in one place.

The request travels as the ``run`` message of the control channel; the server validates it as
untrusted input (:meth:`RunRequest.from_json`, :meth:`RunRequest.buffer_problem`). Building a
:class:`RunRequest` checks every field's type and range, so the command line (exit 2, naming the
flag and the bad value) and the wire (a ``protocol`` refusal) share the same bounds; the connection
parameters (port, host, socket buffer, timeout, RDMA port and GID index) have their checks here too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ibdiag.bench.p2p.engines import ENGINES, engine_problem
from ibdiag.bench.p2p.fields import RequestError, check_float, check_int, shown
from ibdiag.units import format_bytes

TRANSPORTS = ("tcp", "rdma")
MODES = ("bw", "lat", "both")
#: RDMA operations, like perftest's ib_write_*, ib_read_* and ib_send_*.
VERBS = ("write", "read", "send")

#: Most sizes per run (``--sizes``).
MAX_SIZE_COUNT = 64
#: Largest message size (bytes): 1 TiB, far beyond any buffer a host can pin.
MAX_MESSAGE_SIZE = 2**40
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
#: Most RDMA queue pairs per run (``--qps``, perftest ``-q``).
MAX_QPS = 64
#: Largest inline size one may ask for (``--inline``); devices offer up to a few hundred bytes.
MAX_INLINE = 4096
#: Automatic inline size for latency messages (WRITE, SEND): perftest's default for ib_write_lat
#: (``DEF_INLINE_WRITE`` 220 bytes); bandwidth tests post from the registered buffer, like perftest.
AUTO_INLINE_LAT = 220
#: ``--tclass`` (IP DSCP/ECN byte of RoCE v2, GRH traffic class) and ``--sl`` (InfiniBand service level).
MAX_TCLASS = 255
MAX_SL = 15

#: Automatic warm-up: enough messages to move this many bytes (bandwidth) ...
WARMUP_BW_BYTES = 32 * 2**20
#: ... or this many (latency), within the bounds below.
WARMUP_LAT_BYTES = 8 * 2**20
WARMUP_MIN = 2
WARMUP_BW_MAX = 1000
WARMUP_LAT_MAX = 200


#: ``--busy-poll`` when not given (TCP): a side busy-polls this long for the peer's message before it
#: blocks (:mod:`.tcp.latency`), microseconds: longer than a round trip on a quiet host or one switch
#: hop, short enough that a side whose peer shares its CPU gives up spinning within milliseconds.
DEFAULT_BUSY_POLL_US = 200
#: Longest ``--busy-poll`` taken, microseconds.
MAX_BUSY_POLL_US = 100_000


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
    verb: str = "write"
    """RDMA: ``write``, ``read`` or ``send``."""
    qps: int = 1
    """RDMA: queue pairs (perftest ``-q``); bandwidth is their sum."""
    inline: int | None = None
    """RDMA: largest message posted inline (bytes, 0 = never); None = automatic (latency WRITE/SEND up to
    :data:`AUTO_INLINE_LAT` or the device's limit)."""
    tclass: int = 0
    """RDMA: GRH traffic class (RoCE v2: the IP DSCP/ECN byte)."""
    sl: int = 0
    """RDMA: service level (InfiniBand; RoCE maps priority from the traffic class)."""
    engine: str = "ibdiag"
    """Who measures (:mod:`.engines`): ``ibdiag`` (its own loops), ``perftest`` (RDMA: ib_*_bw/lat on both
    ends), ``iperf3`` (TCP bandwidth), ``sockperf`` (TCP latency); the latency too unless ``lat_engine``."""
    lat_engine: str | None = None
    """Who measures the latency when it is not ``engine`` (``--engine iperf3,sockperf``)."""
    busy_poll_us: int | None = None
    """TCP latency: how long each side busy-polls for the peer's message before it blocks, µs (0: block at
    once, as qperf and sockperf do); None: :data:`DEFAULT_BUSY_POLL_US`."""

    def __post_init__(self) -> None:
        """Every field's type and range (:class:`RequestError`, exit 2, naming the flag)."""
        if self.transport not in TRANSPORTS:
            raise RequestError(
                f"--transport {shown(self.transport)} is not one of {', '.join(TRANSPORTS)}"
            )
        if self.mode not in MODES:
            raise RequestError(f"--mode {shown(self.mode)} is not one of {', '.join(MODES)}")
        if not isinstance(self.sizes, tuple) or not 1 <= len(self.sizes) <= MAX_SIZE_COUNT:
            raise RequestError(
                f"--sizes must list 1 to {MAX_SIZE_COUNT} sizes", hint="e.g. --sizes 4K:64M"
            )
        for size in self.sizes:
            check_int(
                size,
                "--sizes item",
                1,
                MAX_MESSAGE_SIZE,
                hint="message sizes go from 1 byte to 1 TiB",
            )
        if self.iters is not None and self.duration_s is not None:
            raise RequestError(
                "give --iters or --duration, not both",
                hint="--iters N counts messages per size; --duration S measures for S seconds per size",
            )
        if self.iters is not None:
            check_int(
                self.iters, "--iters", 1, MAX_ITERS, hint="e.g. --iters 5000 (perftest's default)"
            )
        if self.duration_s is not None:
            check_float(
                self.duration_s, "--duration", 1e-3, MAX_DURATION_S, hint="e.g. --duration 5"
            )
        if self.warmup is not None:
            check_int(
                self.warmup, "--warmup", 0, MAX_WARMUP, hint="leave it out for an automatic warm-up"
            )
        check_int(self.streams, "--streams", 1, MAX_STREAMS, hint="e.g. --streams 4")
        if not isinstance(self.bidir, bool):
            raise RequestError(f"bidir must be true or false, not {shown(self.bidir)}")
        check_int(self.tx_depth, "--tx-depth", 1, MAX_TX_DEPTH, hint="perftest's default is 128")
        if self.verb not in VERBS:
            raise RequestError(f"--verb {shown(self.verb)} is not one of {', '.join(VERBS)}")
        check_int(self.qps, "--qps", 1, MAX_QPS, hint="e.g. --qps 4 (perftest -q)")
        if self.inline is not None:
            check_int(
                self.inline,
                "--inline",
                0,
                MAX_INLINE,
                hint="bytes posted inline, 0 for never; leave it out for the automatic choice",
            )
        check_int(
            self.tclass,
            "--tclass",
            0,
            MAX_TCLASS,
            hint="the GRH traffic class, e.g. 106 for DSCP 26 with ECN (RoCE lossless class)",
        )
        check_int(self.sl, "--sl", 0, MAX_SL, hint="an InfiniBand service level, 0..15")
        if self.transport == "rdma" and self.streams != 1:
            raise RequestError(
                "--streams applies to --transport tcp",
                hint="use --qps N for several RDMA queue pairs",
            )
        if self.transport != "rdma" and self.rdma_options_set:
            raise RequestError(
                f"{', '.join(self.rdma_options_set)} appl{'ies' if len(self.rdma_options_set) == 1 else 'y'} to --transport rdma",
                hint="drop them, or add --transport rdma",
            )
        if self.verb == "read" and self.inline:
            raise RequestError(
                "--inline does not apply to --verb read (a READ carries no data from this side)",
                hint="drop --inline",
            )
        self._check_engines()

    def _check_engines(self) -> None:
        """``engine``, ``lat_engine`` and ``busy_poll_us``: known, measuring what is asked, within each
        tool's bounds (:func:`~.engines.engine_problem`)."""
        for engine in (self.engine, *([self.lat_engine] if self.lat_engine is not None else [])):
            if not isinstance(engine, str) or engine not in ENGINES:
                raise RequestError(
                    f"--engine {shown(engine)} is not one of {', '.join(ENGINES)}",
                    hint="e.g. --engine auto",
                )
        if self.lat_engine is not None and "lat" not in self.kinds:
            raise RequestError(
                "a second --engine is the latency's, and this run measures no latency",
                hint="give one engine, or --mode lat/both",
            )
        if self.busy_poll_us is not None:
            check_int(
                self.busy_poll_us,
                "--busy-poll",
                0,
                MAX_BUSY_POLL_US,
                hint="microseconds to busy-poll before blocking, 0 to block at once",
            )
            if self.transport != "tcp":
                raise RequestError(
                    "--busy-poll applies to --transport tcp (RDMA always polls its completions)",
                    hint="drop --busy-poll",
                )
        problem = engine_problem(self)
        if problem:
            raise RequestError(
                problem,
                hint="use --engine ibdiag for this, or change the option (see docs/bench-p2p.md, 'Engines')",
            )

    @property
    def rdma_options_set(self) -> list[str]:
        """The RDMA-only flags this request sets away from their defaults."""
        out = []
        for flag, value, default in (
            ("--verb", self.verb, "write"),
            ("--qps", self.qps, 1),
            ("--inline", self.inline, None),
            ("--tclass", self.tclass, 0),
            ("--sl", self.sl, 0),
        ):
            if value != default:
                out.append(flag)
        return out

    def inline_for(self, size: int, kind: str, device_max: int) -> int:
        """Bytes posted inline for ``size``-byte ``kind`` messages: 0 or ``size`` (never more than the device allows)."""
        if self.verb == "read":
            return 0
        limit = (
            self.inline if self.inline is not None else (AUTO_INLINE_LAT if kind == "lat" else 0)
        )
        return size if size <= min(limit, device_max) else 0

    @property
    def inline_cap(self) -> int:
        """The ``max_inline_data`` to ask the QP for."""
        if self.verb == "read":
            return 0
        return (
            self.inline
            if self.inline is not None
            else (AUTO_INLINE_LAT if "lat" in self.kinds else 0)
        )

    def engine_of(self, kind: str) -> str:
        """Who measures ``kind`` (``bw`` or ``lat``)."""
        return self.lat_engine if kind == "lat" and self.lat_engine is not None else self.engine

    @property
    def engines(self) -> dict[str, str]:
        """Who measures each kind of this run: ``{"bw": "iperf3", "lat": "ibdiag"}``."""
        return {k: self.engine_of(k) for k in self.kinds}

    @property
    def busy_poll_ns(self) -> int:
        """TCP latency's busy-polling budget per receive, nanoseconds."""
        us = DEFAULT_BUSY_POLL_US if self.busy_poll_us is None else self.busy_poll_us
        return us * 1000

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
        text = describe_request(
            self.transport,
            self.mode,
            self.sizes,
            streams=self.streams,
            bidir=self.bidir,
            iters=self.iters,
            duration_s=self.measure_duration_s,
        )
        extra: list[str] = []
        if self.transport == "rdma":
            # The default (WRITE on one QP) reads as before: ``rdma bw+lat, ...``.
            extra += [self.verb.upper()] if self.verb != "write" else []
            extra += [f"{self.qps} QPs"] if self.qps > 1 else []
            extra += [f"tclass {self.tclass}"] if self.tclass else []
            extra += [f"sl {self.sl}"] if self.sl else []
        tools = sorted({e for e in self.engines.values() if e != "ibdiag"})
        extra += ["+".join(tools)] if tools else []
        if extra:
            text = text.replace(f"{self.transport} ", f"{self.transport} {' '.join(extra)} ", 1)
        return text

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
            "verb": self.verb,
            "qps": self.qps,
            "inline": self.inline,
            "tclass": self.tclass,
            "sl": self.sl,
            "engine": self.engine,
            # only when set: a server from before these fields reads the request as it always did
            **({"lat_engine": self.lat_engine} if self.lat_engine is not None else {}),
            **({"busy_poll_us": self.busy_poll_us} if self.busy_poll_us is not None else {}),
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> RunRequest:
        """Parse and sanity-check a request from the wire; ValueError names the bad field."""
        sizes = doc.get("sizes")
        if not isinstance(sizes, list):
            raise ValueError(f"sizes must be a list of 1 to {MAX_SIZE_COUNT} byte counts")
        try:
            return cls(
                transport=doc.get("transport"),  # type: ignore[arg-type]  # from the wire: __post_init__ checks it
                mode=doc.get("mode"),  # type: ignore[arg-type]  # from the wire: __post_init__ checks it
                sizes=tuple(sizes),
                iters=doc.get("iters"),
                duration_s=doc.get("duration_s"),
                warmup=doc.get("warmup"),
                streams=doc.get("streams", 1),
                bidir=doc.get("bidir", False),
                tx_depth=doc.get("tx_depth", DEFAULT_TX_DEPTH),
                verb=doc.get("verb", "write"),
                qps=doc.get("qps", 1),
                inline=doc.get("inline"),
                tclass=doc.get("tclass", 0),
                sl=doc.get("sl", 0),
                engine=doc.get("engine", "ibdiag"),
                lat_engine=doc.get("lat_engine"),
                busy_poll_us=doc.get("busy_poll_us"),
            )
        except RequestError as e:
            raise ValueError(e.message) from None

    def buffer_problem(self, max_buffer_bytes: int) -> str | None:
        """Why a server limited to ``max_buffer_bytes`` per buffer must refuse this request, or None."""
        if self.max_size > max_buffer_bytes:
            return (
                f"a {format_bytes(self.max_size)} message needs {format_bytes(self.max_size)} buffers, "
                f"more than this server's --max-size of {format_bytes(max_buffer_bytes)} per buffer"
            )
        return None


def describe_request(
    transport: str,
    mode: str,
    sizes: Sequence[int],
    *,
    streams: int,
    bidir: bool,
    iters: int | None,
    duration_s: float | None,
) -> str:
    """A run in words, for the server's log and the client's table title: ``tcp bw+lat, 4 sizes 4 KiB..64 MiB, 1 s per size``."""
    what = (
        format_bytes(sizes[0])
        if len(sizes) == 1
        else f"{len(sizes)} sizes {format_bytes(min(sizes))}..{format_bytes(max(sizes))}"
    )
    kinds = "bw+lat" if mode == "both" else mode
    how = (
        f"{iters} iterations"
        if iters is not None
        else f"{duration_s if duration_s is not None else DEFAULT_DURATION_S:g} s"
    )
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
