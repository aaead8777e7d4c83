"""One benchmark run over an authenticated control channel: the engine table and both ends' run.

After the handshake (:mod:`.control.protocol`) the client sends ``run`` (a :class:`~.params.RunRequest`);
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
                sent; server -> client result {cpu_s, ...} (details in :mod:`.rdma.session`)
      lat:      warm-up ping-pongs; client -> server iters {n}; n ping-pongs; server -> client result
    client -> server  bye

Every wait has the channel's deadline; the data path uses kernel socket timeouts or, for RDMA,
completion/poll deadlines. Every figure the server reports is checked against what the client
itself sent and timed (:func:`~.phase.check_bw_result`) before it is used: a figure a server cannot
have measured is refused (exit 3) rather than printed.

Which side runs is chosen in one place, :data:`ENGINES`: (engine, transport) -> the
:class:`~.phase.Engine` whose factories make the client's and the server's half
(:class:`~.phase.ClientSide`, :class:`~.phase.ServerSide`; TCP in :mod:`.tcp.sides`, RDMA in
:mod:`.rdma.session`, perftest in :mod:`.perftest.engine`). Both ends then run the same way
whatever the engine: :func:`run_client` and :func:`serve_run`.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass

from ibdiag import __version__
from ibdiag.bench.p2p.control.protocol import (
    Channel,
    Hello,
    Refused,
    RemoteError,
    client_handshake,
    peer_text,
    peer_value,
)
from ibdiag.bench.p2p.engines import kinds_of
from ibdiag.bench.p2p.mixed import mixed
from ibdiag.bench.p2p.params import RunRequest
from ibdiag.bench.p2p.perftest.engine import PERFTEST
from ibdiag.bench.p2p.phase import (
    ClientFactory,
    ClientSide,
    Engine,
    Progress,
    ServerSide,
    measure_sizes,
)
from ibdiag.bench.p2p.rdma.session import RDMA
from ibdiag.bench.p2p.tcp.sides import TCP
from ibdiag.bench.p2p.tcptools.engine import IPERF3, SOCKPERF
from ibdiag.bench.results.model import P2PResult
from ibdiag.bench.results.p2p_meta import BusyPoll, LineRate, RdmaPath, ToolRuns
from ibdiag.errors import IbdiagError
from ibdiag.node.sysfs import SysfsRoot

#: (engine, transport) -> how each end makes its half of the run. A request's pairs are always here
#: (:class:`~.params.RunRequest` refuses an engine that does not measure a kind it asks for).
ENGINES: dict[tuple[str, str], Engine] = {
    ("ibdiag", "tcp"): TCP,
    ("ibdiag", "rdma"): RDMA,
    ("perftest", "rdma"): PERFTEST,
    ("iperf3", "tcp"): IPERF3,
    ("sockperf", "tcp"): SOCKPERF,
}


def engine_for(req: RunRequest) -> Engine:
    """The engine of ``req``; two (:func:`~.mixed.mixed`) when its bandwidth and latency differ."""
    names = list(dict.fromkeys(req.engines.values()))
    if len(names) == 1:
        return ENGINES[(names[0], req.transport)]
    names.sort(key=lambda n: n == "ibdiag")  # ibdiag's own side last: its ready fields win
    return mixed([(kinds_of(req, n), ENGINES[(n, req.transport)]) for n in names])


@dataclass(frozen=True)
class ClientRun:
    """What the client's half of a run brought back."""

    request: RunRequest
    """What ran: the request as sent, each kind's engine chosen."""
    server: Hello
    results: tuple[P2PResult, ...]
    local_rate: LineRate
    remote_rate: LineRate
    rdma: RdmaPath | None
    tools: tuple[ToolRuns, ...]
    busy_poll: BusyPoll | None


#: After the handshake: the request to send and its client side's factory (``--engine auto`` chooses
#: here, from what the server said it can run).
SideFor = Callable[[Hello, Channel], tuple[RunRequest, ClientFactory]]


def run_client(
    ch: Channel,
    side_for: SideFor,
    *,
    token: bytes | None,
    sysfs: SysfsRoot,
    progress: Progress | None = None,
) -> ClientRun:
    """Handshake, ``run``, the data path, every size and kind, ``bye``; closes the side and ``ch``.

    A failure (an ibdiag error, Ctrl-C) is told to the server before it propagates.
    """
    side: ClientSide | None = None
    try:
        server = client_handshake(ch, token=token, host=socket.gethostname(), version=__version__)
        req, make_side = side_for(server, ch)
        ch.send({"type": "run", "request": req.to_json()})
        ready = ch.expect("ready", "the server to accept the request")
        remote_rate = LineRate.from_json(ready.get("line_rate"))
        side = make_side(ch)
        rdma = side.connect(ready)
        local_rate = side.line_rate(sysfs)
        ch.expect("connected", "the server to set up the data path")
        results = measure_sizes(side.measure, req.sizes, req.kinds, progress)
        ch.send({"type": "bye"})
        return ClientRun(
            req,
            server,
            tuple(results),
            local_rate,
            remote_rate,
            rdma,
            side.tool_runs(),
            side.busy_poll(),
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


def serve_run(ch: Channel, side: ServerSide, rate: LineRate, engines: dict[str, str]) -> None:
    """The server's half after the request was accepted: ``ready``, the data path, then phases until
    ``bye``; closes the side. Refused (exit 3 for the client) on a message out of place."""
    try:
        ready = side.prepare()
        # Which engine measures each kind: a client asking for a tool checks it (a server from before
        # the tools would run its own loops under their name).
        ch.send({"type": "ready", "line_rate": rate.to_json(), **ready, "engines": engines})
        side.connect()
        ch.send({"type": "connected"})
        while True:
            msg = ch.recv("the client's next test")
            kind = msg["type"]
            if kind == "bye":
                return
            if kind == "phase":
                side.phase(msg)
                continue
            if kind == "error":
                raise RemoteError("failed", peer_text(msg.get("message", "no reason given")))
            ch.send_error("protocol", f"unexpected {peer_value(kind)}")
            raise Refused("protocol", f"unexpected {peer_value(kind)} message during a run")
    finally:
        side.close()
