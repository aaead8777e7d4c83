"""One benchmark run over an authenticated control channel: both roles, both transports.

After the handshake (:mod:`.protocol`) the client sends ``run`` (a :class:`~.params.RunRequest`);
then::

    server -> client  ready      {tcp: data_port, data_nonce | rdma: qp, device, gid_index, max_rd_atomic; line_rate}
    (tcp: the client opens --streams data connections, each introduced by the session's MAC over
     data_nonce and its index (streams.data_hello); rdma: client -> server  qp {qp, max_rd_atomic})
    server -> client  connected
    per size and kind:
      client -> server  phase    {kind: bw|lat, bytes, warmup}
      server -> client  go
      bw, tcp:  data flows; server -> client  result {rx_*, tx_*, cpu_s}
      bw, rdma: client WRITEs/READs/SENDs (sending ``beat`` now and then), then client -> server
                sent; server -> client result {cpu_s, ...} (details in :mod:`.rdma_session`)
      lat:      warm-up ping-pongs; client -> server iters {n}; n ping-pongs; server -> client result
    client -> server  bye

Every wait has the channel's deadline; the data path uses kernel socket timeouts or, for RDMA,
completion/poll deadlines. Every figure the server reports is checked against what the client
itself sent and timed (:func:`check_bw_result`) before it is used: a figure a server cannot have
measured is refused (exit 3) rather than printed.
"""

from __future__ import annotations

import math
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ibdiag.bench.buffers import Buffer, allocate
from ibdiag.bench.p2p.control import sockio
from ibdiag.bench.p2p.control.protocol import Channel, ProtocolError, peer_value
from ibdiag.bench.p2p.params import (
    MAX_LAT_SAMPLES,
    MAX_WARMUP,
    RequestError,
    RunRequest,
    check_int,
    check_port,
    latency_iterations,
)
from ibdiag.bench.p2p.tcp import data as tcp
from ibdiag.bench.p2p.tcp import streams
from ibdiag.bench.results.model import LatencyStats
from ibdiag.bench.results.stats import (
    CpuMeter,
    bandwidth_gbs,
    latency_from_round_trips_ns,
    message_rate_mpps,
)
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


@dataclass(frozen=True)
class LatOutcome:
    iters: int
    stats: LatencyStats


def _field(msg: dict[str, Any], key: str, lo: int, hi: int, what: str) -> int:
    """An integer field of a peer's message within ``lo..hi``; ProtocolError naming it otherwise."""
    try:
        return check_int(msg.get(key), f"{what} {key}", lo, hi)
    except RequestError as e:
        raise ProtocolError(e.message) from None


def _phase_msg(msg: dict[str, Any], req: RunRequest) -> tuple[str, int, int]:
    """Validate a ``phase`` message against the negotiated request (server side)."""
    kind = msg.get("kind")
    if not isinstance(kind, str) or kind not in req.kinds:
        raise ProtocolError(f"phase kind {peer_value(kind)} was not requested")
    size = _field(msg, "bytes", 1, req.max_size, "phase")
    if size not in req.sizes:
        raise ProtocolError(f"phase size {size} was not requested")
    return kind, size, _field(msg, "warmup", 0, MAX_WARMUP, "phase")


def _iters_msg(msg: dict[str, Any]) -> int:
    return _field(msg, "n", 1, MAX_LAT_SAMPLES, "latency iteration count")


#: Most CPUs a server process could keep busy: CPU seconds above span x this are not believed.
MAX_SERVER_CPUS = 4096


def _impossible(peer: str, what: str) -> ProtocolError:
    return ProtocolError(
        f"{peer} reported an impossible {what}; its figures are not used",
        hint="the server is broken or is not an honest ibdiag bench serve; run the same ibdiag version on both hosts",
    )


def _count(res: dict[str, Any], key: str, peer: str, what: str) -> int:
    v = res.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise _impossible(peer, f"{what}: {key} {peer_value(v)} is not a count")
    return v


def _seconds(
    res: dict[str, Any], key: str, peer: str, what: str, *, span_s: float, factor: float = 1.0
) -> float:
    v = res.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise _impossible(peer, f"{what}: {key} {peer_value(v)} is not a time")
    if v > span_s * factor * 1.01 + 0.01:
        raise _impossible(
            peer,
            f"{what}: {key} {v:g} s is longer than the {span_s:.3g} s the whole test took here",
        )
    return float(v)


