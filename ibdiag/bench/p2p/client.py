"""``ibdiag bench p2p HOST``: connect to a server, run the requested sizes, return the results.

The client decides everything (sizes, mode, how long); the server only validates and follows.
For RDMA the local device, port and GID are checked before any connection is made, so a missing
pyverbs, a missing device or a port that is down fail at once (exit 3).
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field

from ibdiag.bench.p2p.control.protocol import (
    DEFAULT_PORT,
    DEFAULT_TIMEOUT_S,
    Channel,
    Hello,
    connect,
)
from ibdiag.bench.p2p.engines import choose
from ibdiag.bench.p2p.fields import (
    check_host,
    check_port,
    check_rdma_port,
    check_socket_buffer,
    check_timeout,
)
from ibdiag.bench.p2p.params import RunRequest
from ibdiag.bench.p2p.perftest.command import binary
from ibdiag.bench.p2p.perftest.engine import pyverbs_available
from ibdiag.bench.p2p.phase import ClientFactory, Local, Progress
from ibdiag.bench.p2p.session import engine_for, run_client
from ibdiag.bench.p2p.tcptools.engine import plain_address
from ibdiag.bench.results.model import BenchRun, P2PResult
from ibdiag.bench.results.p2p_meta import (
    BusyPoll,
    LineRate,
    P2PMeta,
    P2PSetup,
    RdmaPath,
    ToolRuns,
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
    tools: tuple[ToolRuns, ...] = ()
    """The C tools that measured: their versions and the command lines both ends ran."""
    busy_poll: BusyPoll | None = None
    """TCP latency by ibdiag's loops: the busy-polling budget and SO_BUSY_POLL on both ends."""

    def to_bench_run(self, line_rate: LineRate) -> BenchRun:
        """The ``ibdiag.bench/1`` model (what ``--save`` writes), judged against ``line_rate``."""
        req = self.request
        setup = P2PSetup(
            peer=self.peer,
            server_host=self.server.host,
            server_version=self.server.ibdiag_version,
            streams=req.streams,
            iters=req.iters,
            # perftest alone runs its own default iterations when neither --iters nor --duration is given
            duration_s=req.duration_s
            if set(req.engines.values()) == {"perftest"}
            else req.measure_duration_s,
            warmup=req.warmup,
            line_rate=line_rate,
            client_line_rate=self.local_rate,
            server_line_rate=self.remote_rate,
            socket_buffer=self.socket_buffer,
            rdma=self.rdma,
            engine="+".join(dict.fromkeys(req.engines.values())),
            engines=req.engines,
            tools=self.tools,
            busy_poll=self.busy_poll,
        )
        return BenchRun(
            P2PMeta(transport=req.transport, mode=req.mode, bidir=req.bidir, measured=setup),
            self.results,
        )


def run_p2p(
    req: RunRequest, opts: ClientOptions, progress: Progress | None = None, *, auto: bool = False
) -> P2PRun:
    """Run ``req`` against the server at ``opts.host:opts.port``; raises ibdiag errors (exit 2/3).

    ``auto`` (``--engine auto``): each kind's engine is chosen once the server has said which it can
    run (:func:`ibdiag.bench.p2p.engines.choose`); the run's ``request`` then names them. Otherwise
    ``req``'s engines' checks run before any connection (a missing program: exit 3).
    """
    local = Local(
        opts.sysfs,
        opts.device,
        opts.ib_port,
        opts.gid_index,
        opts.timeout_s,
        opts.socket_buffer,
        opts.perftest_path,
    )
    here = _available(req, opts.perftest_path)

    def chosen(there: tuple[str, ...] | None, ipv4: bool = True) -> RunRequest:
        bw, lat = choose(req, here=here, there=there, ipv4=ipv4)
        return dataclasses.replace(req, engine=bw, lat_engine=lat)

    # What this host must have (a program, pyverbs, the device and its port) is checked before any
    # connection; with auto, for the choice a server that has every engine would allow.
    first = chosen(None) if auto else req
    fixed = engine_for(first).client(first, local)

    def side_for(server: Hello, ch: Channel) -> tuple[RunRequest, ClientFactory]:
        if not auto:
            return req, fixed
        final = chosen(server.engines, ":" not in plain_address(str(ch.sock.getpeername()[0])))
        return final, engine_for(final).client(final, local)

    peer = f"[{opts.host}]:{opts.port}" if ":" in opts.host else f"{opts.host}:{opts.port}"
    sock = connect(opts.host, opts.port, opts.timeout_s)
    ch = Channel(sock, peer, opts.timeout_s)
    run = run_client(ch, side_for, token=opts.token, sysfs=opts.sysfs, progress=progress)
    return P2PRun(
        run.request,
        peer,
        run.server,
        run.results,
        run.local_rate,
        run.remote_rate,
        opts.socket_buffer if req.transport == "tcp" else None,
        run.rdma,
        run.tools,
        run.busy_poll,
    )


def _available(req: RunRequest, path: str | None) -> Callable[[str, str], bool]:
    """``here(engine, kind)`` for :func:`~ibdiag.bench.p2p.engines.choose`: this host's programs and pyverbs."""
    pyverbs: list[bool] = []

    def here(engine: str, kind: str) -> bool:
        if engine == "ibdiag":
            if req.transport == "tcp":
                return True
            if not pyverbs:
                pyverbs.append(pyverbs_available())
            return pyverbs[0]
        program = binary(req.verb, kind) if engine == "perftest" else engine
        return shutil.which(program, path=path) is not None

    return here
