"""A C tool (perftest, iperf3, sockperf) measuring under ibdiag's control channel: both halves of a run.

Per size and kind the server starts the tool's server side on a TCP port it picks, waits until the tool
itself listens there, and tells the client; the client runs the tool's client side against the
server's address; the tool's own output is read into the same
:class:`~ibdiag.bench.results.model.P2PResult` rows as ibdiag's own engine. Messages beyond
:mod:`..session`'s (after ``phase``)::

    server -> client  go      {perftest_port, command}      (the tool listens on perftest_port)
    client -> server  beat    (every second while the client's tool runs)
    client -> server  done    {rc}
    server -> client  result  {rc, output, command}          (the server's tool, bounded)

(``perftest_port`` keeps its name from the first engine, perftest: the field is the same for every tool.)

A tool runs from an argv list (never a shell), in its own session, with output to a private file;
every process is killed (SIGKILL to its process group) and reaped when a run ends, times out, the
peer dies or ibdiag is interrupted (:mod:`.process`), and the kernel kills it when ibdiag itself is
killed (SIGKILL, the OOM killer: :mod:`ibdiag.runtime.parentdeath`). The tool's own TCP port on the
server is picked free by the kernel (:func:`free_port`) and must pass a firewall; when another
program takes it before the tool binds it, the server starts the tool again on a new one (at most
:data:`LISTEN_TRIES` ports).

What differs from tool to tool — its programs, both command lines, how to read its output, how long a
run may take, what the server says in ``ready`` — is a :class:`Tool`.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
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
from ibdiag.bench.p2p.external.output import (
    UNREADABLE_RETRIES,
    UnreadableResult,
    error_lines,
    status_text,
)
from ibdiag.bench.p2p.external.process import ToolProcess, listens_on
from ibdiag.bench.p2p.fields import RequestError, check_int
from ibdiag.bench.p2p.params import RunRequest
from ibdiag.bench.p2p.phase import Progress, measure_sizes, read_phase
from ibdiag.bench.results.model import P2PResult
from ibdiag.bench.results.p2p_meta import BusyPoll, LineRate, RdmaPath, ToolRuns
from ibdiag.errors import CannotRunError
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.units import format_bytes

#: Most of the server's tool output sent to the client (characters).
MAX_REMOTE_OUTPUT = 4000
#: How often a client tells the server its tool is still running (seconds).
BEAT_S = 1.0
#: Ports the server tries for one run: between ibdiag's pick of a free port and the tool's bind,
#: another program may take it (the tool then says so and exits).
LISTEN_TRIES = 3
#: The tools' words when their port is taken: perftest 6.06 (``perftest_communication.c``), iperf3
#: ("unable to start listener for connections: Address already in use"), sockperf ("errno=98").
BIND_FAILED = re.compile(
    r"Couldn't listen to port|Failed to bind socket|Address already in use|errno=98"
)


class Tool(Protocol):
    """One end's view of a C tool for one run (its request, this end's device or address)."""

    name: str
    """``perftest``, ``iperf3``, ``sockperf``: the engine's name, the prefix of its JSON fields."""
    install_hint: str
    server_exits: bool
    """The server side ends by itself with the client's run (perftest, ``iperf3 -1``); else it keeps
    serving (sockperf) and is stopped once the client's run is over."""

    def program(self, kind: str) -> str:
        """The binary for ``kind`` (``ib_write_bw``, ``iperf3``)."""
        ...

    def version(self, text: str) -> str | None:
        """The version in what ``PROGRAM --version`` printed."""
        ...

    def server_argv(self, program: str, kind: str, size: int, port: int) -> list[str]: ...

    def client_argv(
        self, program: str, kind: str, size: int, port: int, server: str
    ) -> list[str]: ...

    def read(self, output: str, kind: str, size: int, what: str) -> P2PResult:
        """The row in the client's output; :class:`UnreadableResult` when it holds none."""
        ...

    def run_limit_s(self, kind: str, size: int, timeout_s: float) -> float:
        """Longest one run may take before it is killed (seconds)."""
        ...

    def ready(self) -> dict[str, Any]:
        """What the server adds to ``ready`` (besides ``<name>_version``)."""
        ...

    def connect(self, ready: dict[str, Any], peer: str) -> RdmaPath | None:
        """The client's check of the server's ``ready``; RDMA: both ends' devices."""
        ...

    def line_rate(self, sysfs: SysfsRoot) -> LineRate: ...


