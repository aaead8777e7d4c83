"""The real data path of a sweep: ibdiag's own p2p server and client, one server per rail.

Each rank serves every one of its rails with an ``ibdiag bench serve`` :class:`~ibdiag.bench.p2p.serve.Server`
(in a thread, on a free port, authenticated with the sweep's token) and measures its pairs with
:func:`~ibdiag.bench.p2p.client.run_p2p`: rail k of the measuring node against rail k of the serving
node over RDMA when both rails have an adapter, over TCP to the serving node's address otherwise (the
TCP fallback: a node without an RDMA adapter has one rail, ``tcp``).

:class:`P2PPairRunner` is the :class:`~ibdiag.sweep.runner.PairRunner` over this path; it never raises
for a failed test (the error goes into the result) so one bad pair cannot stop a sweep.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ibdiag.bench.p2p import client  # client.run_p2p: the seam tests replace
from ibdiag.bench.p2p.linerate import tcp_line_rate
from ibdiag.bench.p2p.params import RunRequest
from ibdiag.bench.p2p.perftest.engine import resolve_engine
from ibdiag.bench.p2p.rdma.verbs import list_devices
from ibdiag.bench.p2p.serve import ServeOptions, Server
from ibdiag.errors import CannotRunError, IbdiagError, UsageError
from ibdiag.node.discover import discover, list_adapters, read_port
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.sweep.nodes import FleetNode, Rail
from ibdiag.sweep.runner import PairResult, PairSpec
from ibdiag.sweep.schedule import PairTest

#: Warm-up per pair test: enough messages to move this many bytes (at least 2). Less than ``bench
#: p2p``'s 32 MiB: a sweep runs thousands of tests, and on a slow link a long warm-up is most of the test.
SWEEP_WARMUP_BYTES = 4 * 2**20


def warmup_messages(size: int) -> int:
    return max(2, min(1000, -(-SWEEP_WARMUP_BYTES // size)))


def local_rails(
    transport: str,
    address: str,
    adapters: Sequence[str] | None,
    sysfs: SysfsRoot,
    *,
    rdma_devices: Callable[[], list[str]] | None = None,
) -> tuple[tuple[Rail, ...], str | None]:
    """This node's rails, and why it fell back to TCP (None when it did not; only ``--transport auto``
    falls back: ``rdma`` raises CannotRunError with the reason, a transport asked for and not had).

    The adapters given (``--rails``), else the ports topo pairs with the GPUs in NIC order (every
    active port when there is no GPU), kept only when libibverbs can open them (``rdma_devices``:
    the device list, :func:`ibdiag.bench.p2p.rdma.verbs.list_devices` by default — the boundary to the RDMA
    stack). One TCP rail for ``--transport tcp``, and for ``auto`` without adapters or a usable RDMA stack.
    """
    tcp = (Rail(0, None, None, tcp_line_rate(sysfs, address).gbps),)
    if transport == "tcp":
        return tcp, None
    rails, why = _usable_rails(sysfs, adapters, rdma_devices)
    if why is None:
        return rails, None
    if transport == "rdma":
        raise CannotRunError(
            f"--transport rdma: {why} on this node",
            hint="--transport auto measures over TCP where a node has no RDMA (and says so); "
            "--transport tcp measures the nodes' addresses",
        )
    return tcp, f"{why}: testing over TCP"


def _usable_rails(
    sysfs: SysfsRoot,
    adapters: Sequence[str] | None,
    rdma_devices: Callable[[], list[str]] | None,
) -> tuple[tuple[Rail, ...], str | None]:
    """The RDMA rails libibverbs can open, or why there are none."""
    rails = _rdma_rails(sysfs, adapters)
    if not rails:
        return (), "no RDMA adapter"
    if rdma_devices is None:
        rdma_devices = list_devices
    try:
        usable = set(rdma_devices())
    except IbdiagError as e:
        if adapters:
            raise
        return (), f"RDMA is not usable ({e.message})"
    missing = [r.adapter for r in rails if r.adapter not in usable]
    if missing and adapters:
        raise CannotRunError(
            f"--rails: libibverbs cannot open {', '.join(str(m) for m in missing)}",
            hint="check ibv_devices on this node, or leave --rails out",
        )
    kept = [r for r in rails if r.adapter in usable]
    if not kept:
        return (), "libibverbs opens none of the adapters topo found"
    return tuple(Rail(k, r.adapter, r.port, r.rate_gbps) for k, r in enumerate(kept)), None


def _rdma_rails(sysfs: SysfsRoot, adapters: Sequence[str] | None) -> tuple[Rail, ...]:
    if adapters:
        present = set(list_adapters(sysfs))
        absent = [a for a in adapters if a not in present]
        if absent:
            raise UsageError(
                f"--rails: no adapter {', '.join(absent)} on this node",
                hint="see ibdiag topo for the adapters, or leave --rails out",
            )
        out = []
        for k, name in enumerate(adapters):
            p = read_port(sysfs, name, 1, with_gids=False)
            out.append(Rail(k, name, 1, p.rate_gbps))
        return tuple(out)
    topo = discover(sysfs)
    ports = list(topo.nccl_ports) or [
        p for a in topo.adapters for p in a.ports if p.state == "ACTIVE"
    ]
    return tuple(Rail(k, p.adapter, p.port, p.rate_gbps) for k, p in enumerate(ports))


@dataclass
class RailServers:
    """One p2p server per rail of this node, each serving in its own thread until :meth:`close`."""

    address: str
    rails: tuple[Rail, ...]
    token: bytes = field(repr=False)
    max_bytes: int
    timeout_s: float
    log: Callable[[str], None]
    sysfs: SysfsRoot = field(default_factory=SysfsRoot)
    """The tree every rail's server reads (the sweep's one, from the command)."""
    perftest_path: str | None = None
    """PATH for perftest's binaries when a client asks for ``--engine perftest``."""
    ports: list[int] = field(default_factory=list)
    _servers: list[Server] = field(default_factory=list)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> list[int]:
        for rail in self.rails:
            transports = ("tcp",) if rail.adapter is None else ("rdma", "tcp")
            opts = ServeOptions(
                bind=self.address,
                port=0,
                transports=transports,
                device=rail.adapter,
                ib_port=rail.port or 1,
                token=self.token,
                max_size=self.max_bytes,
                timeout_s=self.timeout_s,
                sysfs=self.sysfs,
                perftest_path=self.perftest_path,
            )
            server = Server(opts, lambda line, k=rail.index: self.log(f"rail {k} server: {line}"))  # type: ignore[misc]  # mypy#15459: no inference for a lambda with default args
            _, port = server.start()
            self._servers.append(server)
            self.ports.append(port)
            t = threading.Thread(
                target=self._serve,
                args=(server,),
                name=f"ibdiag-sweep-rail{rail.index}",
                daemon=True,
            )
            self._threads.append(t)
            t.start()
        return self.ports

    def _serve(self, server: Server) -> None:
        try:
            server.serve()
        except IbdiagError as e:
            self.log(f"server stopped: {e.message}")

    def close(self) -> None:
        for server in self._servers:
            server.stop()
        for t in self._threads:
            t.join(timeout=5.0)
        for server in self._servers:
            server.close()


