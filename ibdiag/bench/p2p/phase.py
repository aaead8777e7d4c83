"""One run over the control channel, engine-neutral: its phases, the sides' contract, the size loop.

What every engine (ibdiag's own TCP and RDMA loops, perftest) shares, below the engines themselves:

* the ``phase`` and ``iters`` messages as a server checks them (:func:`read_phase`, :func:`read_iters`)
  and the figures a server reports as a client checks them (:func:`check_bw_result`, :func:`impossible`);
* what a client side returns per phase (:class:`BwOutcome`, :class:`LatOutcome`) and the one row
  per size they become (:func:`bw_row`, :func:`lat_row`, :func:`merge`), measured by one size loop
  (:func:`measure_sizes`);
* the typed halves of a run (:class:`ClientSide`, :class:`ServerSide`) and an :class:`Engine`, the
  pair of factories one (engine, transport) entry of :data:`~ibdiag.bench.p2p.session.ENGINES` holds.

The messages themselves are listed in :mod:`ibdiag.bench.p2p.session`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ibdiag.bench.p2p.control.protocol import Channel, ProtocolError, peer_value
from ibdiag.bench.p2p.fields import RequestError, check_int
from ibdiag.bench.p2p.params import MAX_LAT_SAMPLES, MAX_WARMUP, RunRequest
from ibdiag.bench.results.model import LatencyStats, P2PResult, StreamFigure
from ibdiag.bench.results.p2p_meta import BusyPoll, LineRate, RdmaPath, ToolRuns
from ibdiag.bench.results.stats import cpu_s_per_gb
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.units import format_bytes

Log = Callable[[str], None]


@dataclass(frozen=True)
class BwOutcome:
    """A bandwidth phase as the client reports it."""

    messages: int
    bytes: int
    seconds: float
    bw_gbs: float | None
    msg_rate_mpps: float | None
    cpu_client_s: float | None
    cpu_server_s: float | None
    per_stream: tuple[StreamFigure, ...] = ()
    """Several TCP streams: each one's figures as its receiver saw them."""
    stream_senders: str | None = None
    """Several TCP streams: ``processes`` or ``threads`` sent them."""


@dataclass(frozen=True)
class LatOutcome:
    iters: int
    stats: LatencyStats
    busy_poll: Mapping[str, bool] | None = None
    """TCP: whether each side (``client``, ``server``) busy-polled through the measured round trips."""


def int_field(msg: dict[str, Any], key: str, lo: int, hi: int, what: str) -> int:
    """An integer field of a peer's message within ``lo..hi``; ProtocolError naming it otherwise."""
    try:
        return check_int(msg.get(key), f"{what} {key}", lo, hi)
    except RequestError as e:
        raise ProtocolError(e.message) from None


def read_phase(msg: dict[str, Any], req: RunRequest) -> tuple[str, int, int]:
    """Validate a ``phase`` message against the negotiated request (server side)."""
    kind = msg.get("kind")
    if not isinstance(kind, str) or kind not in req.kinds:
        raise ProtocolError(f"phase kind {peer_value(kind)} was not requested")
    size = int_field(msg, "bytes", 1, req.max_size, "phase")
    if size not in req.sizes:
        raise ProtocolError(f"phase size {size} was not requested")
    return kind, size, int_field(msg, "warmup", 0, MAX_WARMUP, "phase")


def read_iters(msg: dict[str, Any]) -> int:
    return int_field(msg, "n", 1, MAX_LAT_SAMPLES, "latency iteration count")


#: Most CPUs a server process could keep busy: CPU seconds above span x this are not believed.
MAX_SERVER_CPUS = 4096


def impossible(peer: str, what: str) -> ProtocolError:
    return ProtocolError(
        f"{peer} reported an impossible {what}; its figures are not used",
        hint="the server is broken or is not an honest ibdiag bench serve; run the same ibdiag version on both hosts",
    )


def count_field(res: dict[str, Any], key: str, peer: str, what: str) -> int:
    v = res.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise impossible(peer, f"{what}: {key} {peer_value(v)} is not a count")
    return v


def seconds_field(
    res: dict[str, Any], key: str, peer: str, what: str, *, span_s: float, factor: float = 1.0
) -> float:
    v = res.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise impossible(peer, f"{what}: {key} {peer_value(v)} is not a time")
    if v > span_s * factor * 1.01 + 0.01:
        raise impossible(
            peer,
            f"{what}: {key} {v:g} s is longer than the {span_s:.3g} s the whole test took here",
        )
    return float(v)


def check_cpu_s(res: dict[str, Any], peer: str, what: str, span_s: float) -> float | None:
    """The server's ``cpu_s`` (None when it did not measure one), within what ``span_s`` allows."""
    if res.get("cpu_s") is None:
        return None
    return seconds_field(res, "cpu_s", peer, what, span_s=span_s, factor=MAX_SERVER_CPUS)