def free_port() -> int:
    """A TCP port free right now (the kernel's choice) for a tool's own connection."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def find_program(name: str, path: str | None, where: str, tool: str, hint: str) -> str:
    """The absolute path of ``name`` on ``path`` (a PATH string); CannotRunError (exit 3) if absent."""
    found = shutil.which(name, path=path)
    if not found:
        what = name if name == tool else f"{tool}'s {name}"
        raise CannotRunError(f"{what} is not installed on {where} (not on PATH)", hint=hint)
    return os.path.abspath(found)


def program_version(program: str, read: Callable[[str], str | None]) -> str | None:
    """The version ``PROGRAM --version`` prints (read by ``read``), or None."""
    try:
        r = subprocess.run(
            [program, "--version"],
            capture_output=True,
            text=True,
            timeout=10,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return read(r.stdout + r.stderr)


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


def _await_listening(proc: ToolProcess, port: int, deadline: float) -> bool:
    """True once ``proc`` itself listens on ``port``; False when it exits first or ``deadline`` passes."""
    while not listens_on(proc.proc.pid, port):
        if proc.returncode is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


class _OwnsTool:
    """A side that runs at most one tool process at a time (``proc``); :meth:`close` kills it.

    Both sides find the tool's binaries for ``kinds`` on ``path`` (``where`` names the host in the
    message when one is missing) and read the version of the first.
    """

    def __init__(
        self,
        ch: Channel,
        req: RunRequest,
        tool: Tool,
        kinds: Iterable[str],
        timeout_s: float,
        path: str | None,
        where: str,
    ) -> None:
        self.ch, self.req, self.tool, self.timeout_s = ch, req, tool, timeout_s
        self.programs = {
            k: find_program(tool.program(k), path, where, tool.name, tool.install_hint)
            for k in kinds
        }
        self.version = program_version(next(iter(self.programs.values())), tool.version)
        self.proc: ToolProcess | None = None

    def line_rate(self, sysfs: SysfsRoot) -> LineRate:
        return self.tool.line_rate(sysfs)

    def close(self) -> None:
        if self.proc is not None:
            self.proc.close()
            self.proc = None


class ToolServerSide(_OwnsTool):
    """The server's half: one tool server process per phase, on a port it picks."""

    def __init__(
        self,
        ch: Channel,
        req: RunRequest,
        tool: Tool,
        kinds: Iterable[str],
        *,
        timeout_s: float,
        path: str | None,
        log: Callable[[str], None],
    ) -> None:
        super().__init__(ch, req, tool, kinds, timeout_s, path, "the server")
        self.log = log

    def prepare(self) -> dict[str, Any]:
        return {**self.tool.ready(), f"{self.tool.name}_version": self.version}

    def connect(self) -> None:
        """Nothing to connect ahead: each tool run makes its own connections."""

    def phase(self, msg: dict[str, Any]) -> None:
        kind, size, _ = read_phase(msg, self.req)
        name = self.tool.name
        proc, port = self.start_listening(kind, size)
        try:
            self.ch.send({"type": "go", "perftest_port": port, "command": proc.command})
            limit = time.monotonic() + self.tool.run_limit_s(kind, size, self.timeout_s)
            while True:
                m = self.ch.recv(f"the client's {name} {kind} run of {format_bytes(size)}")
                if m["type"] == "beat":
                    if time.monotonic() > limit:
                        raise CannotRunError(
                            f"the {name} {kind} run of {format_bytes(size)} ran past its limit",
                            hint="give --iters/--duration that fit, or a longer --timeout",
                        )
                    continue
                if m["type"] == "done":
                    break
                if m["type"] == "error":
                    raise RemoteError(
                        "failed", f"the client gave up: {peer_text(m.get('message', '?'))}"
                    )
                raise ProtocolError(f"unexpected {peer_value(m['type'])} during a {name} run")
            rc = self._finish(proc, _rc_field(m, self.ch.peer))
            output = proc.output()
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
                    f"{name} {kind} {format_bytes(size)} on the server: {status_text(rc)}: {error_lines(output)}"
                )
        finally:
            proc.close()
            self.proc = None

    def _finish(self, proc: ToolProcess, client_rc: int | None) -> int | None:
        """The server tool's exit status once the client's run is over (a server that keeps serving is
        stopped here, which is its normal end: 0)."""
        if not self.tool.server_exits:
            if proc.returncode is not None:
                return proc.returncode
            proc.kill()
            return 0
        # The client's tool has finished; the server's finishes at the same time, or is stuck.
        rc = proc.wait(self.timeout_s if client_rc == 0 else 2.0)
        if rc is None:
            proc.kill()
        return rc

    def start_listening(self, kind: str, size: int) -> tuple[ToolProcess, int]:
        """The tool's server for ``kind`` and ``size``, listening on a port picked free; the process and the port.

        The tool listens itself, so a port free at the pick may be taken before it binds it (the
        kernel hands the same ephemeral ports to everyone): the tool then exits saying it could not
        listen, and runs again on a new port, :data:`LISTEN_TRIES` ports in all. Ready means the tool
        itself listens there, not just anyone. CannotRunError (exit 3) when it fails otherwise, does
        not listen within ``timeout_s``, or every port was taken.
        """
        program = self.programs[kind]
        name = os.path.basename(program)
        tool = self.tool.name
        taken: list[int] = []
        for _ in range(LISTEN_TRIES):
            port = free_port()
            argv = self.tool.server_argv(program, kind, size, port)
            proc = self.proc = ToolProcess(argv, self.tool.install_hint)
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
            if rc is not None and rc != 0 and BIND_FAILED.search(output):
                self.log(
                    f"{tool} could not listen on port {port} (taken since it was picked free); starting it on another"
                )
                taken.append(port)
                continue
            why = (
                status_text(rc)
                if rc is not None
                else f"not listening on port {port} after {self.timeout_s:g} s"
            )
            raise CannotRunError(
                f"{tool} on the server ({name}) failed before the client could connect ({why}): {error_lines(output)}",
                hint=f"the server ran: {proc.command}",
            )
        ports = ", ".join(str(p) for p in taken)
        raise CannotRunError(
            f"{tool} on the server ({name}) could not listen on its TCP port: {len(taken)} ports picked free ({ports}) were each taken before {tool} bound them",
            hint="another program on the server is taking ephemeral ports as fast as they free up; run again, or find it with 'ss -tlnp'",
        )