class P2PPairRunner:
    """:class:`~ibdiag.sweep.runner.PairRunner` over ibdiag's p2p: the measuring end (``b``) connects to
    the serving end's (``a``) server of the test's rail, at ``ports[a][rail]``."""

    def __init__(
        self,
        ports: Mapping[int, Sequence[int]],
        token: bytes,
        *,
        sysfs: SysfsRoot | None = None,
        perftest_path: str | None = None,
    ) -> None:
        self.ports = ports
        self.token = token
        self.sysfs = sysfs if sysfs is not None else SysfsRoot()  # None: this node's /sys
        self.perftest_path = perftest_path

    def run_pair(self, test: PairTest, a: FleetNode, b: FleetNode, spec: PairSpec) -> PairResult:
        rail_a, rail_b = a.rail(test.rail), b.rail(test.rail)
        ports = self.ports.get(a.rank, ())
        if rail_a is None or rail_b is None or test.rail >= len(ports):
            return _failed(test, a, b, f"no rail {test.rail} on both nodes")
        transport = (
            "rdma"
            if rail_a.adapter is not None and rail_b.adapter is not None and spec.transport != "tcp"
            else "tcp"
        )
        engine: str | None = None
        try:
            req = RunRequest(
                transport=transport,
                mode=spec.mode,
                sizes=(spec.bytes,),
                duration_s=spec.duration_s,
                warmup=warmup_messages(spec.bytes),
            )
            if transport == "rdma" and spec.engine != "ibdiag":
                req = self._perftest_or(req, spec.engine)
            engine = req.engine  # what measures: the server runs the client's engine or refuses
            opts = client.ClientOptions(
                host=a.address,
                port=ports[test.rail],
                token=self.token,
                timeout_s=spec.timeout_s,
                device=rail_b.adapter if transport == "rdma" else None,
                ib_port=rail_b.port or 1,
                sysfs=self.sysfs,
                perftest_path=self.perftest_path,
            )
            run = client.run_p2p(req, opts)
        except IbdiagError as e:
            return _failed(test, a, b, e.message[:500], engine)
        except (
            OSError
        ) as e:  # a socket error the client did not wrap: still this pair's failure only
            return _failed(test, a, b, f"{type(e).__name__}: {e}"[:500], engine)
        res = run.results[0]
        # perftest's latency in duration mode (the sweep's --duration) prints only the average
        lat = res.lat_us.p50_us if res.lat_us is not None else res.lat_avg_us
        if res.bw_gbs is None and lat is None:
            return _failed(test, a, b, "the test returned no measurement", engine)
        return PairResult(
            test.round, test.phase, test.rail, a.rank, b.rank, res.bw_gbs, lat_us=lat, engine=engine
        )

    def _perftest_or(self, req: RunRequest, engine: str) -> RunRequest:
        """The request on perftest (``--engine perftest``, or ``auto`` where perftest is this node's
        choice); perftest warms up on its own, so the sweep's warm-up is dropped."""
        on_perftest = replace(
            req, warmup=None, engine="perftest"
        )  # checked for perftest on creation
        if engine == "perftest":
            return on_perftest
        return on_perftest if resolve_engine(on_perftest, self.perftest_path) == "perftest" else req


def _failed(
    test: PairTest, a: FleetNode, b: FleetNode, error: str, engine: str | None = None
) -> PairResult:
    """The pair's test that measured nothing, and why."""
    return PairResult(
        test.round, test.phase, test.rail, a.rank, b.rank, None, error=error, engine=engine
    )
