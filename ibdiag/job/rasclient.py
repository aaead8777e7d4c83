"""Asking a running job's RAS service for its status, the way ``ncclras`` does (``src/ras/client.cc``).

The protocol is lines of text over TCP (NCCL's ``rasClientEventLoop``): the client sends
``CLIENT PROTOCOL 2``, the server answers ``SERVER PROTOCOL <n>``; ``TIMEOUT <s>`` (the time RAS may
wait for the other processes) and ``SET FORMAT json`` (NCCL 2.28.7 and later) are each answered
``OK``; ``STATUS`` (or ``VERBOSE STATUS``) is answered with the report, and the server closes the
connection when it is done. A NCCL older than 2.28.7 answers ``SET FORMAT json`` with ``ERROR:
Unknown command``: the text report is asked for instead, and a note says so.

The server is a peer, not trusted: one deadline covers the whole exchange (connect included), every
handshake line is cut at :data:`MAX_LINE` bytes, the report at ``max_bytes``; a slow, endless, huge or
silent reply, a reset and a wrong greeting all end in :class:`~ibdiag.errors.CannotRunError` or
:class:`~ibdiag.errors.PeerTimeoutError` (exit 3), never a hang. Nothing is sent but the commands above.
"""

from __future__ import annotations

import re
import socket
import time
from dataclasses import dataclass

from ibdiag.errors import CannotRunError, PeerTimeoutError, UsageError
from ibdiag.text import safe_excerpt

#: NCCL's defaults (``src/ras/ras_internal.h``): the client port and the protocol version.
DEFAULT_PORT = 28028
PROTOCOL = 2
MAX_LINE = 1024
_CHUNK = 1 << 16
GONE_HINT = (
    "run it on a node of the running job (RAS listens on localhost); RAS needs NCCL 2.24 or later "
    "and is on unless NCCL_RAS_ENABLE=0; NCCL_RAS_ADDR moves it to another address or port"
)
_ADDR = re.compile(
    r"^(?:\[(?P<v6>[0-9A-Fa-f:.%a-zA-Z]{1,64})\]|(?P<host>[A-Za-z0-9.-]{1,253}))?(?::(?P<port>\d{1,5}))?$"
)


