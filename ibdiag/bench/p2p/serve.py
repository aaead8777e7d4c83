"""``ibdiag bench serve``: wait for clients and run their benchmarks one at a time.

Each connection gets its own thread for the handshake, so a client that stalls never blocks the
others; the benchmark runs themselves are serialised (a second client meanwhile is told the
server is busy). Whatever a client does — garbage, a wrong version or token, a stall, a
disconnect, a request beyond ``--max-size`` — ends that connection with one log line and the
server keeps serving. The library never prints: log lines go to the ``log`` callable.

Before a client has authenticated it is a stranger: its whole handshake has one deadline
(``handshake_timeout_s``, at most ``--timeout``), and :class:`~.admission.Admission` bounds how
many such connections one address and everyone together may hold, so strangers trickling bytes
cannot lock a token holder out. What is logged about strangers (refused, dropped, gave up before
authenticating) is bounded by :class:`~.admission.StrangerLog`: once a second per address, a few lines
a second in all, the rest counted.
"""

from __future__ import annotations

import errno
import shutil
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ibdiag import __version__
from ibdiag.bench.p2p.control import admission
from ibdiag.bench.p2p.control.protocol import (
    DEFAULT_PORT,
    DEFAULT_TIMEOUT_S,
    Channel,
    ProtocolError,
    Refused,
    RemoteError,
    describe_peer,
    server_handshake,
)
from ibdiag.bench.p2p.fields import check_host, check_port, check_socket_buffer, check_timeout
from ibdiag.bench.p2p.params import TRANSPORTS, RunRequest
from ibdiag.bench.p2p.phase import Local, ServerSide
from ibdiag.bench.p2p.rdma import device as rdma_device
from ibdiag.bench.p2p.session import engine_for, serve_run
from ibdiag.errors import CannotRunError, ExitStatus, IbdiagError, UsageError
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.units import format_bytes

#: Authenticated connections at once (the running benchmark plus clients being told "busy").
MAX_SESSIONS = 16
#: Longest a stranger's whole handshake may take (seconds; ``--timeout`` when that is shorter).
HANDSHAKE_TIMEOUT_S = 5.0
#: How often the accept loop looks at the stop flag (seconds).
_ACCEPT_POLL_S = 0.5


@dataclass(frozen=True)
class ServeOptions:
    bind: str | None = None
    """Address to listen on; None = all interfaces (IPv6 and IPv4)."""
    port: int = DEFAULT_PORT
    transports: tuple[str, ...] = TRANSPORTS
    device: str | None = None
    ib_port: int = 1
    gid_index: int | None = None
    token: bytes | None = field(default=None, repr=False)
    max_size: int = 2**30
    """Largest buffer one run may ask for (bytes)."""
    timeout_s: float = DEFAULT_TIMEOUT_S
    once: bool = False
    socket_buffer: int | None = None
    sysfs: SysfsRoot = field(default_factory=SysfsRoot)
    """The tree this server reads (device, port, GID, line rate), shared by every client it serves."""
    handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S
    """One deadline for a stranger's whole handshake (capped at ``timeout_s``)."""
    max_unauthenticated_per_address: int = admission.PER_SOURCE
    max_unauthenticated: int = admission.TOTAL
    perftest_path: str | None = None
    """PATH searched for perftest's binaries (``--engine perftest``); None: this process's PATH."""

    def __post_init__(self) -> None:
        if self.bind is not None:
            check_host(self.bind, "--bind")
        check_port(self.port, allow_zero=True)
        check_timeout(self.timeout_s)
        check_socket_buffer(self.socket_buffer)
        if not isinstance(self.max_size, int) or self.max_size < 1:
            raise UsageError(
                f"--max-size {self.max_size} must be at least 1 byte", hint="e.g. --max-size 1G"
            )

    @property
    def handshake_limit_s(self) -> float:
        return min(self.handshake_timeout_s, self.timeout_s)