def check_bw_result(
    res: dict[str, Any], *, size: int, sent_messages: int, span_s: float, peer: str
) -> tuple[int, int, float, float | None]:
    """(messages, bytes, seconds, cpu_s) the server received, checked against what this client sent.

    The server must have counted exactly the ``sent_messages`` messages of ``size`` bytes of the
    measured phase, over a positive time no longer than the ``span_s`` seconds between asking for
    the test and its result; CPU seconds are finite and non-negative. ProtocolError (exit 3)
    naming the server otherwise.
    """
    what = f"{format_bytes(size)} bandwidth result"
    msgs = count_field(res, "rx_messages", peer, what)
    nbytes = count_field(res, "rx_bytes", peer, what)
    sent_bytes = sent_messages * size
    if nbytes > sent_bytes:
        raise impossible(
            peer,
            f"{what}: rx_bytes {peer_value(nbytes)} is more than the {sent_bytes} bytes this client sent",
        )
    if msgs != sent_messages:
        raise impossible(
            peer,
            f"{what}: rx_messages {peer_value(msgs)}, but this client sent {sent_messages} messages",
        )
    if nbytes != msgs * size:
        raise impossible(
            peer, f"{what}: rx_bytes {nbytes} is not rx_messages {msgs} x {size} bytes"
        )
    seconds = seconds_field(res, "rx_seconds", peer, what, span_s=span_s)
    if msgs > 0 and seconds <= 0:
        raise impossible(peer, f"{what}: {msgs} messages in rx_seconds {seconds:g}")
    for key in ("tx_messages", "tx_bytes"):
        count_field(res, key, peer, what)
    seconds_field(res, "tx_seconds", peer, what, span_s=span_s)
    return msgs, nbytes, seconds, check_cpu_s(res, peer, what, span_s)


def check_stream_figures(
    res: dict[str, Any], *, size: int, sent: Sequence[int], span_s: float, peer: str
) -> tuple[StreamFigure, ...]:
    """Each stream's ``[messages, seconds]`` as the server received it (``rx_streams``), checked against
    what this client sent on that stream; () when the server did not say (one from before) or there
    is one stream."""
    rows = res.get("rx_streams")
    if rows is None or len(sent) < 2:
        return ()
    what = f"{format_bytes(size)} bandwidth result"
    if not isinstance(rows, list) or len(rows) != len(sent):
        raise impossible(peer, f"{what}: rx_streams is not one entry per stream")
    out = []
    for i, (row, n) in enumerate(zip(rows, sent, strict=True)):
        if not (isinstance(row, list) and len(row) == 2):
            raise impossible(peer, f"{what}: rx_streams[{i}] is not [messages, seconds]")
        entry = {"messages": row[0], "seconds": row[1]}
        msgs = count_field(entry, "messages", peer, f"{what} (stream {i + 1})")
        if msgs != n:
            raise impossible(
                peer, f"{what}: stream {i + 1} received {msgs} messages, this client sent {n}"
            )
        secs = seconds_field(entry, "seconds", peer, f"{what} (stream {i + 1})", span_s=span_s)
        out.append(StreamFigure(msgs * size, secs))
    return tuple(out)


# --- rows: one per size, whatever measured it ----------------------------------------------------------


def bw_row(size: int, bw: BwOutcome) -> P2PResult:
    """The bandwidth half of a row, from what ibdiag's own loops measured."""
    return P2PResult(
        bytes=size,
        iters=bw.messages,
        bw_gbs=bw.bw_gbs,
        msg_rate_mpps=bw.msg_rate_mpps,
        cpu_s_per_gb={
            "client": cpu_s_per_gb(bw.cpu_client_s, bw.bytes),
            "server": cpu_s_per_gb(bw.cpu_server_s, bw.bytes),
        },
        elapsed_s=bw.seconds,
        per_stream=bw.per_stream,
        stream_senders=bw.stream_senders,
    )


def lat_row(size: int, lat: LatOutcome) -> P2PResult:
    """The latency half of a row, from what ibdiag's own loops measured."""
    return P2PResult(bytes=size, iters=lat.iters, lat_us=lat.stats, lat_busy_poll=lat.busy_poll)