class ToolClientSide(_OwnsTool):
    """The client's half: per size and kind, ask the server to start its tool, then run the client side."""

    def __init__(
        self,
        ch: Channel,
        req: RunRequest,
        tool: Tool,
        kinds: Iterable[str],
        *,
        timeout_s: float,
        path: str | None,
        server_address: str,
    ) -> None:
        super().__init__(ch, req, tool, kinds, timeout_s, path, "this host")
        self.server_address = server_address
        self.server_version: str | None = None
        self.commands: list[str] = []
        self.server_commands: list[str] = []

    def connect(self, ready: dict[str, Any]) -> RdmaPath | None:
        path = self.tool.connect(ready, self.ch.peer)
        v = ready.get(f"{self.tool.name}_version")
        self.server_version = peer_text(v, 32) if isinstance(v, str) else None
        return path

    def tool_runs(self) -> tuple[ToolRuns, ...]:
        return (
            ToolRuns(
                self.tool.name,
                self.version,
                self.server_version,
                tuple(self.commands),
                tuple(self.server_commands),
            ),
        )

    def busy_poll(self) -> BusyPoll | None:
        return None

    def measure(self, size: int, kind: str) -> P2PResult:
        return run_again_if_unreadable(self, size, kind)

    def run(self, size: int, kind: str) -> P2PResult:
        """One tool run of ``size``-byte ``kind`` messages; CannotRunError (exit 3) when either end's tool fails."""
        peer = self.ch.peer
        tool = self.tool.name
        what = f"{os.path.basename(self.programs[kind])} {format_bytes(size)}"
        self.ch.send({"type": "phase", "kind": kind, "bytes": size, "warmup": 0})
        go = self.ch.expect("go", f"the server to start {what}")
        port = _port_field(go, peer)
        server_cmd = peer_text(go.get("command", "?"), 1000)
        self.server_commands.append(server_cmd)
        argv = self.tool.client_argv(self.programs[kind], kind, size, port, self.server_address)
        proc = self.proc = ToolProcess(argv, self.tool.install_hint)
        self.commands.append(proc.command)
        try:
            rc = self._wait(proc, kind, size, what)
            self.ch.send({"type": "done", "rc": rc})
            res = self.ch.expect("result", f"the server's {tool} to finish ({what})")
            server_rc = _rc_field(res, peer)
            server_out = (
                peer_text(res.get("output", ""), MAX_REMOTE_OUTPUT)
                if isinstance(res.get("output"), str)
                else ""
            )
            output = proc.output()
            server = (
                ""
                if server_rc == 0
                else f"; the server's {tool}: {status_text(server_rc)}: {error_lines(server_out)}"
            )
            hint = f"this host ran: {proc.command}; the server ran: {server_cmd}"
            if rc != 0:
                raise CannotRunError(
                    f"{tool} failed: {what} on this host: {status_text(rc)}: {error_lines(output)}{server}",
                    hint=hint,
                )
            try:
                return self.tool.read(output, kind, size, what)
            except UnreadableResult:
                raise
            except (
                CannotRunError
            ) as e:  # the tool reported a failure in its output (iperf3 -J exits 0)
                raise CannotRunError(e.message + server, hint=hint) from None
        finally:
            proc.close()
            self.proc = None

    def _wait(self, proc: ToolProcess, kind: str, size: int, what: str) -> int:
        """The client tool's exit status, beating the server every :data:`BEAT_S`; killed past its limit."""
        limit = time.monotonic() + self.tool.run_limit_s(kind, size, self.timeout_s)
        while True:
            rc = proc.wait(BEAT_S)
            if rc is not None:
                return rc
            if time.monotonic() > limit:
                proc.kill()
                self.ch.send_error("failed", f"{what} ran past its limit")
                raise CannotRunError(
                    f"{what} ran past its limit and was killed",
                    hint="give --iters/--duration that fit, or a longer --timeout",
                )
            self.ch.send({"type": "beat"})


class _Runs(Protocol):
    def run(self, size: int, kind: str) -> P2PResult: ...


def run_again_if_unreadable(side: _Runs, size: int, kind: str) -> P2PResult:
    """``side.run``, again when the tool's output was unreadable (at most :data:`UNREADABLE_RETRIES` more)."""
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
    """Every size and kind on the tool, one merged row per size (:func:`~..phase.measure_sizes`)."""
    return measure_sizes(
        lambda size, kind: run_again_if_unreadable(side, size, kind), list(sizes), kinds, progress
    )
