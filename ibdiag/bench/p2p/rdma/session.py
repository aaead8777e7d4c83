"""Both halves of an RDMA run over the control channel (the messages common to every engine: :mod:`..session`).

Each side registers one buffer of 2 x the largest size (receive half, send half) and creates
``--qps`` RC queue pairs. Per bandwidth phase both sides fill their send half with a known pattern
and zero their receive half first, so whoever received data checks it arrived intact
(:func:`~ibdiag.bench.p2p.rdma.loops.check_pattern`): WRITE and SEND move client -> server, READ
server -> client, ``--bidir`` both ways at once. Messages beyond :mod:`..session`'s::

    client -> server  qp      {qp, max_rd_atomic}
    bw:   client -> server  sent   {messages, total}      (after its loop; ``beat`` while it runs)
          server -> client  result {cpu_s, rx_messages?, rx_verified?, tx_messages?, tx_bytes?, tx_seconds?}
"""

from __future__ import annotations

import random
import select
import time
from typing import Any

from ibdiag.bench.buffers import allocate
from ibdiag.bench.p2p.control.protocol import (
    Channel,
    ProtocolError,
    Refused,
    RemoteError,
    peer_text,
    peer_value,
)
from ibdiag.bench.p2p.fields import RequestError, check_int
from ibdiag.bench.p2p.linerate import rdma_line_rate
from ibdiag.bench.p2p.params import RunRequest, latency_iterations
from ibdiag.bench.p2p.phase import (
    BwOutcome,
    ClientFactory,
    Engine,
    LatOutcome,
    Local,
    Log,
    OwnLoops,
    check_cpu_s,
    count_field,
    impossible,
    read_iters,
    read_phase,
    seconds_field,
)
from ibdiag.bench.p2p.rdma.device import RdmaSelection, select_rdma
from ibdiag.bench.p2p.rdma.endpoint import RdmaEndpoint
from ibdiag.bench.p2p.rdma.latency import (
    read_lat,
    send_lat,
    write_lat_initiator,
    write_lat_responder,
)
from ibdiag.bench.p2p.rdma.loops import (
    Receiver,
    check_pattern,
    fill_pattern,
    reset_areas,
    serve_receives,
    write_bw,
)
from ibdiag.bench.p2p.rdma.plan import (
    READ_RD_ATOMIC,
    QpInfo,
    check_message_sizes,
    check_server_run,
    message_size_problem,
    plan_connection,
    rdma_path,
    read_ends,
    run_options,
)
from ibdiag.bench.results.p2p_meta import LineRate, RdmaPath
from ibdiag.bench.results.stats import (
    CpuMeter,
    bandwidth_gbs,
    latency_from_round_trips_ns,
    message_rate_mpps,
)
from ibdiag.errors import CannotRunError
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.units import format_bytes

#: Receives kept posted per QP for SEND (perftest's ib_send_bw rx-depth default is 512).
RX_DEPTH = 512


def _rd_atomic(value: Any, peer: str) -> int:
    try:
        return check_int(value, "max_rd_atomic", 1, 255)
    except RequestError as e:
        raise ProtocolError(f"{peer} sent an invalid {e.message}") from None


