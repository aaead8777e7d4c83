"""Both halves of a TCP run over the control channel (ibdiag's own engine; the messages: :mod:`..session`).

The server listens on a data port it picks and names in ``ready`` with a nonce; the client opens
``--streams`` data connections, each introduced by the session's MAC over that nonce
(:mod:`.streams`), and the data moves through :mod:`.data`'s loops.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

from ibdiag.bench.buffers import Buffer, allocate
from ibdiag.bench.p2p.control import sockio
from ibdiag.bench.p2p.control.protocol import Channel, ProtocolError
from ibdiag.bench.p2p.fields import RequestError, check_port
from ibdiag.bench.p2p.linerate import tcp_line_rate
from ibdiag.bench.p2p.params import RunRequest, latency_iterations
from ibdiag.bench.p2p.phase import (
    BwOutcome,
    ClientFactory,
    Engine,
    LatOutcome,
    Local,
    Log,
    OwnLoops,
    check_bw_result,
    check_stream_figures,
    read_iters,
    read_phase,
)
from ibdiag.bench.p2p.tcp import data as tcp
from ibdiag.bench.p2p.tcp import streams
from ibdiag.bench.p2p.tcp.latency import Spin, ping, pong
from ibdiag.bench.p2p.tcp.senders import send_in_processes
from ibdiag.bench.results.model import StreamFigure
from ibdiag.bench.results.p2p_meta import BusyPoll, LineRate
from ibdiag.bench.results.stats import (
    CpuMeter,
    bandwidth_gbs,
    latency_from_round_trips_ns,
    message_rate_mpps,
)
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.units import format_bytes


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

    def line_rate(self, sysfs: SysfsRoot) -> LineRate:
        return tcp_line_rate(sysfs, self.ch.sock.getsockname()[0])

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
        kind, size, warmup = read_phase(msg, self.req)
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
                sent = f"{format_bytes(size)} messages"
                jobs += tcp.send_jobs(
                    self.socks,
                    view,
                    warmup,
                    self.req.iters,
                    window,
                    peer,
                    lambda i: f"{sent} on stream {i + 1}",
                )
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
                    "rx_streams": [[st.messages, st.t_end - st.t_start] for st in stats[:n_rx]],
                }
            )
            return
        self._lat(size, warmup)

    def _lat(self, size: int, warmup: int) -> None:
        """Answer the client's pings: the warm-up, then the ``iters`` it names, busy-polling as asked."""
        assert self.msgbuf is not None
        sock = self.socks[0]
        view = self.msgbuf.view[:size]
        peer = self.ch.peer
        sockio.set_nodelay(sock, True)
        budget_ns = self.req.busy_poll_ns
        so_busy = sockio.set_busy_poll(sock, budget_ns // 1000) if budget_ns else None
        self.ch.send({"type": "go"})
        what = f"the next {format_bytes(size)} latency ping"
        try:
            pong(
                sock,
                view,
                warmup,
                peer=peer,
                what=what,
                timeout_s=self.timeout_s,
                spin=Spin(budget_ns),
            )
            n = read_iters(self.ch.expect("iters", "the latency iteration count"))
            spin = Spin(budget_ns)
            pong(sock, view, n, peer=peer, what=what, timeout_s=self.timeout_s, spin=spin)
        finally:
            if so_busy:
                sockio.set_busy_poll(sock, 0)
        sockio.set_nodelay(sock, False)
        self.ch.send({"type": "result", "busy_poll": spin.spinning, "so_busy_poll": so_busy})

    def close(self) -> None:
        if self.listener is not None:
            self.listener.close()
        sockio.close_all(self.socks)
        for b in [*self.rings, *([self.msgbuf] if self.msgbuf else [])]:
            b.close()


class TcpClientSide(OwnLoops):
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
        self._busy: BusyPoll | None = None
        try:
            if req.bidir:
                self.rings = [allocate(tcp.RECV_RING_MAX) for _ in range(req.streams)]
            if "lat" in req.kinds:
                self.latbuf = allocate(req.max_size)
        except BaseException:
            self.close()
            raise

    def line_rate(self, sysfs: SysfsRoot) -> LineRate:
        return tcp_line_rate(sysfs, self.ch.sock.getsockname()[0])

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
        what = f"the {format_bytes(size)} bandwidth test"
        senders: str | None = None
        if len(self.socks) > 1 and not self.req.bidir:  # one process per stream (:mod:`.senders`)
            sent = send_in_processes(
                self.socks,
                self.sendbuf.view[:size],
                warmup=warmup,
                iters=self.req.iters,
                duration_s=self.req.measure_duration_s,
                timeout_s=self.timeout_s,
                peer=peer,
                what_of=lambda i: f"{what} (stream {i + 1})",
                on_start=meter.start,
            )
            stats, n_tx, children_cpu, senders = (
                sent.stats,
                len(sent.stats),
                sent.cpu_s,
                "processes",
            )
        else:
            stats, n_tx = self._send_threads(size, warmup, meter, what)
            children_cpu, senders = 0.0, ("threads" if len(self.socks) > 1 else None)
        own_cpu = meter.stop()
        cpu_client = None if own_cpu is None else own_cpu + children_cpu
        res = self.ch.expect("result", f"the server's {format_bytes(size)} bandwidth result")
        sent_msgs = sum(st.messages for st in stats[:n_tx])
        rx_msgs, rx_bytes, rx_s, cpu_server = check_bw_result(
            res, size=size, sent_messages=sent_msgs, span_s=time.monotonic() - t_asked, peer=peer
        )
        span_s = time.monotonic() - t_asked
        per_stream = check_stream_figures(
            res, size=size, sent=[st.messages for st in stats[:n_tx]], span_s=span_s, peer=peer
        )
        if self.req.bidir and len(stats) - n_tx > 1:  # the server's streams to this client follow
            per_stream += tuple(
                StreamFigure(st.bytes, st.t_end - st.t_start) for st in stats[n_tx:]
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
        return BwOutcome(
            messages,
            nbytes,
            seconds,
            bw,
            rate,
            cpu_client,
            cpu_server,
            per_stream=per_stream,
            stream_senders=senders,
        )

    def _send_threads(
        self, size: int, warmup: int, meter: CpuMeter, what: str
    ) -> tuple[list[Any], int]:
        """One sender thread per stream (and with ``--bidir`` one receiver each): the phase's stats, and
        how many of them are the senders'."""
        peer = self.ch.peer
        window = tcp.SendWindow(
            len(self.socks), self.req.measure_duration_s, self.timeout_s, on_start=meter.start
        )
        view = self.sendbuf.view[:size]
        jobs: list[Callable[[], Any]] = tcp.send_jobs(
            self.socks,
            view,
            warmup,
            self.req.iters,
            window,
            peer,
            lambda i: f"{what} (stream {i + 1})",
        )
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
        return tcp.run_parallel(jobs, on_error=lambda: sockio.close_all(self.socks)), n_tx

    def lat(self, size: int, warmup: int) -> LatOutcome:
        assert self.latbuf is not None
        sock = self.socks[0]
        peer = self.ch.peer
        sockio.set_nodelay(sock, True)
        budget_ns = self.req.busy_poll_ns
        so_busy = sockio.set_busy_poll(sock, budget_ns // 1000) if budget_ns else None
        self.ch.send({"type": "phase", "kind": "lat", "bytes": size, "warmup": warmup})
        self.ch.expect("go", f"the server to start the {format_bytes(size)} latency test")
        sv = self.sendbuf.view[:size]
        rv = self.latbuf.view[:size]
        what = f"the answer to a {format_bytes(size)} latency ping"
        t = self.timeout_s
        try:
            warm = ping(
                sock, sv, rv, warmup, peer=peer, what=what, timeout_s=t, spin=Spin(budget_ns)
            )
            n = self.req.iters or latency_iterations(self.req.measure_duration_s or 1.0, warm)
            self.ch.send({"type": "iters", "n": n})
            spin = Spin(budget_ns)
            samples = ping(sock, sv, rv, n, peer=peer, what=what, timeout_s=t, spin=spin)
        finally:
            if so_busy:
                sockio.set_busy_poll(sock, 0)
        res = self.ch.expect(
            "result", f"the server to finish the {format_bytes(size)} latency test"
        )
        sockio.set_nodelay(sock, False)
        theirs = res.get("busy_poll")
        sides = {"client": spin.spinning}
        if isinstance(theirs, bool):  # a server from before busy-polling says nothing: it blocked
            sides["server"] = theirs
        server_so = res.get("so_busy_poll")
        self._busy = BusyPoll(
            budget_ns // 1000,
            {"client": so_busy, "server": server_so if isinstance(server_so, bool) else None},
        )
        return LatOutcome(n, latency_from_round_trips_ns(samples), busy_poll=sides)

    def busy_poll(self) -> BusyPoll | None:
        return self._busy

    def close(self) -> None:
        sockio.close_all(self.socks)
        for b in [self.sendbuf, *self.rings, *([self.latbuf] if self.latbuf else [])]:
            b.close()


def _client(req: RunRequest, local: Local) -> ClientFactory:
    return lambda ch: TcpClientSide(
        ch, req, timeout_s=local.timeout_s, socket_buffer=local.socket_buffer
    )


def _server(ch: Channel, req: RunRequest, local: Local, log: Log) -> TcpServerSide:
    return TcpServerSide(
        ch, req, timeout_s=local.timeout_s, log=log, socket_buffer=local.socket_buffer
    )


#: ``--transport tcp`` (ibdiag's own engine).
TCP = Engine(_client, _server)