@dataclass(frozen=True)
class RasAddress:
    host: str = "localhost"
    port: int = DEFAULT_PORT

    @property
    def text(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_address(text: str) -> RasAddress:
    """``localhost:28028``, ``10.0.0.5``, ``[::1]:28028``, ``:28029`` (NCCL_RAS_ADDR's forms)."""
    m = _ADDR.match(text.strip())
    port = int(m.group("port")) if m and m.group("port") else DEFAULT_PORT
    if m is None or not 0 < port < 65536:
        raise UsageError(
            f"cannot read the RAS address {safe_excerpt(text, 80)}",
            hint="write HOST:PORT, [IPv6]:PORT or :PORT (NCCL_RAS_ADDR's form; default localhost:28028)",
        )
    return RasAddress(m.group("v6") or m.group("host") or "localhost", port)


@dataclass(frozen=True)
class RasReply:
    data: bytes
    format: str
    """``json`` or ``text``: what the server agreed to send."""
    notes: tuple[str, ...] = ()


class _Conn:
    """One connection under one deadline."""

    def __init__(self, addr: RasAddress, deadline: float) -> None:
        self.addr, self.deadline = addr, deadline
        self.buf = b""
        self.sock = self._connect()

    def _left(self, what: str) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise PeerTimeoutError(
                f"the RAS service at {self.addr.text} did not {what} in time",
                hint="a job under heavy load or with dead processes answers slowly: give it more "
                "time (--timeout), or look at the job's own logs",
            )
        return left

    def _connect(self) -> socket.socket:
        try:
            infos = socket.getaddrinfo(self.addr.host, self.addr.port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as e:
            raise CannotRunError(
                f"cannot resolve the RAS address {self.addr.text}: {safe_excerpt(e, 80)}",
                hint=GONE_HINT,
            ) from None
        why = "no address"
        for family, kind, proto, _name, sockaddr in infos:
            s = socket.socket(family, kind, proto)
            try:
                s.settimeout(self._left("accept the connection"))
                s.connect(sockaddr)
                return s
            except TimeoutError:
                s.close()
                self._left("accept the connection")
                why = "timed out"
            except OSError as e:
                s.close()
                why = e.strerror or str(e)
        raise CannotRunError(
            f"no RAS service at {self.addr.text} ({why}): the job is gone, RAS is off, or NCCL is "
            "older than 2.24",
            hint=GONE_HINT,
        )

    def close(self) -> None:
        self.sock.close()

    def send(self, line: str) -> None:
        try:
            self.sock.settimeout(self._left("take the command"))
            self.sock.sendall(line.encode("ascii") + b"\n")
        except TimeoutError:
            self._left("take the command")
            raise self._lost(None) from None
        except OSError as e:
            raise self._lost(e) from None

    def _lost(self, e: OSError | None) -> CannotRunError:
        what = f" ({e.strerror or e})" if e is not None else ""
        return CannotRunError(
            f"the RAS service at {self.addr.text} closed the connection{what}", hint=GONE_HINT
        )

    def _recv(self, what: str) -> bytes:
        while True:
            try:
                self.sock.settimeout(self._left(what))
                return self.sock.recv(_CHUNK)
            except TimeoutError:
                continue  # the deadline is checked at the top
            except OSError as e:
                raise self._lost(e) from None

    def line(self, what: str) -> str:
        """The next line the server sends (at most :data:`MAX_LINE` bytes)."""
        while b"\n" not in self.buf:
            if len(self.buf) > MAX_LINE:
                raise CannotRunError(
                    f"the service at {self.addr.text} sent a line longer than {MAX_LINE} bytes "
                    f"when it should {what}: it is not NCCL's RAS",
                    hint=GONE_HINT,
                )
            chunk = self._recv(what)
            if not chunk:
                raise self._lost(None)
            self.buf += chunk
        head, _, self.buf = self.buf.partition(b"\n")
        return head[:MAX_LINE].decode("ascii", errors="replace").strip()

    def rest(self, max_bytes: int) -> bytes:
        """Everything until the server closes, within ``max_bytes``."""
        chunks, total = [self.buf], len(self.buf)
        while True:
            chunk = self._recv("finish its report")
            if not chunk:
                return b"".join(chunks)
            total += len(chunk)
            if total > max_bytes:
                raise CannotRunError(
                    f"the RAS reply from {self.addr.text} is larger than {max_bytes} bytes",
                    hint="raise [job] max_ras_bytes if the job is that large (a JSON status takes "
                    "about 600 bytes per rank and communicator)",
                )
            chunks.append(chunk)


def _expect_ok(conn: _Conn, command: str) -> str:
    conn.send(command)
    return conn.line(f"answer {command.split()[0]}")


def query(
    addr: RasAddress,
    *,
    timeout_s: float,
    max_bytes: int,
    json: bool = True,
    verbose: bool = False,
    collective_timeout_s: int | None = None,
) -> RasReply:
    """Ask the RAS service at ``addr`` for its status (module docstring)."""
    conn = _Conn(addr, time.monotonic() + timeout_s)
    try:
        conn.send(f"CLIENT PROTOCOL {PROTOCOL}")
        greeting = conn.line("greet")
        if not greeting.upper().startswith("SERVER PROTOCOL "):
            raise CannotRunError(
                f"the service at {addr.text} answered {safe_excerpt(greeting, 60)!s} to the RAS "
                "greeting: it is not NCCL's RAS",
                hint=GONE_HINT,
            )
        notes: list[str] = []
        if collective_timeout_s is not None:
            answer = _expect_ok(conn, f"TIMEOUT {collective_timeout_s}")
            if answer.upper() != "OK":
                notes.append(
                    f"RAS refused TIMEOUT {collective_timeout_s}: {safe_excerpt(answer, 60)}"
                )
        fmt = "text"
        if json:
            answer = _expect_ok(conn, "SET FORMAT json")
            if answer.upper() == "OK":
                fmt = "json"
            elif answer.upper().startswith("ERROR"):
                notes.append(
                    "RAS does not speak JSON (NCCL older than 2.28.7): read its text report"
                )
            else:
                raise CannotRunError(
                    f"the RAS service at {addr.text} answered {safe_excerpt(answer, 60)} to SET FORMAT",
                    hint=GONE_HINT,
                )
        conn.send("VERBOSE STATUS" if verbose else "STATUS")
        data = conn.rest(max_bytes)
    finally:
        conn.close()
    if not data.strip():
        raise CannotRunError(
            f"the RAS service at {addr.text} closed the connection without a report",
            hint=GONE_HINT,
        )
    return RasReply(data, fmt, tuple(notes))