class Server:
    """Listening socket plus the accept loop. Use as a context manager; :meth:`close` frees everything."""

    def __init__(
        self,
        opts: ServeOptions,
        log: Callable[[str], None],
        stop: threading.Event | None = None,
    ) -> None:
        """``stop``: set it (from another thread) to end :meth:`serve`, as :meth:`stop` does; it is set
        when the server closes."""
        self.opts = opts
        self.log = log
        self.host = socket.gethostname()
        self._listener: socket.socket | None = None
        self._stop = stop if stop is not None else threading.Event()
        self._busy = threading.Lock()
        self._state = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._threads: set[threading.Thread] = set()
        self._strangers = admission.Admission(
            per_source=opts.max_unauthenticated_per_address, total=opts.max_unauthenticated
        )
        self._displaced: set[socket.socket] = set()
        self._sessions = 0
        self._stranger_log = admission.StrangerLog(log)
        self._current: str | None = None
        self._sides: set[ServerSide] = set()
        """Running benchmark sides (a perftest side owns processes): closed by :meth:`close` too."""
        self._once_status: int | None = None
        self.address: tuple[str, int] | None = None
        self.engines = installed_engines(opts.perftest_path)
        """The engines this server can run (told to each authenticated client, for ``--engine auto``)."""

    # --- set-up ------------------------------------------------------------------------------

    def start(self) -> tuple[str, int]:
        """Bind and listen; returns (address, port) — the port is the real one when 0 was asked."""
        self._listener = _listen(self.opts.bind, self.opts.port)
        sockname = self._listener.getsockname()
        self.address = (str(sockname[0]), int(sockname[1]))
        return self.address

    def __enter__(self) -> Server:
        if self._listener is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the loop ------------------------------------------------------------------------------

    def serve(self) -> int:
        """Accept clients until :meth:`stop` (or, with ``once``, the first run ends).

        Returns the exit status for ``--once``: 0 when the run completed, 3 when it failed.
        """
        if self._listener is None:
            self.start()
        assert self._listener is not None
        self._listener.settimeout(_ACCEPT_POLL_S)
        while not self._stop.is_set():
            try:
                conn, addr = self._listener.accept()
            except TimeoutError:
                continue
            except OSError as e:
                if self._stop.is_set():
                    break
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self.log(f"cannot accept a connection: {e.strerror}; retrying")
                    time.sleep(0.1)
                    continue
                raise CannotRunError(f"the listening socket failed: {e.strerror or e}") from None
            peer = describe_peer(addr)
            source = source_address(addr)
            with self._state:
                verdict = self._strangers.admit(conn, source)
                if verdict.displaced is not None:
                    self._displaced.add(verdict.displaced)  # type: ignore[arg-type]  # the keys admitted here are sockets
            if not verdict.admitted:
                self._log_refusal(peer, source, verdict.reason)
                conn.close()
                continue
            if verdict.displaced is not None:
                _shutdown(verdict.displaced)  # type: ignore[arg-type]  # the keys admitted here are sockets
            t = threading.Thread(
                target=self._handle, args=(conn, addr), name=f"ibdiag-serve-{peer}", daemon=True
            )
            with self._state:
                self._threads.add(t)
                self._conns.add(conn)
            t.start()
        return self._once_status if self._once_status is not None else int(ExitStatus.OK)

    def _log_refusal(self, peer: str, source: str, reason: str) -> None:
        self._stranger_log(source, f"{peer}: refused: {reason}")

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        """Stop, close the listener and every open connection, wait briefly for the run to unwind."""
        self._stop.set()
        if self._listener is not None:
            try:
                self._listener.shutdown(
                    socket.SHUT_RDWR
                )  # wakes a thread blocked in accept() (Linux)
            except OSError:
                pass
            try:
                self._listener.close()
            except OSError:
                pass
            self._listener = None
        with self._state:
            conns = list(self._conns)
            threads = list(self._threads)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                c.close()
            except OSError:
                pass
        deadline = time.monotonic() + 3.0
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        with self._state:
            sides = list(self._sides)
        for side in sides:  # a thread still waiting on its perftest: no process outlives the server
            side.close()

    # --- one connection --------------------------------------------------------------------------

    def _authenticated(self, conn: socket.socket) -> bool:
        """Move ``conn`` from the strangers to the sessions; False when the sessions are full."""
        with self._state:
            self._strangers.release(conn)
            if self._sessions >= MAX_SESSIONS:
                return False
            self._sessions += 1
            return True

    def _handle(self, conn: socket.socket, addr: tuple[Any, ...]) -> None:
        peer = describe_peer(addr)
        source = source_address(addr)
        ch = Channel(conn, peer, self.opts.timeout_s)
        ran = False
        ok = False
        session = False
        stranger = True  # until the handshake proved it (lines about strangers are bounded)

        def say(line: str) -> None:
            if stranger:
                self._stranger_log(source, line)
            else:
                self.log(line)

        try:
            hello = server_handshake(
                ch,
                token=self.opts.token,
                client_ip=str(addr[0]),
                host=self.host,
                version=__version__,
                transports=self.opts.transports,
                deadline=time.monotonic() + self.opts.handshake_limit_s,
                engines=self.engines,
            )
            stranger = False
            session = self._authenticated(conn)
            if not session:
                ch.send_error("busy", f"{MAX_SESSIONS} authenticated clients are connected already")
                raise Refused("busy", f"{MAX_SESSIONS} authenticated clients are connected already")
            msg = ch.expect("run", "the client's request")
            req = self._accept_request(ch, msg)
            if not self._busy.acquire(blocking=False):
                ch.send_error("busy", f"busy with a benchmark for {self._current}")
                raise Refused("busy", f"busy with {self._current}")
            try:
                self._current = f"{peer} ({hello.host})"
                ran = True
                self.log(
                    f"{peer}: running {req.describe()} for {hello.host} (ibdiag {hello.ibdiag_version})"
                )
                t0 = time.monotonic()
                self._run(ch, req)
                ok = True
                self.log(f"{peer}: done in {time.monotonic() - t0:.1f} s")
            finally:
                self._current = None
                self._busy.release()
        except Refused as r:
            say(f"{peer}: {r.reason}" if r.code == "client" else f"{peer}: refused: {r.reason}")
        except RemoteError as e:
            say(f"{peer}: client gave up: {_as_client(e.message, peer)}")
        except ProtocolError as e:
            ch.send_error("protocol", e.message.replace(peer, "the client"), e.hint)
            say(f"{peer}: refused: {_as_client(e.message, peer)}")
        except IbdiagError as e:
            if conn in self._displaced:
                say(
                    f"{peer}: dropped: still unauthenticated when the server was full; a client from a less crowded address took its place"
                )
            elif not self._stop.is_set():
                ch.send_error("failed", e.message, e.hint)
                say(f"{peer}: dropped: {_as_client(e.message, peer)}")
        except Exception as e:  # a bug must not take the server down
            ch.send_error("failed", f"internal error on the server: {type(e).__name__}")
            self.log(f"{peer}: internal error: {type(e).__name__}: {e}")
        finally:
            ch.close_gracefully()
            with self._state:
                self._strangers.release(conn)
                self._displaced.discard(conn)
                self._sessions -= 1 if session else 0
                self._conns.discard(conn)
                self._threads.discard(threading.current_thread())
            if ran:
                if self.opts.once:
                    self._once_status = int(ExitStatus.OK if ok else ExitStatus.CANNOT_RUN)
                    self._stop.set()

    def _accept_request(self, ch: Channel, msg: dict[str, Any]) -> RunRequest:
        try:
            request = msg.get("request")
            req = RunRequest.from_json(request if isinstance(request, dict) else {})
        except ValueError as e:
            ch.send_error("protocol", f"invalid request: {e}")
            raise Refused("protocol", f"invalid request: {e}") from None
        if req.transport not in self.opts.transports:
            ch.send_error(
                "unsupported",
                f"this server does not serve {req.transport} (it serves {', '.join(self.opts.transports)})",
            )
            raise Refused("unsupported", f"{req.transport} is not served here")
        problem = req.buffer_problem(self.opts.max_size)
        if problem:
            ch.send_error(
                "refused",
                problem,
                f"use sizes up to {format_bytes(self.opts.max_size)}, or restart the server with a larger --max-size",
            )
            raise Refused("refused", problem)
        return req

    def _run(self, ch: Channel, req: RunRequest) -> None:
        o = self.opts
        local = Local(
            o.sysfs,
            o.device,
            o.ib_port,
            o.gid_index,
            o.timeout_s,
            o.socket_buffer,
            o.perftest_path,
        )
        side = engine_for(req).server(ch, req, local, self.log)
        rate = side.line_rate(o.sysfs)
        with self._state:
            self._sides.add(side)
        try:
            serve_run(ch, side, rate, req.engines)
        finally:
            with self._state:
                self._sides.discard(side)


