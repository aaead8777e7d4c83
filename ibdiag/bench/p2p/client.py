"""``ibdiag bench p2p HOST``: connect to a server, run the requested sizes, return the results.

The client decides everything (sizes, mode, how long); the server only validates and follows.
For RDMA the local device, port and GID are checked before any connection is made, so a missing
pyverbs, a missing device or a port that is down fail at once (exit 3).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ibdiag import __version__
from ibdiag.bench.p2p.control.protocol import (
    DEFAULT_PORT,
    DEFAULT_TIMEOUT_S,
    Channel,
    Hello,
    ProtocolError,
    client_handshake,
    connect,
)
from ibdiag.bench.p2p.linerate import rdma_line_rate, tcp_line_rate
from ibdiag.bench.p2p.meta import LineRate, P2PMeta, P2PSetup, PerftestEngine, RdmaEnd, RdmaPath
from ibdiag.bench.p2p.params import (
    RunRequest,
    check_host,
    check_port,
    check_rdma_port,
    check_socket_buffer,
    check_timeout,
)
from ibdiag.bench.results.jsonfields import Fields
from ibdiag.bench.results.model import BenchRun, P2PResult
from ibdiag.bench.results.stats import cpu_s_per_gb
from ibdiag.errors import IbdiagError
from ibdiag.units import format_bytes

#: ``progress(done, total, label)``: called before each size/kind and once at the end.
Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class ClientOptions:
    host: str
    port: int = DEFAULT_PORT
    token: bytes | None = field(default=None, repr=False)
    timeout_s: float = DEFAULT_TIMEOUT_S
    socket_buffer: int | None = None
    device: str | None = None
    ib_port: int = 1
    gid_index: int | None = None
    sysfs_root: str = "/"
    perftest_path: str | None = None
    """PATH searched for perftest's binaries (``--engine perftest``); None: this process's PATH."""

    def __post_init__(self) -> None:
        """Where the run goes, checked before any connection (:class:`~.params.RequestError`, exit 2)."""
        check_host(self.host)
        check_port(self.port)
        check_timeout(self.timeout_s)
        check_socket_buffer(self.socket_buffer)
        check_rdma_port(self.ib_port, self.gid_index)


@dataclass(frozen=True)
class P2PRun:
    """What one ``bench p2p`` run measured, with what is needed to judge and describe it."""

    request: RunRequest
    peer: str
    """``host:port`` as given."""
    server: Hello
    results: tuple[P2PResult, ...]
    local_rate: LineRate
    remote_rate: LineRate
    socket_buffer: int | None = None
    """TCP: the fixed socket buffer asked for (bytes), None for autotuning."""
    rdma: RdmaPath | None = None
    """RDMA: both ends' device, port and GID, the path MTU and the queue depth."""
    perftest: PerftestEngine | None = None
    """``--engine perftest``: its versions and the command lines both ends ran."""

    def to_bench_run(self, line_rate: LineRate) -> BenchRun:
        """The ``ibdiag.bench/1`` model (what ``--save`` writes), judged against ``line_rate``."""
        req = self.request
        setup = P2PSetup(
            peer=self.peer,
            server_host=self.server.host,
            server_version=self.server.ibdiag_version,
            streams=req.streams,
            iters=req.iters,
            duration_s=req.duration_s if req.engine == "perftest" else req.measure_duration_s,
            warmup=req.warmup,
            line_rate=line_rate,
            client_line_rate=self.local_rate,
            server_line_rate=self.remote_rate,
            socket_buffer=self.socket_buffer,
            rdma=self.rdma,
            engine=req.engine if req.transport == "rdma" else None,
            perftest=self.perftest,
        )
        return BenchRun(
            P2PMeta(transport=req.transport, mode=req.mode, bidir=req.bidir, measured=setup),
            self.results,
        )


def _merge(size: int, bw: Any, lat: Any) -> P2PResult:
    cpu: dict[str, float | None] = {}
    if bw is not None:
        cpu = {
            "client": cpu_s_per_gb(bw.cpu_client_s, bw.bytes),
            "server": cpu_s_per_gb(bw.cpu_server_s, bw.bytes),
        }
    return P2PResult(
        bytes=size,
        iters=bw.messages if bw is not None else lat.iters,
        bw_gbs=None if bw is None else bw.bw_gbs,
        bw_peak_gbs=None,
        msg_rate_mpps=None if bw is None else bw.msg_rate_mpps,
        lat_us=None if lat is None else lat.stats,
        cpu_s_per_gb=cpu,
        elapsed_s=None if bw is None else bw.seconds,
        lat_iters=None if lat is None else lat.iters,
    )


