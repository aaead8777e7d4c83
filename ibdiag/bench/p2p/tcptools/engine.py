"""``--engine iperf3`` and ``--engine sockperf``: the C tools users trust for TCP, driven like perftest.

Both run through :mod:`ibdiag.bench.p2p.external.drive` (the server starts the tool's server side on a
port it picks, the client runs the tool's client against it, every process is killed and reaped
with the run); what is each tool's is :mod:`.iperf3` and :mod:`.sockperf`. The server side binds the
address the control connection arrived on (an IPv4-mapped one as IPv4), so the tool serves the
same interface ``bench serve`` was reached on.
"""

from __future__ import annotations

from typing import Any

from ibdiag.bench.p2p.control.protocol import Channel, ProtocolError
from ibdiag.bench.p2p.engines import kinds_of
from ibdiag.bench.p2p.external.drive import ToolClientSide, ToolServerSide, find_program
from ibdiag.bench.p2p.linerate import tcp_line_rate
from ibdiag.bench.p2p.params import RunRequest
from ibdiag.bench.p2p.phase import ClientFactory, Engine, Local, Log
from ibdiag.bench.p2p.tcptools import iperf3, sockperf
from ibdiag.bench.results.model import P2PResult
from ibdiag.bench.results.p2p_meta import LineRate, RdmaPath
from ibdiag.errors import CannotRunError
from ibdiag.node.sysfs import SysfsRoot


def plain_address(address: str) -> str:
    """``::ffff:10.0.0.1`` (an IPv4 peer on a dual-stack socket) as ``10.0.0.1``; others as they are."""
    return address[7:] if address.startswith("::ffff:") and "." in address else address


def _check_engines(ready: dict[str, Any], req: RunRequest, peer: str) -> None:
    """The server must say it runs the engines asked (a server from before them would measure with
    its own loops, silently)."""
    if ready.get("engines") != req.engines:
        raise ProtocolError(
            f"{peer} does not run {'+'.join(sorted(set(req.engines.values())))} (it would measure with ibdiag's own loops)",
            hint="run the same ibdiag version on both hosts",
        )


class _TcpTool:
    """What iperf3 and sockperf share: the address each end uses, the line rate, ``ready``."""

    name = ""

    def __init__(self, req: RunRequest, ch: Channel, socket_buffer: int | None = None) -> None:
        self.req = req
        self.local = plain_address(str(ch.sock.getsockname()[0]))
        self.socket_buffer = socket_buffer

    def program(self, kind: str) -> str:
        return self.name

    def ready(self) -> dict[str, Any]:
        return {}

    def connect(self, ready: dict[str, Any], peer: str) -> RdmaPath | None:
        _check_engines(ready, self.req, peer)
        return None

    def line_rate(self, sysfs: SysfsRoot) -> LineRate:
        return tcp_line_rate(sysfs, self.local)


class Iperf3(_TcpTool):
    name = "iperf3"
    install_hint = iperf3.INSTALL_HINT
    server_exits = True  # -1: one test, then it exits

    def version(self, text: str) -> str | None:
        return iperf3.parse_version(text)

    def server_argv(self, program: str, kind: str, size: int, port: int) -> list[str]:
        return iperf3.server_argv(program, self.local, port)

    def client_argv(self, program: str, kind: str, size: int, port: int, server: str) -> list[str]:
        return iperf3.client_argv(program, self.req, size, port, server, self.socket_buffer)

    def read(self, output: str, kind: str, size: int, what: str) -> P2PResult:
        return iperf3.read_result(output, self.req, size, what)

    def run_limit_s(self, kind: str, size: int, timeout_s: float) -> float:
        return iperf3.run_limit_s(self.req, size, timeout_s)


class Sockperf(_TcpTool):
    name = "sockperf"
    install_hint = sockperf.INSTALL_HINT
    server_exits = False  # serves until stopped

    def version(self, text: str) -> str | None:
        return sockperf.parse_version(text)

    def server_argv(self, program: str, kind: str, size: int, port: int) -> list[str]:
        return sockperf.server_argv(program, self.local, port)

    def client_argv(self, program: str, kind: str, size: int, port: int, server: str) -> list[str]:
        return sockperf.client_argv(program, self.req, size, port, server)

    def read(self, output: str, kind: str, size: int, what: str) -> P2PResult:
        return sockperf.read_result(output, size, what)

    def run_limit_s(self, kind: str, size: int, timeout_s: float) -> float:
        return sockperf.run_limit_s(self.req, timeout_s)


def _ipv4_only(address: str) -> None:
    if ":" in address:
        raise CannotRunError(
            f"sockperf 3.7 takes IPv4 addresses only, and the server was reached at {address}",
            hint="connect to the server's IPv4 address, or use --engine ibdiag for latency",
        )


def _client_of(tool: type[Iperf3] | type[Sockperf]) -> Any:
    def client(req: RunRequest, local: Local) -> ClientFactory:
        kinds = kinds_of(req, tool.name)
        find_program(tool.name, local.perftest_path, "this host", tool.name, tool.install_hint)

        def make(ch: Channel) -> ToolClientSide:
            server = plain_address(str(ch.sock.getpeername()[0]))
            if tool is Sockperf:
                _ipv4_only(server)
            return ToolClientSide(
                ch,
                req,
                tool(req, ch, local.socket_buffer),
                kinds,
                timeout_s=local.timeout_s,
                path=local.perftest_path,
                server_address=server,
            )

        return make

    return client


def _server_of(tool: type[Iperf3] | type[Sockperf]) -> Any:
    def server(ch: Channel, req: RunRequest, local: Local, log: Log) -> ToolServerSide:
        return ToolServerSide(
            ch,
            req,
            tool(req, ch, local.socket_buffer),
            kinds_of(req, tool.name),
            timeout_s=local.timeout_s,
            path=local.perftest_path,
            log=log,
        )

    return server


#: ``--engine iperf3`` (TCP bandwidth) and ``--engine sockperf`` (TCP latency).
IPERF3 = Engine(_client_of(Iperf3), _server_of(Iperf3))
SOCKPERF = Engine(_client_of(Sockperf), _server_of(Sockperf))