class RdmaSide:
    """Either half of an RDMA run: ``--qps`` RC QPs over a buffer of 2 x the largest size (receive, send)."""

    #: Which way this side's data goes, and which way the data it receives came (rdma_loops.pattern).
    out_dir = "c2s"
    in_dir = "s2c"

    def __init__(
        self, ch: Channel, req: RunRequest, sel: RdmaSelection, *, timeout_s: float
    ) -> None:
        self.ch = ch
        self.req = req
        self.sel = sel
        self.timeout_s = timeout_s
        self.half = req.max_size
        self.buffer = allocate(2 * self.half)
        try:
            self.ep = RdmaEndpoint(
                sel.device,
                sel.port,
                self.buffer,
                send_offset=self.half,
                tx_depth=req.tx_depth,
                gid=sel.gid,
                gid_index=sel.gid_index,
                qps=req.qps,
                rx_depth=RX_DEPTH if req.verb == "send" else 0,
                max_inline=req.inline_cap,
                inline_optional=req.inline is None,
            )
        except BaseException:
            self.buffer.close()
            raise
        self.ep.verb = req.verb
        self.psn = random.SystemRandom().randrange(1 << 24)
        self.local = self.ep.local_info(self.psn)
        self.rx: Any = None

    def details(self) -> dict[str, Any]:
        return {
            "device": self.sel.device,
            "ib_port": self.sel.port,
            "gid_index": self.sel.gid_index,
            "gid": self.sel.gid,
            "gid_choice": self.sel.gid_reason,
            "link_layer": self.sel.link_layer,
            "mtu": self.local.mtu_bytes,
            "relaxed_ordering": self.ep.relaxed_ordering,
            "max_inline": self.ep.max_inline,
            "max_rd_atomic": self.ep.max_rd_atomic,
        }

    def connect_to(self, remote_doc: Any, remote_rd_atomic: Any) -> int:
        """Bring every QP to RTS towards the peer's; returns the path MTU (bytes)."""
        try:
            remote = QpInfo.from_json(remote_doc)
        except ValueError as e:
            raise ProtocolError(f"{self.ch.peer} sent invalid queue pair details: {e}") from None
        read = self.req.verb == "read"
        rd = (
            min(READ_RD_ATOMIC, self.ep.max_rd_atomic, _rd_atomic(remote_rd_atomic, self.ch.peer))
            if read
            else 1
        )
        plans = [
            plan_connection(
                self.local,
                remote,
                port_num=self.sel.port,
                gid_index=self.sel.gid_index,
                needed_bytes=self.req.max_size,
                lane=k,
                traffic_class=self.req.tclass,
                sl=self.req.sl,
                rd_atomic=rd,
                remote_read=read,
            )
            for k in range(self.req.qps)
        ]
        self.ep.connect(plans, remote)
        if self.req.verb == "send":
            self.rx = Receiver(self.ep, self.req.qps, RX_DEPTH)
        return plans[0].path_mtu_bytes

    # --- per phase -----------------------------------------------------------------------------------

    @property
    def receives_data(self) -> bool:
        """Does data land in this side's receive half during a bandwidth phase?"""
        forward_to_me = (self.req.verb == "read") == (
            self.out_dir == "c2s"
        )  # READ pulls to the client
        return forward_to_me or self.req.bidir

    def _prepare_bw(self, size: int) -> None:
        fill_pattern(self.ep.view, self.half, size, self.out_dir)
        self.ep.view[0:size] = bytes(size)

    def _verified(self, size: int) -> bool:
        return check_pattern(self.ep.view, 0, size, self.in_dir)

    def _loop(self, size: int, warmup: int, meter: CpuMeter | None, heartbeat: Any = None) -> Any:
        return write_bw(
            self.ep,
            size,
            warmup=warmup,
            iters=self.req.iters,
            duration_s=self.req.measure_duration_s,
            tx_depth=self.req.tx_depth,
            timeout_s=self.timeout_s,
            on_measure_start=None if meter is None else meter.start,
            heartbeat=heartbeat,
            verb=self.req.verb,
            lanes=self.req.qps,
            inline=self.req.inline_for(size, "bw", self.ep.max_inline) > 0,
            idle=None if self.rx is None else self.rx.drain,
        )

    def _lat(self, size: int, first: int, n: int, *, initiator: bool) -> list[int]:
        inline = self.req.inline_for(size, "lat", self.ep.max_inline) > 0
        if self.req.verb == "send":
            return send_lat(
                self.ep,
                self.rx,
                size,
                first,
                n,
                initiator=initiator,
                timeout_s=self.timeout_s,
                inline=inline,
            )
        if self.req.verb == "read":
            return read_lat(self.ep, size, first, n, timeout_s=self.timeout_s) if initiator else []
        if initiator:
            return write_lat_initiator(
                self.ep, size, first, n, timeout_s=self.timeout_s, inline=inline
            )
        write_lat_responder(self.ep, size, first, n, timeout_s=self.timeout_s, inline=inline)
        return []

    def line_rate(self, sysfs: SysfsRoot) -> LineRate:
        return rdma_line_rate(sysfs, self.sel.device, self.sel.port)

    def _pending_message(self) -> bool:
        ready, _, _ = select.select([self.ch.sock], [], [], 0)
        return bool(ready)

    def close(self) -> None:
        self.ep.close()
        self.buffer.close()