def check_cpu_s(res: dict[str, Any], peer: str, what: str, span_s: float) -> float | None:
    """The server's ``cpu_s`` (None when it did not measure one), within what ``span_s`` allows."""
    if res.get("cpu_s") is None:
        return None
    return _seconds(res, "cpu_s", peer, what, span_s=span_s, factor=MAX_SERVER_CPUS)


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
    msgs = _count(res, "rx_messages", peer, what)
    nbytes = _count(res, "rx_bytes", peer, what)
    sent_bytes = sent_messages * size
    if nbytes > sent_bytes:
        raise _impossible(
            peer,
            f"{what}: rx_bytes {peer_value(nbytes)} is more than the {sent_bytes} bytes this client sent",
        )
    if msgs != sent_messages:
        raise _impossible(
            peer,
            f"{what}: rx_messages {peer_value(msgs)}, but this client sent {sent_messages} messages",
        )
    if nbytes != msgs * size:
        raise _impossible(
            peer, f"{what}: rx_bytes {nbytes} is not rx_messages {msgs} x {size} bytes"
        )
    seconds = _seconds(res, "rx_seconds", peer, what, span_s=span_s)
    if msgs > 0 and seconds <= 0:
        raise _impossible(peer, f"{what}: {msgs} messages in rx_seconds {seconds:g}")
    for key in ("tx_messages", "tx_bytes"):
        _count(res, key, peer, what)
    _seconds(res, "tx_seconds", peer, what, span_s=span_s)
    return msgs, nbytes, seconds, check_cpu_s(res, peer, what, span_s)


# --- TCP -----------------------------------------------------------------------------------------


class TcpServerSide:
    """The server's half of a TCP run: data listener, receive buffers, phases."""

    def __init__(
        self,
        ch: Channel,
        req: RunRequest,
        *,
        timeout_s: float,
        log: Log,
        socket_buffer: int | None = None,
    ) -> None:
        self.ch = ch
        self.req = req
        self.timeout_s = timeout_s
        self.log = log
        self.socket_buffer = socket_buffer
        self.listener: socket.socket | None = None
        self.socks: list[socket.socket] = []
        self.rings: list[Buffer] = []
        self.msgbuf: Buffer | None = None
        self.data_nonce = streams.new_data_nonce()

    def prepare(self) -> dict[str, Any]:
        local = self.ch.sock.getsockname()
        family = self.ch.sock.family
        self.listener = socket.socket(family, socket.SOCK_STREAM)
        self.listener.bind(
            (local[0], 0)
            if family == socket.AF_INET
            else (local[0], 0, 0, local[3] if len(local) > 3 else 0)
        )
        self.listener.listen(self.req.streams + 4)
        self.rings = [allocate(tcp.RECV_RING_MAX) for _ in range(self.req.streams)]
        if self.req.bidir or "lat" in self.req.kinds:
            self.msgbuf = allocate(self.req.max_size)
        return {"data_port": self.listener.getsockname()[1], "data_nonce": self.data_nonce.hex()}

    def connect(self) -> None:
        assert self.listener is not None and self.ch.session_key is not None
        self.socks = streams.accept_streams(
            self.listener,
            self.req.streams,
            self.ch.session_key,
            self.data_nonce,
            self.timeout_s,
            self.log,
            self.socket_buffer,
            control=self.ch.sock,
        )
        self.listener.close()
        self.listener = None

    def phase(self, msg: dict[str, Any]) -> None:
        kind, size, warmup = _phase_msg(msg, self.req)
        peer = self.ch.peer
        if kind == "bw":
            meter = CpuMeter()
            jobs: list[Callable[[], Any]] = [
                (
                    lambda s=s, r=r, i=i: tcp.recv_stream(  # type: ignore[misc]  # mypy#15459: no inference for a lambda with default args
                        s,
                        r.view,
                        size,
                        on_measure_start=meter.start,
                        peer=peer,
                        what=f"{format_bytes(size)} messages on stream {i + 1}",
                        timeout_s=self.timeout_s,
                    )
                )
                for i, (s, r) in enumerate(zip(self.socks, self.rings, strict=True))
            ]
            n_rx = len(jobs)
            if self.req.bidir:
                assert self.msgbuf is not None
                window = tcp.SendWindow(
                    len(self.socks), self.req.measure_duration_s, self.timeout_s
                )
                view = self.msgbuf.view[:size]
                jobs += [
                    (
                        lambda s=s, i=i: tcp.send_stream(  # type: ignore[misc]  # mypy#15459: no inference for a lambda with default args
                            s,
                            view,
                            warmup=warmup,
                            iters=self.req.iters,
                            window=window,
                            peer=peer,
                            what=f"{format_bytes(size)} messages on stream {i + 1}",
                        )
                    )
                    for i, s in enumerate(self.socks)
                ]
            self.ch.send({"type": "go"})
            stats = tcp.run_parallel(jobs, on_error=lambda: sockio.close_all(self.socks))
            cpu = meter.stop()
            rx_msgs, rx_bytes, rx_s = tcp.window_of(stats[:n_rx])
            tx_msgs, tx_bytes, tx_s = tcp.window_of(stats[n_rx:])
            self.ch.send(
                {
                    "type": "result",
                    "rx_messages": rx_msgs,
                    "rx_bytes": rx_bytes,
                    "rx_seconds": rx_s,
                    "tx_messages": tx_msgs,
                    "tx_bytes": tx_bytes,
                    "tx_seconds": tx_s,
                    "cpu_s": cpu,
                }
            )
            return
        assert self.msgbuf is not None
        sock = self.socks[0]
        view = self.msgbuf.view[:size]
        sockio.set_nodelay(sock, True)
        self.ch.send({"type": "go"})
        what = f"the next {format_bytes(size)} latency ping"
        tcp.pong(sock, view, warmup, peer=peer, what=what, timeout_s=self.timeout_s)
        n = _iters_msg(self.ch.expect("iters", "the latency iteration count"))
        tcp.pong(sock, view, n, peer=peer, what=what, timeout_s=self.timeout_s)
        sockio.set_nodelay(sock, False)
        self.ch.send({"type": "result"})

    def close(self) -> None:
        if self.listener is not None:
            self.listener.close()
        sockio.close_all(self.socks)
        for b in [*self.rings, *([self.msgbuf] if self.msgbuf else [])]:
            b.close()


