"""``ibdiag bench p2p --engine perftest``: perftest's C loops, driven through ibdiag's control channel.

Per size and kind the server starts the perftest server side (``ib_write_bw -p PORT ...``) on a TCP
port it picks, waits until perftest listens there, and tells the client; the client runs the same
binary with the server's address; ibdiag's perftest importer reads the client's output into the
same :class:`~ibdiag.bench.results.model.P2PResult` rows as ibdiag's own engine. How a tool is
driven (the messages, the processes, the port picked again when taken) is
:mod:`ibdiag.bench.p2p.external.drive`; this module is what is perftest's: its binaries and command
lines (:mod:`.command`), its output (:mod:`.output`), the RDMA device each end chooses from its own
sysfs, and ``--engine auto``'s old choice for ``ibdiag sweep`` (:func:`resolve_engine`).

A request outside perftest's own bounds never gets here: it is refused when it is built
(:func:`ibdiag.bench.p2p.engines.perftest_problem`, exit 2).
"""

from __future__ import annotations

import shutil
from typing import Any

from ibdiag.bench.p2p.control.protocol import Channel, ProtocolError
from ibdiag.bench.p2p.engines import kinds_of, perftest_problem
from ibdiag.bench.p2p.external.drive import ToolClientSide, ToolServerSide, find_program
from ibdiag.bench.p2p.linerate import rdma_line_rate
from ibdiag.bench.p2p.params import RunRequest
from ibdiag.bench.p2p.perftest.command import (
    INSTALL_HINT,
    binary,
    parse_version,
    perftest_argv,
    run_limit_s,
)
from ibdiag.bench.p2p.perftest.output import read_result
from ibdiag.bench.p2p.phase import ClientFactory, Engine, Local, Log
from ibdiag.bench.p2p.rdma import verbs
from ibdiag.bench.p2p.rdma.device import RdmaSelection, select_device
from ibdiag.bench.p2p.rdma.plan import rdma_path, read_ends
from ibdiag.bench.results.model import P2PResult
from ibdiag.bench.results.p2p_meta import LineRate, RdmaPath
from ibdiag.errors import CannotRunError
from ibdiag.node.sysfs import SysfsRoot


def _details(sel: RdmaSelection) -> dict[str, Any]:
    return {
        "device": sel.device,
        "ib_port": sel.port,
        "gid_index": sel.gid_index,
        "gid": sel.gid,
        "gid_choice": sel.gid_reason,
        "link_layer": sel.link_layer,
        "mtu": None,
    }


class Perftest:
    """perftest for one end of one run: the request and this end's device, port and GID."""

    name = "perftest"
    install_hint = INSTALL_HINT
    server_exits = True

    def __init__(self, req: RunRequest, sel: RdmaSelection) -> None:
        self.req, self.sel = req, sel

    def program(self, kind: str) -> str:
        return binary(self.req.verb, kind)

    def version(self, text: str) -> str | None:
        return parse_version(text)

    def _argv(self, program: str, kind: str, size: int, port: int, server: str | None) -> list[str]:
        s = self.sel
        return perftest_argv(
            program,
            self.req,
            kind,
            size,
            device=s.device,
            ib_port=s.port,
            gid_index=s.gid_index,
            tcp_port=port,
            server=server,
        )

    def server_argv(self, program: str, kind: str, size: int, port: int) -> list[str]:
        return self._argv(program, kind, size, port, None)

    def client_argv(self, program: str, kind: str, size: int, port: int, server: str) -> list[str]:
        return self._argv(program, kind, size, port, server)

    def read(self, output: str, kind: str, size: int, what: str) -> P2PResult:
        return read_result(output, size, kind, self.req.verb, what)

    def run_limit_s(self, kind: str, size: int, timeout_s: float) -> float:
        return run_limit_s(self.req, kind, size, timeout_s)

    def ready(self) -> dict[str, Any]:
        return {**_details(self.sel), "engine": "perftest"}

    def connect(self, ready: dict[str, Any], peer: str) -> RdmaPath:
        """The server runs perftest too; both ends' devices (the path MTU is perftest's, not known here)."""
        if ready.get("engine") != "perftest":
            raise ProtocolError(
                f"{peer} does not run --engine perftest (it would measure with ibdiag's own loops)",
                hint="run the same ibdiag version on both hosts",
            )
        client_end, server_end = read_ends(ready, _details(self.sel), peer)
        return rdma_path(self.req, client_end, server_end, None)

    def line_rate(self, sysfs: SysfsRoot) -> LineRate:
        return rdma_line_rate(sysfs, self.sel.device, self.sel.port)


def _client(req: RunRequest, local: Local) -> ClientFactory:
    kinds = kinds_of(req, "perftest")
    for kind in kinds:  # a missing binary fails before any connection
        find_program(
            binary(req.verb, kind), local.perftest_path, "this host", "perftest", INSTALL_HINT
        )
    sel = select_device(local.sysfs, local.device, local.ib_port, local.gid_index)

    def make(ch: Channel) -> ToolClientSide:
        return ToolClientSide(
            ch,
            req,
            Perftest(req, sel),
            kinds,
            timeout_s=local.timeout_s,
            path=local.perftest_path,
            server_address=ch.sock.getpeername()[0],
        )

    return make


def _server(ch: Channel, req: RunRequest, local: Local, log: Log) -> ToolServerSide:
    sel = select_device(local.sysfs, local.device, local.ib_port, local.gid_index)
    return ToolServerSide(
        ch,
        req,
        Perftest(req, sel),
        kinds_of(req, "perftest"),
        timeout_s=local.timeout_s,
        path=local.perftest_path,
        log=log,
    )


#: ``--engine perftest`` (``--transport rdma`` only).
PERFTEST = Engine(_client, _server)


def pyverbs_available() -> bool:
    """Can ibdiag's own engine load pyverbs here (the venv, or Debian's dist-packages)?"""
    try:
        verbs.import_pyverbs()
    except CannotRunError:
        return False
    return True


def perftest_installed(req: RunRequest, path: str | None) -> bool:
    """Are perftest's binaries for every kind of ``req`` (its verb) on ``path``?"""
    return all(shutil.which(binary(req.verb, k), path=path) for k in req.kinds)


def resolve_engine(req: RunRequest, path: str | None, *, have_pyverbs: bool | None = None) -> str:
    """One engine for the whole of ``req`` (``ibdiag sweep``'s choice): ibdiag's own where pyverbs loads
    (or for TCP); else perftest where its binaries are on ``path`` and it can run ``req``; else ibdiag's
    (whose error names pyverbs). ``bench p2p --engine auto`` chooses per kind
    (:func:`ibdiag.bench.p2p.engines.choose`)."""
    if req.transport != "rdma":
        return "ibdiag"
    if have_pyverbs is None:
        have_pyverbs = pyverbs_available()
    if have_pyverbs:
        return "ibdiag"
    if perftest_problem(req) is None and perftest_installed(req, path):
        return "perftest"
    return "ibdiag"