def run_p2p(req: RunRequest, opts: ClientOptions, progress: Progress | None = None) -> P2PRun:
    """Run ``req`` against the server at ``opts.host:opts.port``; raises ibdiag errors (exit 2/3)."""
    from ibdiag.bench.p2p import session
    from ibdiag.node.sysfs import SysfsRoot

    sel = None
    if req.engine == "perftest":
        from ibdiag.bench.p2p.perftest import engine as perftest_engine

        perftest_engine.check_request(req)
        for kind in req.kinds:  # a missing binary fails before any connection
            perftest_engine.find_program(perftest_engine.binary(req.verb, kind), opts.perftest_path)
        sel = perftest_engine.select_device(
            opts.sysfs_root, opts.device, opts.ib_port, opts.gid_index
        )
    elif req.transport == "rdma":
        from ibdiag.bench.p2p.rdma import session as rdma_session
        from ibdiag.bench.p2p.rdma.plan import check_message_sizes

        sel = rdma_session.select_rdma(opts.sysfs_root, opts.device, opts.ib_port, opts.gid_index)
        check_message_sizes(req.sizes, sel.max_msg_bytes, sel.device, sel.port)
    peer = f"[{opts.host}]:{opts.port}" if ":" in opts.host else f"{opts.host}:{opts.port}"
    sock = connect(opts.host, opts.port, opts.timeout_s)
    ch = Channel(sock, peer, opts.timeout_s)
    side: Any = None
    try:
        server = client_handshake(
            ch, token=opts.token, host=socket.gethostname(), version=__version__
        )
        ch.send({"type": "run", "request": req.to_json()})
        ready = ch.expect("ready", "the server to accept the request")
        remote_rate = LineRate.from_json(ready.get("line_rate"))
        rdma: RdmaPath | None = None
        if req.engine == "perftest":
            assert sel is not None
            server_address = sock.getpeername()[0]
            side = perftest_engine.PerftestClientSide(
                ch,
                req,
                sel,
                timeout_s=opts.timeout_s,
                path=opts.perftest_path,
                server_address=server_address,
            )
            side.check_ready(ready)
            try:
                server_end = RdmaEnd.read(Fields(ready, "ready"))
            except ValueError as e:
                raise ProtocolError(f"{peer} sent invalid device details: {e}") from None
            client_end = RdmaEnd.read(Fields(side.details(), "client"))
            rdma = RdmaPath(
                client_end,
                server_end,
                None,
                req.tx_depth,
                verb=req.verb,
                qps=req.qps,
                inline=req.inline,
                tclass=req.tclass,
                sl=req.sl,
            )
            local_rate = rdma_line_rate(SysfsRoot(opts.sysfs_root), sel.device, sel.port)
            ch.expect("connected", "the server to set up the data path")
            results: list[P2PResult] = perftest_engine.run_all(side, req.sizes, req.kinds, progress)
            ch.send({"type": "bye"})
            return P2PRun(
                req, peer, server, tuple(results), local_rate, remote_rate, None, rdma, side.info()
            )
        if req.transport == "tcp":
            side = session.TcpClientSide(
                ch, req, timeout_s=opts.timeout_s, socket_buffer=opts.socket_buffer
            )
            side.connect(ready)
            local_rate = tcp_line_rate(SysfsRoot(opts.sysfs_root), sock.getsockname()[0])
        else:
            assert sel is not None
            side = rdma_session.RdmaClientSide(ch, req, sel, timeout_s=opts.timeout_s)
            try:
                server_end = RdmaEnd.read(Fields(ready, "ready"))
            except ValueError as e:
                raise ProtocolError(f"{peer} sent invalid device details: {e}") from None
            client_end = RdmaEnd.read(Fields(side.details(), "client"))
            rdma = RdmaPath(
                client_end,
                server_end,
                side.connect(ready),
                req.tx_depth,
                verb=req.verb,
                qps=req.qps,
                inline=req.inline,
                tclass=req.tclass,
                sl=req.sl,
            )
            local_rate = rdma_line_rate(SysfsRoot(opts.sysfs_root), sel.device, sel.port)
        ch.expect("connected", "the server to set up the data path")
        steps = [(size, kind) for size in req.sizes for kind in req.kinds]
        results = []
        done = 0
        for size in req.sizes:
            bw = lat = None
            for kind in req.kinds:
                if progress is not None:
                    progress(done, len(steps), f"{kind} {format_bytes(size)}")
                warmup = req.warmup_for(size, kind)
                if kind == "bw":
                    bw = side.bw(size, warmup)
                else:
                    lat = side.lat(size, warmup)
                done += 1
            results.append(_merge(size, bw, lat))
        if progress is not None:
            progress(done, len(steps), "done")
        ch.send({"type": "bye"})
        return P2PRun(
            req,
            peer,
            server,
            tuple(results),
            local_rate,
            remote_rate,
            opts.socket_buffer if req.transport == "tcp" else None,
            rdma,
        )
    except IbdiagError as e:
        ch.send_error("failed", e.message)
        raise
    except KeyboardInterrupt:
        ch.send_error("failed", "the client was interrupted")
        raise
    finally:
        if side is not None:
            side.close()
        ch.close()