class RdmaServerSide(RdmaSide):
    out_dir = "s2c"
    in_dir = "c2s"

    def prepare(self) -> dict[str, Any]:
        # The options as this server runs them: a client checks them (an older server would ignore them).
        return {"qp": self.local.to_json(), **self.details(), "rdma_run": run_options(self.req)}

    def connect(self) -> None:
        msg = self.ch.expect("qp", "the client's queue pair details")
        self.connect_to(msg.get("qp"), msg.get("max_rd_atomic", 1))

    def _await_sent(self, size: int) -> dict[str, Any]:
        """The client's ``sent`` (skipping its heartbeats)."""
        while True:
            m = self.ch.recv(
                f"the client's {format_bytes(size)} RDMA {self.req.verb.upper()}s to finish"
            )
            if m["type"] == "beat":
                continue
            if m["type"] == "sent":
                return m
            if m["type"] == "error":
                raise RemoteError(
                    "failed", f"the client gave up: {peer_text(m.get('message', '?'))}"
                )
            raise ProtocolError(f"unexpected {peer_value(m['type'])} during an RDMA bandwidth test")

    def phase(self, msg: dict[str, Any]) -> None:
        kind, size, warmup = read_phase(msg, self.req)
        if kind == "bw":
            self._prepare_bw(size)
            meter = CpuMeter()
            start_rx = self.rx.received if self.rx is not None else 0
            self.ch.send({"type": "go"})
            meter.start()
            result: dict[str, Any] = {"type": "result"}
            if self.req.bidir:
                stats = self._loop(size, warmup, None)
                result.update(
                    tx_messages=stats.messages, tx_bytes=stats.bytes, tx_seconds=stats.seconds
                )
            if self.rx is not None:
                total: list[int | None] = [None]

                def expected() -> int | None:
                    # Only what has arrived: the receives must keep being reposted while the client sends.
                    while total[0] is None and self._pending_message():
                        m = self.ch.recv(f"the client's {format_bytes(size)} SENDs to finish")
                        if m["type"] == "beat":
                            continue
                        if m["type"] == "error":
                            raise RemoteError(
                                "failed", f"the client gave up: {peer_text(m.get('message', '?'))}"
                            )
                        if m["type"] != "sent":
                            raise ProtocolError(
                                f"unexpected {peer_value(m['type'])} during an RDMA bandwidth test"
                            )
                        t = m.get("total")
                        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t <= 2**40:
                            raise ProtocolError(
                                f"the client's sent total {peer_value(t)} is not a count"
                            )
                        total[0] = t
                    return None if total[0] is None else start_rx + total[0]

                serve_receives(self.rx, expected, timeout_s=self.timeout_s)
                result["rx_messages"] = self.rx.received - start_rx
            else:
                self._await_sent(size)
            if self.receives_data:
                result["rx_verified"] = self._verified(size)
            result["cpu_s"] = meter.stop()
            self.ch.send(result)
            return
        reset_areas(self.ep.view, size, self.half)
        self.ch.send({"type": "go"})
        self._lat(size, 0, warmup, initiator=False)
        n = read_iters(self.ch.expect("iters", "the latency iteration count"))
        self._lat(size, warmup, n, initiator=False)
        self.ch.send({"type": "result"})