def installed_engines(path: str | None) -> tuple[str, ...]:
    """ibdiag's own engine, and each C tool whose program is on ``path`` (perftest: ``ib_write_bw``)."""
    found = [
        engine
        for engine, program in (
            ("perftest", "ib_write_bw"),
            ("iperf3", "iperf3"),
            ("sockperf", "sockperf"),
        )
        if shutil.which(program, path=path)
    ]
    return ("ibdiag", *found)


def source_address(addr: object) -> str:
    """The address part of a peer's socket address, IPv4-mapped IPv6 shown as IPv4 (``10.0.0.2``)."""
    host = str(addr[0]) if isinstance(addr, tuple) and addr else str(addr)
    return host[7:] if host.startswith("::ffff:") and "." in host else host


def _shutdown(conn: socket.socket) -> None:
    """Wake the thread blocked on ``conn`` (it then closes it)."""
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _as_client(message: str, peer: str) -> str:
    """A message written for the client ("10.0.0.2:5312 closed ...") as the server logs it ("the client closed ...")."""
    if message.startswith(f"{peer}: "):
        message = message[len(peer) + 2 :]
    return message.replace(peer, "the client")


def _listen(bind: str | None, port: int) -> socket.socket:
    """A listening TCP socket: dual-stack ``[::]`` when ``bind`` is None, else ``bind``'s address."""
    candidates: list[tuple[int, tuple[Any, ...]]] = []
    if bind is None:
        if socket.has_ipv6:
            candidates.append((socket.AF_INET6, ("::", port, 0, 0)))
        candidates.append((socket.AF_INET, ("0.0.0.0", port)))
    else:
        try:
            infos = socket.getaddrinfo(bind, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        except socket.gaierror as e:
            raise UsageError(
                f"--bind {bind}: cannot resolve it: {e.strerror}",
                hint="give an address of this host, e.g. 10.0.0.5",
            ) from None
        candidates = [(fam, addr) for fam, _, _, _, addr in infos]
    last: OSError | None = None
    for family, addr in candidates:
        s = socket.socket(family, socket.SOCK_STREAM)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and bind is None:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            s.bind(addr)
            s.listen(64)
            return s
        except OSError as e:
            last = e
            s.close()
            if e.errno == errno.EADDRINUSE:
                break
    where = f"{bind or '*'}:{port}"
    if last is not None and last.errno == errno.EADDRINUSE:
        raise CannotRunError(
            f"{where} is already in use",
            hint="another ibdiag bench serve may be running there; pick another --port",
        )
    if last is not None and last.errno == errno.EADDRNOTAVAIL:
        raise UsageError(
            f"--bind {bind} is not an address of this host",
            hint="use an address shown by 'ip addr', or leave --bind out for all",
        )
    if last is not None and last.errno == errno.EACCES:
        raise CannotRunError(
            f"not allowed to listen on {where}",
            hint="ports below 1024 need root; use the default 18516",
        )
    raise CannotRunError(f"cannot listen on {where}: {getattr(last, 'strerror', None) or last}")


def preflight_rdma(opts: ServeOptions) -> str:
    """With ``--transport rdma`` check at start-up that pyverbs, the device and the port are usable."""
    note = ""
    try:
        sel = rdma_device.select_rdma(opts.sysfs, opts.device, opts.ib_port, opts.gid_index)
    except CannotRunError as e:
        # Without pyverbs a server can still serve --engine perftest where perftest is installed.
        if (
            not e.message.startswith("pyverbs")
            or shutil.which("ib_write_bw", path=opts.perftest_path) is None
        ):
            raise
        sel = rdma_device.select_device(opts.sysfs, opts.device, opts.ib_port, opts.gid_index)
        note = f"; {e.message}: serving --engine perftest clients only"
    return f"{sel.device} port {sel.port}, GID index {sel.gid_index if sel.gid_index is not None else '-'} ({sel.gid_reason}){note}"