class TcpClientSide:
    """The client's half of a TCP run."""

    def __init__(
        self, ch: Channel, req: RunRequest, *, timeout_s: float, socket_buffer: int | None = None
    ) -> None:
        self.ch = ch
        self.req = req
        self.timeout_s = timeout_s
        self.socket_buffer = socket_buffer
        self.socks: list[socket.socket] = []
        self.sendbuf = allocate(req.max_size)
        self.rings: list[Buffer] = []
        self.latbuf: Buffer | None = None
        try:
            if req.bidir:
                self.rings = [allocate(tcp.RECV_RING_MAX) for _ in range(req.streams)]
            if "lat" in req.kinds:
                self.latbuf = allocate(req.max_size)
        except BaseException:
            self.close()
            raise

    def connect(self, ready: dict[str, Any]) -> None:
        try:
            port = check_port(ready.get("data_port"), "data_port")
        except RequestError as e:
            raise ProtocolError(f"{self.ch.peer} sent an invalid data port: {e.message}") from None
        nonce_hex = ready.get("data_nonce")
        try:
            nonce = (
                bytes.fromhex(nonce_hex)
                if isinstance(nonce_hex, str) and len(nonce_hex) == 2 * streams.DATA_NONCE_BYTES
                else b""
            )
        except ValueError:
            nonce = b""
        if not nonce or self.ch.session_key is None:
            raise ProtocolError(f"{self.ch.peer} sent no valid data_nonce for the data connections")
        host = self.ch.sock.getpeername()[0]
        self.socks = streams.connect_streams(
            host,
            port,
            self.req.streams,
            self.ch.session_key,
            nonce,
            self.timeout_s,
            self.socket_buffer,
        )

    def bw(self, size: int, warmup: int) -> BwOutcome:
        peer = self.ch.peer
        t_asked = time.monotonic()
        self.ch.send({"type": "phase", "kind": "bw", "bytes": size, "warmup": warmup})
        self.ch.expect("go", f"the server to start the {format_bytes(size)} bandwidth test")
        meter = CpuMeter()
        window = tcp.SendWindow(
            len(self.socks), self.req.measure_duration_s, self.timeout_s, on_start=meter.start
        )
        view = self.sendbuf.view[:size]
        what = f"the {format_bytes(size)} bandwidth test"
        jobs: list[Callable[[], Any]] = [
            (
                lambda s=s, i=i: tcp.send_stream(  # type: ignore[misc]  # mypy#15459: no inference for a lambda with default args
                    s,
                    view,
                    warmup=warmup,
                    iters=self.req.iters,
                    window=window,
                    peer=peer,
                    what=f"{what} (stream {i + 1})",
                )
            )
            for i, s in enumerate(self.socks)
        ]
        n_tx = len(jobs)
        if self.req.bidir:
            jobs += [
                (
                    lambda s=s, r=r, i=i: tcp.recv_stream(  # type: ignore[misc]  # mypy#15459: no inference for a lambda with default args
                        s,
                        r.view,
                        size,
                        on_measure_start=lambda: None,
                        peer=peer,
                        what=f"{what} (stream {i + 1}, from the server)",
                        timeout_s=self.timeout_s,
                    )
                )
                for i, (s, r) in enumerate(zip(self.socks, self.rings, strict=True))
            ]
        stats = tcp.run_parallel(jobs, on_error=lambda: sockio.close_all(self.socks))
        cpu_client = meter.stop()
        res = self.ch.expect("result", f"the server's {format_bytes(size)} bandwidth result")
        sent = sum(st.messages for st in stats[:n_tx])
        rx_msgs, rx_bytes, rx_s, cpu_server = check_bw_result(
            res, size=size, sent_messages=sent, span_s=time.monotonic() - t_asked, peer=peer
        )
        messages, nbytes, seconds = rx_msgs, rx_bytes, rx_s
        bw = bandwidth_gbs(rx_bytes, rx_s)
        rate = message_rate_mpps(rx_msgs, rx_s)
        if self.req.bidir:
            back_msgs, back_bytes, back_s = tcp.window_of(stats[n_tx:])
            back_bw = bandwidth_gbs(back_bytes, back_s)
            back_rate = message_rate_mpps(back_msgs, back_s)
            bw = None if bw is None or back_bw is None else bw + back_bw
            rate = None if rate is None or back_rate is None else rate + back_rate
            messages += back_msgs
            nbytes += back_bytes
            seconds = max(seconds, back_s)
        return BwOutcome(messages, nbytes, seconds, bw, rate, cpu_client, cpu_server)

    def lat(self, size: int, warmup: int) -> LatOutcome:
        assert self.latbuf is not None
        sock = self.socks[0]
        sockio.set_nodelay(sock, True)
        self.ch.send({"type": "phase", "kind": "lat", "bytes": size, "warmup": warmup})
        self.ch.expect("go", f"the server to start the {format_bytes(size)} latency test")
        sv = self.sendbuf.view[:size]
        rv = self.latbuf.view[:size]
        what = f"the answer to a {format_bytes(size)} latency ping"
        warm = tcp.ping(
            sock, sv, rv, warmup, peer=self.ch.peer, what=what, timeout_s=self.timeout_s
        )
        n = self.req.iters or latency_iterations(self.req.measure_duration_s or 1.0, warm)
        self.ch.send({"type": "iters", "n": n})
        samples = tcp.ping(sock, sv, rv, n, peer=self.ch.peer, what=what, timeout_s=self.timeout_s)
        self.ch.expect("result", f"the server to finish the {format_bytes(size)} latency test")
        sockio.set_nodelay(sock, False)
        return LatOutcome(n, latency_from_round_trips_ns(samples))

    def close(self) -> None:
        sockio.close_all(self.socks)
        for b in [self.sendbuf, *self.rings, *([self.latbuf] if self.latbuf else [])]:
            b.close()


# --- RDMA: in rdma_session (one module per transport); its names stay reachable from here -------------

_RDMA_NAMES = ("RdmaSelection", "select_rdma", "RdmaSide", "RdmaServerSide", "RdmaClientSide")


def __getattr__(name: str) -> Any:
    if name in _RDMA_NAMES:
        from ibdiag.bench.p2p.rdma import session as rdma_session

        return getattr(rdma_session, name)
    raise AttributeError(name)