class RdmaClientSide(OwnLoops, RdmaSide):
    def connect(self, ready: dict[str, Any]) -> RdmaPath:
        """Both ends' devices (the server's from ``ready``), then every QP to RTS: the path."""
        client_end, server_end = read_ends(ready, self.details(), self.ch.peer)
        return rdma_path(self.req, client_end, server_end, self._connect_qps(ready))

    def _connect_qps(self, ready: dict[str, Any]) -> int:
        check_server_run(ready, self.req, self.ch.peer)
        mtu = self.connect_to(ready.get("qp"), ready.get("max_rd_atomic", 1))
        self.ch.send(
            {"type": "qp", "qp": self.local.to_json(), "max_rd_atomic": self.ep.max_rd_atomic}
        )
        return mtu

    def _result_while_receiving(self, size: int) -> dict[str, Any]:
        """The server's result; a bidirectional SEND keeps taking the server's messages meanwhile."""
        if self.rx is None or not self.req.bidir:
            return self.ch.expect("result", f"the server's {format_bytes(size)} bandwidth result")
        deadline = time.monotonic() + self.timeout_s
        while not self._pending_message():
            self.rx.drain()
            if time.monotonic() > deadline:
                break
        return self.ch.expect("result", f"the server's {format_bytes(size)} bandwidth result")

    def bw(self, size: int, warmup: int) -> BwOutcome:
        peer = self.ch.peer
        what = f"{format_bytes(size)} bandwidth result"
        self._prepare_bw(size)
        start_rx = self.rx.received if self.rx is not None else 0
        t_asked = time.monotonic()
        self.ch.send({"type": "phase", "kind": "bw", "bytes": size, "warmup": warmup})
        self.ch.expect("go", f"the server to start the {format_bytes(size)} bandwidth test")
        meter = CpuMeter()
        stats = self._loop(size, warmup, meter, heartbeat=lambda: self.ch.send({"type": "beat"}))
        cpu_client = meter.stop()
        self.ch.send({"type": "sent", "messages": stats.messages, "total": warmup + stats.messages})
        res = self._result_while_receiving(size)
        span = time.monotonic() - t_asked
        cpu_server = check_cpu_s(res, peer, what, span)
        if self.req.verb == "send":
            got = count_field(res, "rx_messages", peer, what)
            if got != warmup + stats.messages:
                raise impossible(
                    peer,
                    f"{what}: rx_messages {got}, but this client sent {warmup + stats.messages} messages",
                )
        if "rx_verified" in res and res.get("rx_verified") is not True:
            raise CannotRunError(
                f"the data {peer} received differs from what this client sent ({format_bytes(size)} {self.req.verb.upper()}s)",
                hint="a broken adapter, driver or path corrupts data: check dmesg and ibdiag counters on both ends",
            )
        messages, nbytes, seconds = stats.messages, stats.bytes, stats.seconds
        bw, rate = bandwidth_gbs(nbytes, seconds), message_rate_mpps(messages, seconds)
        if self.req.bidir:
            back = count_field(res, "tx_messages", peer, what)
            back_bytes = count_field(res, "tx_bytes", peer, what)
            back_s = seconds_field(res, "tx_seconds", peer, what, span_s=span)
            if back_bytes != back * size or (back and back_s <= 0):
                raise impossible(
                    peer,
                    f"{what}: tx_bytes {back_bytes} is not tx_messages {back} x {size} bytes in a positive time",
                )
            if self.req.verb == "send" and isinstance(self.rx, Receiver):
                serve_receives(self.rx, lambda: start_rx + back + warmup, timeout_s=self.timeout_s)
            back_bw, back_rate = bandwidth_gbs(back_bytes, back_s), message_rate_mpps(back, back_s)
            bw = None if bw is None or back_bw is None else bw + back_bw
            rate = None if rate is None or back_rate is None else rate + back_rate
            messages, nbytes, seconds = messages + back, nbytes + back_bytes, max(seconds, back_s)
        if self.receives_data and not self._verified(size):
            raise CannotRunError(
                f"the data this client received from {peer} differs from what the server sent ({format_bytes(size)} {self.req.verb.upper()}s)",
                hint="a broken adapter, driver or path corrupts data: check dmesg and ibdiag counters on both ends",
            )
        return BwOutcome(messages, nbytes, seconds, bw, rate, cpu_client, cpu_server)

    def lat(self, size: int, warmup: int) -> LatOutcome:
        self.ch.send({"type": "phase", "kind": "lat", "bytes": size, "warmup": warmup})
        self.ch.expect("go", f"the server to start the {format_bytes(size)} latency test")
        reset_areas(self.ep.view, size, self.half)
        warm = self._lat(size, 0, warmup, initiator=True)
        n = self.req.iters or latency_iterations(self.req.measure_duration_s or 1.0, warm)
        self.ch.send({"type": "iters", "n": n})
        samples = self._lat(size, warmup, n, initiator=True)
        self.ch.expect("result", f"the server to finish the {format_bytes(size)} latency test")
        return LatOutcome(n, latency_from_round_trips_ns(samples))


def _client(req: RunRequest, local: Local) -> ClientFactory:
    # pyverbs, the device, the port and the sizes: checked before any connection (exit 3)
    sel = select_rdma(local.sysfs, local.device, local.ib_port, local.gid_index)
    check_message_sizes(req.sizes, sel.max_msg_bytes, sel.device, sel.port)
    return lambda ch: RdmaClientSide(ch, req, sel, timeout_s=local.timeout_s)


def _server(ch: Channel, req: RunRequest, local: Local, log: Log) -> RdmaServerSide:
    sel = select_rdma(local.sysfs, local.device, local.ib_port, local.gid_index)
    problem = message_size_problem(req.sizes, sel.max_msg_bytes, sel.device, sel.port)
    if problem:
        ch.send_error(
            "refused", f"this server's {problem}", "use smaller sizes with --transport rdma"
        )
        raise Refused("refused", problem)
    return RdmaServerSide(ch, req, sel, timeout_s=local.timeout_s)


#: ``--transport rdma`` on ibdiag's own engine (pyverbs).
RDMA = Engine(_client, _server)
