"""``ibdiag bench p2p HOST``: connect to a server, run the requested sizes, return the results.

The client decides everything (sizes, mode, how long); the server only validates and follows.
For RDMA the local device, port and GID are checked before any connection is made, so a missing
pyverbs, a missing device or a port that is down fail at once (exit 3).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ibdiag.bench.p2p.control.protocol import (
    DEFAULT_PORT,
    DEFAULT_TIMEOUT_S,
    Channel,
    Hello,
    connect,
)
from ibdiag.bench.p2p.fields import (
    check_host,
    check_port,
    check_rdma_port,
    check_socket_buffer,
    check_timeout,
)
from ibdiag.bench.p2p.params import RunRequest
from ibdiag.bench.p2p.phase import Local, Progress
from ibdiag.bench.p2p.session import engine_for, run_client
from ibdiag.bench.results.model import BenchRun, P2PResult
from ibdiag.bench.results.p2p_meta import (
    LineRate,
    P2PMeta,
    P2PSetup,
    PerftestEngine,
    RdmaPath,
)
from ibdiag.node.sysfs import SysfsRoot


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
    sysfs: SysfsRoot = field(default_factory=SysfsRoot)
    """The tree this end reads (device, port, GID, line rate): one for the whole run, built by the command."""
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


def run_p2p(req: RunRequest, opts: ClientOptions, progress: Progress | None = None) -> P2PRun:
    """Run ``req`` against the server at ``opts.host:opts.port``; raises ibdiag errors (exit 2/3)."""
    local = Local(
        opts.sysfs,
        opts.device,
        opts.ib_port,
        opts.gid_index,
        opts.timeout_s,
        opts.socket_buffer,
        opts.perftest_path,
    )
    make_side = engine_for(req).client(req, local)  # checks what must pass before connecting
    peer = f"[{opts.host}]:{opts.port}" if ":" in opts.host else f"{opts.host}:{opts.port}"
    sock = connect(opts.host, opts.port, opts.timeout_s)
    ch = Channel(sock, peer, opts.timeout_s)
    run = run_client(ch, req, make_side, token=opts.token, sysfs=opts.sysfs, progress=progress)
    return P2PRun(
        req,
        peer,
        run.server,
        run.results,
        run.local_rate,
        run.remote_rate,
        opts.socket_buffer if req.transport == "tcp" else None,
        run.rdma,
        run.perftest,
    )