def merge(size: int, bw: P2PResult | None, lat: P2PResult | None) -> P2PResult:
    """One row per size: bandwidth fields from the bw half, latency fields from the lat half."""
    base = bw if bw is not None else lat
    assert base is not None
    return P2PResult(
        bytes=size,
        iters=base.iters,
        bw_gbs=None if bw is None else bw.bw_gbs,
        bw_peak_gbs=None if bw is None else bw.bw_peak_gbs,
        msg_rate_mpps=None if bw is None else bw.msg_rate_mpps,
        lat_us=None if lat is None else lat.lat_us,
        cpu_s_per_gb={} if bw is None else bw.cpu_s_per_gb,
        elapsed_s=None if bw is None else bw.elapsed_s,
        lat_iters=None if lat is None else lat.iters,
        lat_avg_us=None if lat is None else lat.lat_avg_us,
        per_stream=() if bw is None else bw.per_stream,
        stream_senders=None if bw is None else bw.stream_senders,
        lat_busy_poll=None if lat is None else lat.lat_busy_poll,
    )


#: ``progress(done, total, label)``: called before each size/kind and once at the end.
Progress = Callable[[int, int, str], None]


def measure_sizes(
    measure: Callable[[int, str], P2PResult],
    sizes: Sequence[int],
    kinds: Sequence[str],
    progress: Progress | None,
) -> list[P2PResult]:
    """Every size, each kind in turn (``measure(size, kind)`` gives that half of the row), merged per size."""
    total = len(sizes) * len(kinds)
    done = 0
    out: list[P2PResult] = []
    for size in sizes:
        got: dict[str, P2PResult] = {}
        for kind in kinds:
            if progress is not None:
                progress(done, total, f"{kind} {format_bytes(size)}")
            got[kind] = measure(size, kind)
            done += 1
        out.append(merge(size, got.get("bw"), got.get("lat")))
    if progress is not None:
        progress(done, total, "done")
    return out


# --- the two halves of a run, and an engine: the pair of factories -------------------------------------


@dataclass(frozen=True)
class Local:
    """This end's settings an engine reads (from the client's or the server's options)."""

    sysfs: SysfsRoot
    device: str | None
    ib_port: int
    gid_index: int | None
    timeout_s: float
    socket_buffer: int | None
    perftest_path: str | None


class ClientSide(Protocol):
    """The client's half of a run, after the server's ``ready``."""

    def connect(self, ready: dict[str, Any]) -> RdmaPath | None:
        """Set up the data path from the server's ``ready``; RDMA: both ends' devices and the path."""
        ...

    def line_rate(self, sysfs: SysfsRoot) -> LineRate:
        """This end's line rate (of the interface or port the data path uses)."""
        ...

    def measure(self, size: int, kind: str) -> P2PResult:
        """One phase (``kind`` bw or lat) of ``size``-byte messages: that half of the size's row."""
        ...

    def tool_runs(self) -> tuple[ToolRuns, ...]:
        """The C tools that measured (their versions and command lines); () for ibdiag's own loops."""
        ...

    def busy_poll(self) -> BusyPoll | None:
        """TCP latency by ibdiag's loops: the busy-polling budget and SO_BUSY_POLL on both ends."""
        ...

    def close(self) -> None: ...


class ServerSide(Protocol):
    """The server's half of a run: ``ready``'s details, the data path, then one phase per message."""

    def line_rate(self, sysfs: SysfsRoot) -> LineRate: ...

    def prepare(self) -> dict[str, Any]:
        """The engine's fields of ``ready``."""
        ...

    def connect(self) -> None: ...

    def phase(self, msg: dict[str, Any]) -> None:
        """Run the phase a client's ``phase`` message asks for (checked with :func:`read_phase`)."""
        ...

    def close(self) -> None: ...


#: A client side made once the channel is up (``factory(channel)``), after the checks that come first.
ClientFactory = Callable[[Channel], ClientSide]


@dataclass(frozen=True)
class Engine:
    """One (engine, transport) pair: how each end makes its half.

    ``client(req, local)`` runs the checks that must pass before any connection (a missing program,
    device or port: exit 2/3) and returns the factory of the client side; ``server(ch, req, local,
    log)`` makes the server side (refusing, with :class:`~.control.protocol.Refused`, what this
    server cannot run).
    """

    client: Callable[[RunRequest, Local], ClientFactory]
    server: Callable[[Channel, RunRequest, Local, Log], ServerSide]


class OwnLoops:
    """:meth:`ClientSide.measure` for ibdiag's own loops: the phase's warm-up, then ``bw`` or ``lat``."""

    req: RunRequest

    def bw(self, size: int, warmup: int) -> BwOutcome:
        raise NotImplementedError

    def lat(self, size: int, warmup: int) -> LatOutcome:
        raise NotImplementedError

    def measure(self, size: int, kind: str) -> P2PResult:
        warmup = self.req.warmup_for(size, kind)
        if kind == "bw":
            return bw_row(size, self.bw(size, warmup))
        return lat_row(size, self.lat(size, warmup))

    def tool_runs(self) -> tuple[ToolRuns, ...]:
        return ()

    def busy_poll(self) -> BusyPoll | None:
        return None
