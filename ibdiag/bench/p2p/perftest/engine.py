"""``ibdiag bench p2p --engine perftest``: perftest's C loops, driven through ibdiag's control channel.

Per size and kind the server starts the perftest server side (``ib_write_bw -p PORT ...``) on a TCP
port it picks, waits until perftest listens there, and tells the client; the client runs the same
binary with the server's address; ibdiag's perftest importer reads the client's output into the
same :class:`~ibdiag.bench.results.model.P2PResult` rows as ibdiag's own engine. Messages beyond
:mod:`..session`'s (after ``phase``)::

    server -> client  go      {perftest_port, command}      (perftest listens on perftest_port)
    client -> server  beat    (every second while the client's perftest runs)
    client -> server  done    {rc}
    server -> client  result  {rc, output}                    (the server's perftest, bounded)

perftest runs from an argv list (never a shell), in its own session, with output to a private file;
every process is killed (SIGKILL to its process group) and reaped when a run ends, times out, the
peer dies or ibdiag is interrupted (:func:`.process.kill_all`), and the kernel kills it when ibdiag itself is
killed (SIGKILL, the OOM killer: :mod:`ibdiag.runtime.parentdeath`). perftest's own TCP exchange uses
its own port on the server, one per run, picked free by the kernel (:func:`free_port`), which a
firewall must allow; when another program takes that port before perftest binds it, the server
starts perftest again on a new one (at most :data:`LISTEN_TRIES` ports).

A request outside perftest's own bounds never gets here: it is refused when it is built
(:func:`ibdiag.bench.p2p.params.perftest_problem`, exit 2).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from ibdiag.bench.p2p.control.protocol import (
    Channel,
    ProtocolError,
    RemoteError,
    peer_text,
    peer_value,
)
from ibdiag.bench.p2p.fields import RequestError, check_int
from ibdiag.bench.p2p.linerate import rdma_line_rate
from ibdiag.bench.p2p.params import RunRequest, perftest_problem
from ibdiag.bench.p2p.perftest.command import (
    binary,
    find_program,
    perftest_argv,
    program_version,
    run_limit_s,
)
from ibdiag.bench.p2p.perftest.output import (
    UNREADABLE_RETRIES,
    UnreadableResult,
    error_lines,
    read_result,
    status_text,
)
from ibdiag.bench.p2p.perftest.process import (
    PerftestProcess,
    listens_on,
)
from ibdiag.bench.p2p.phase import (
    ClientFactory,
    Engine,
    Local,
    Log,
    Progress,
    measure_sizes,
    read_phase,
)
from ibdiag.bench.p2p.rdma import verbs
from ibdiag.bench.p2p.rdma.device import select_device
from ibdiag.bench.p2p.rdma.plan import rdma_path, read_ends
from ibdiag.bench.results.model import P2PResult
from ibdiag.bench.results.p2p_meta import LineRate, PerftestEngine, RdmaPath
from ibdiag.errors import CannotRunError
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.units import format_bytes

#: Most of the server's perftest output sent to the client (characters).
MAX_REMOTE_OUTPUT = 4000
#: How often a client tells the server its perftest is still running (seconds).
BEAT_S = 1.0

#: Ports the server tries for one perftest run: between ibdiag's pick of a free port and perftest's
#: bind, another program may take it (perftest then says "Couldn't listen to port N" and exits).
LISTEN_TRIES = 3

#: perftest 6.06's words when its TCP exchange port is taken (``perftest_communication.c``).
_BIND_FAILED = re.compile(r"Couldn't listen to port|Failed to bind socket|Address already in use")


def free_port() -> int:
    """A TCP port free right now (the kernel's choice) for perftest's exchange."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


# --- processes ---------------------------------------------------------------------------------------


# --- reading perftest's result -----------------------------------------------------------------------


# --- both sides over the control channel ---------------------------------------------------------------


def _port_field(msg: dict[str, Any], peer: str) -> int:
    try:
        return check_int(msg.get("perftest_port"), "perftest_port", 1, 65535)
    except RequestError as e:
        raise ProtocolError(f"{peer} sent an invalid {e.message}") from None


def _rc_field(msg: dict[str, Any], peer: str) -> int | None:
    rc = msg.get("rc")
    if rc is None:
        return None
    try:
        return check_int(rc, "rc", -255, 255)
    except RequestError as e:
        raise ProtocolError(f"{peer} sent an invalid {e.message}") from None


def _details(sel: Any) -> dict[str, Any]:
    return {
        "device": sel.device,
        "ib_port": sel.port,
        "gid_index": sel.gid_index,
        "gid": sel.gid,
        "gid_choice": sel.gid_reason,
        "link_layer": sel.link_layer,
        "mtu": None,
    }


def _await_listening(proc: PerftestProcess, port: int, deadline: float) -> bool:
    """True once ``proc`` itself listens on ``port``; False when it exits first or ``deadline`` passes."""
    while not listens_on(proc.proc.pid, port):
        if proc.returncode is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


class _OwnsPerftest:
    """A side that runs at most one perftest process at a time (``proc``); :meth:`close` kills it.

    Both sides find perftest's binaries for the request's kinds on ``path`` (``where`` names the
    host in the message when one is missing) and read the version of the first.
    """

    def __init__(
        self, ch: Channel, req: RunRequest, sel: Any, timeout_s: float, path: str | None, where: str
    ) -> None:
        self.ch, self.req, self.sel, self.timeout_s = ch, req, sel, timeout_s
        self.programs = {k: find_program(binary(req.verb, k), path, where) for k in req.kinds}
        self.version = program_version(next(iter(self.programs.values())))
        self.proc: PerftestProcess | None = None

    def line_rate(self, sysfs: SysfsRoot) -> LineRate:
        return rdma_line_rate(sysfs, self.sel.device, self.sel.port)

    def close(self) -> None:
        if self.proc is not None:
            self.proc.close()
            self.proc = None


class PerftestServerSide(_OwnsPerftest):
    """The server's half: one perftest server process per phase, on a port it picks."""

    def __init__(
        self,
        ch: Channel,
        req: RunRequest,
        sel: Any,
        *,
        timeout_s: float,
        path: str | None,
        log: Callable[[str], None],
    ) -> None:
        super().__init__(ch, req, sel, timeout_s, path, "the server")
        self.log = log

    def prepare(self) -> dict[str, Any]:
        return {**_details(self.sel), "engine": "perftest", "perftest_version": self.version}

    def connect(self) -> None:
        """Nothing to connect ahead: each perftest run makes its own queue pairs."""

    def phase(self, msg: dict[str, Any]) -> None:
        kind, size, _ = read_phase(msg, self.req)
        proc, port = self.start_listening(kind, size)
        try:
            self.ch.send({"type": "go", "perftest_port": port, "command": proc.command})
            limit = time.monotonic() + run_limit_s(self.req, kind, size, self.timeout_s)
            while True:
                m = self.ch.recv(f"the client's perftest {kind} run of {format_bytes(size)}")
                if m["type"] == "beat":
                    if time.monotonic() > limit:
                        raise CannotRunError(
                            f"the perftest {kind} run of {format_bytes(size)} ran past its limit",
                            hint="give --iters/--duration that fit, or a longer --timeout",
                        )
                    continue
                if m["type"] == "done":
                    break
                if m["type"] == "error":
                    raise RemoteError(
                        "failed", f"the client gave up: {peer_text(m.get('message', '?'))}"
                    )
                raise ProtocolError(f"unexpected {peer_value(m['type'])} during a perftest run")
            client_rc = _rc_field(m, self.ch.peer)
            # The client's perftest has finished; the server's finishes at the same time, or is stuck.
            rc = proc.wait(self.timeout_s if client_rc == 0 else 2.0)
            output = proc.output()
            if rc is None:
                proc.kill()
            self.ch.send(
                {
                    "type": "result",
                    "rc": rc,
                    "output": output[-MAX_REMOTE_OUTPUT:],
                    "command": proc.command,
                }
            )
            if rc != 0:
                self.log(
                    f"perftest {kind} {format_bytes(size)} on the server: {status_text(rc)}: {error_lines(output)}"
                )
        finally:
            proc.close()
            self.proc = None

    def start_listening(self, kind: str, size: int) -> tuple[PerftestProcess, int]:
        """perftest's server for ``kind`` and ``size``, listening on a port picked free; the process and the port.

        perftest listens itself, so a port free at the pick may be taken before perftest binds it (the
        kernel hands the same ephemeral ports to everyone): perftest then exits saying it could not
        listen, and runs again on a new port, :data:`LISTEN_TRIES` ports in all. Ready means perftest
        itself listens there, not just anyone. CannotRunError (exit 3) when it fails otherwise, does not
        listen within ``timeout_s``, or every port was taken.
        """
        program = self.programs[kind]
        name = os.path.basename(program)
        taken: list[int] = []
        for _ in range(LISTEN_TRIES):
            port = free_port()
            argv = perftest_argv(
                program,
                self.req,
                kind,
                size,
                device=self.sel.device,
                ib_port=self.sel.port,
                gid_index=self.sel.gid_index,
                tcp_port=port,
            )
            proc = self.proc = PerftestProcess(argv)
            try:
                ready = _await_listening(proc, port, time.monotonic() + self.timeout_s)
            except BaseException:
                proc.close()
                self.proc = None
                raise
            if ready:
                return proc, port
            rc = proc.wait(0)
            output = proc.output()
            proc.close()
            self.proc = None
            if rc is not None and rc != 0 and _BIND_FAILED.search(output):
                self.log(
                    f"perftest could not listen on port {port} (taken since it was picked free); starting it on another"
                )
                taken.append(port)
                continue
            why = (
                status_text(rc)
                if rc is not None
                else f"not listening on port {port} after {self.timeout_s:g} s"
            )
            raise CannotRunError(
                f"perftest on the server ({name}) failed before the client could connect ({why}): {error_lines(output)}",
                hint=f"the server ran: {proc.command}",
            )
        ports = ", ".join(str(p) for p in taken)
        raise CannotRunError(
            f"perftest on the server ({name}) could not listen on its TCP port: {len(taken)} ports picked free ({ports}) were each taken before perftest bound them",
            hint="another program on the server is taking ephemeral ports as fast as they free up; run again, or find it with 'ss -tlnp'",
        )


class PerftestClientSide(_OwnsPerftest):
    """The client's half: per size and kind, ask the server to start perftest, then run the client side."""

    def __init__(
        self,
        ch: Channel,
        req: RunRequest,
        sel: Any,
        *,
        timeout_s: float,
        path: str | None,
        server_address: str,
    ) -> None:
        super().__init__(ch, req, sel, timeout_s, path, "this host")
        self.server_address = server_address
        self.server_version: str | None = None
        self.commands: list[str] = []
        self.server_commands: list[str] = []

    def details(self) -> dict[str, Any]:
        return _details(self.sel)

    def connect(self, ready: dict[str, Any]) -> RdmaPath:
        """The server runs perftest too; both ends' devices (the path MTU is perftest's, not known here)."""
        self.check_ready(ready)
        client_end, server_end = read_ends(ready, self.details(), self.ch.peer)
        return rdma_path(self.req, client_end, server_end, None)

    def perftest_info(self) -> PerftestEngine:
        return self.info()

    def measure(self, size: int, kind: str) -> P2PResult:
        return run_again_if_unreadable(self, size, kind)

    def check_ready(self, ready: dict[str, Any]) -> None:
        if ready.get("engine") != "perftest":
            raise ProtocolError(
                f"{self.ch.peer} does not run --engine perftest (it would measure with ibdiag's own loops)",
                hint="run the same ibdiag version on both hosts",
            )
        v = ready.get("perftest_version")
        self.server_version = peer_text(v, 32) if isinstance(v, str) else None

    def info(self) -> PerftestEngine:
        return PerftestEngine(
            self.version, self.server_version, tuple(self.commands), tuple(self.server_commands)
        )

    def run(self, size: int, kind: str) -> P2PResult:
        """One perftest run of ``size``-byte ``kind`` messages; CannotRunError (exit 3) when either end's perftest fails."""
        peer = self.ch.peer
        what = f"{binary(self.req.verb, kind)} {format_bytes(size)}"
        self.ch.send({"type": "phase", "kind": kind, "bytes": size, "warmup": 0})
        go = self.ch.expect("go", f"the server to start {what}")
        port = _port_field(go, peer)
        server_cmd = peer_text(go.get("command", "?"), 1000)
        self.server_commands.append(server_cmd)
        argv = perftest_argv(
            self.programs[kind],
            self.req,
            kind,
            size,
            device=self.sel.device,
            ib_port=self.sel.port,
            gid_index=self.sel.gid_index,
            tcp_port=port,
            server=self.server_address,
        )
        proc = self.proc = PerftestProcess(argv)
        self.commands.append(proc.command)
        try:
            limit = time.monotonic() + run_limit_s(self.req, kind, size, self.timeout_s)
            rc = None
            while rc is None:
                rc = proc.wait(BEAT_S)
                if rc is None:
                    if time.monotonic() > limit:
                        proc.kill()
                        self.ch.send_error("failed", f"{what} ran past its limit")
                        raise CannotRunError(
                            f"{what} ran past its limit and was killed",
                            hint="give --iters/--duration that fit, or a longer --timeout",
                        )
                    self.ch.send({"type": "beat"})
            self.ch.send({"type": "done", "rc": rc})
            res = self.ch.expect("result", f"the server's perftest to finish ({what})")
            server_rc = _rc_field(res, peer)
            server_out = (
                peer_text(res.get("output", ""), MAX_REMOTE_OUTPUT)
                if isinstance(res.get("output"), str)
                else ""
            )
            output = proc.output()
            if rc != 0:
                server = (
                    ""
                    if server_rc == 0
                    else f"; the server's perftest: {status_text(server_rc)}: {error_lines(server_out)}"
                )
                raise CannotRunError(
                    f"perftest failed: {what} on this host: {status_text(rc)}: {error_lines(output)}{server}",
                    hint=f"this host ran: {proc.command}; the server ran: {server_cmd}",
                )
            return read_result(output, size, kind, self.req.verb, what)
        finally:
            proc.close()
            self.proc = None


class _Runs(Protocol):
    def run(self, size: int, kind: str) -> P2PResult: ...


def run_again_if_unreadable(side: _Runs, size: int, kind: str) -> P2PResult:
    """``side.run``, again when perftest's output was unreadable (at most :data:`UNREADABLE_RETRIES` more)."""
    for attempt in range(UNREADABLE_RETRIES + 1):
        try:
            return side.run(size, kind)
        except UnreadableResult:
            if attempt == UNREADABLE_RETRIES:
                raise
    raise AssertionError("unreachable")


def run_all(
    side: _Runs, sizes: Iterable[int], kinds: tuple[str, ...], progress: Progress | None
) -> list[P2PResult]:
    """Every size and kind on perftest, one merged row per size (:func:`~..phase.measure_sizes`)."""
    return measure_sizes(
        lambda size, kind: run_again_if_unreadable(side, size, kind), list(sizes), kinds, progress
    )


def _client(req: RunRequest, local: Local) -> ClientFactory:
    for kind in req.kinds:  # a missing binary fails before any connection
        find_program(binary(req.verb, kind), local.perftest_path)
    sel = select_device(local.sysfs, local.device, local.ib_port, local.gid_index)
    return lambda ch: PerftestClientSide(
        ch,
        req,
        sel,
        timeout_s=local.timeout_s,
        path=local.perftest_path,
        server_address=ch.sock.getpeername()[0],
    )


def _server(ch: Channel, req: RunRequest, local: Local, log: Log) -> PerftestServerSide:
    sel = select_device(local.sysfs, local.device, local.ib_port, local.gid_index)
    return PerftestServerSide(
        ch, req, sel, timeout_s=local.timeout_s, path=local.perftest_path, log=log
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


def resolve_engine(req: RunRequest, path: str | None, *, have_pyverbs: bool | None = None) -> str:
    """``--engine auto``: ibdiag's own engine where pyverbs loads (or for TCP); else perftest where
    its binaries are on ``path`` and it can run ``req``; else ibdiag's (whose error names pyverbs)."""
    if req.transport != "rdma":
        return "ibdiag"
    if have_pyverbs is None:
        have_pyverbs = pyverbs_available()
    if have_pyverbs:
        return "ibdiag"
    if perftest_problem(req) is None and all(
        shutil.which(binary(req.verb, k), path=path) for k in req.kinds
    ):
        return "perftest"
    return "ibdiag"
