"""The framed control connection of ``ibdiag bench serve``/``p2p``: messages, deadlines, errors.

Wire format: every message is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON
(an object with a ``"type"``, nested at most :data:`MAX_DEPTH` deep, no NaN or infinity). Messages
larger than :data:`MAX_MESSAGE_BYTES` are refused, so garbage such as an HTTP request (``"GET "``
reads as a 1.2 GB length) is rejected at once. Every receive has a deadline.

Whatever text a peer sends (host names, versions, error messages) passes through
:func:`ibdiag.text.safe_excerpt` where it enters, before it can reach a log line or a terminal.
What is said over the channel (hello, authentication, session key) is :mod:`.protocol`.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import math
import socket
import struct
import time
from typing import Any

from ibdiag.errors import CannotRunError, ExitStatus, IbdiagError, PeerTimeoutError
from ibdiag.text import safe_excerpt, safe_value

#: Largest control message accepted (bytes); real ones are well under 4 KiB.
MAX_MESSAGE_BYTES = 64 * 1024
#: Deepest nesting of arrays and objects accepted in a message (real ones nest 3 deep).
MAX_DEPTH = 16
#: Longest peer text (host name, version, error message) kept, in characters of the original.
PEER_TEXT_MAX = 300
#: Default seconds any wait on the peer may take (``--timeout``).
DEFAULT_TIMEOUT_S = 10.0

_LEN = struct.Struct("!I")

#: Error codes a server sends, and how the client maps them to exit statuses.
ERROR_CODES = ("protocol", "version", "auth", "busy", "refused", "unsupported", "failed")

DEFAULT_HINTS = {
    "protocol": "check that HOST:--port is an ibdiag bench serve, and that both sides run the same ibdiag version",
    "version": "install the same ibdiag version on both hosts",
    "auth": "give both sides the same token: --token-file FILE (or IBDIAG_TOKEN) on the server and the client",
    "busy": "the server runs one benchmark at a time; retry when it is done, or start another server with --port",
    "refused": "ask for less, or restart the server with a larger limit (--max-size)",
    "unsupported": "start the server with the transport you ask for (ibdiag bench serve --transport ...)",
    "failed": "see the server's log (its stderr) for the cause",
}


class ProtocolError(CannotRunError):
    """The peer sent something that is not this protocol (exit 3)."""


class PeerClosedError(CannotRunError):
    """The peer closed or reset the connection while we waited for it (exit 3)."""


class RemoteError(IbdiagError):
    """The peer answered with an error message; ``code`` is one of :data:`ERROR_CODES`.

    ``refused`` (the request exceeds the server's limits) is a usage error (exit 2); every other
    code means the benchmark could not run (exit 3).
    """

    def __init__(self, code: str, message: str, hint: str | None = None) -> None:
        super().__init__(message, hint or DEFAULT_HINTS.get(code))
        self.code = code
        self.exit_status = ExitStatus.USAGE if code == "refused" else ExitStatus.CANNOT_RUN

    @classmethod
    def from_message(cls, msg: dict[str, Any], peer: str) -> RemoteError:
        """The ``error`` message ``msg`` from ``peer``, its texts escaped and capped."""
        code = msg.get("code", "failed")
        known = code if isinstance(code, str) and code in ERROR_CODES else "failed"
        hint = msg.get("hint")
        return cls(
            known,
            f"{peer}: {peer_text(msg.get('message', 'no reason given'))}",
            peer_text(hint) if hint else None,
        )


def peer_text(value: Any, limit: int = PEER_TEXT_MAX) -> str:
    """Text the peer sent, as it may appear in a log line or on a terminal (escaped, capped)."""
    return safe_excerpt(value, limit)


def peer_value(value: Any, limit: int = 60) -> str:
    """A value the peer sent where a string or number was expected, shown as a short literal."""
    return safe_value(value, limit)


class Refused(Exception):
    """Raised on the server side after an error message went to the client; ``reason`` is logged."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


# --- framing -------------------------------------------------------------------------------------


def encode(msg: dict[str, Any]) -> bytes:
    """One framed message: 4-byte big-endian length + compact JSON."""
    payload = json.dumps(msg, separators=(",", ":"), allow_nan=False).encode()
    if len(payload) > MAX_MESSAGE_BYTES:
        raise ValueError(f"control message of {len(payload)} bytes exceeds {MAX_MESSAGE_BYTES}")
    return _LEN.pack(len(payload)) + payload


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number this protocol sends")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{safe_excerpt(text, 40)} is beyond the range of a float")
    return value


def decode(payload: bytes) -> dict[str, Any]:
    """The JSON object of one message; ValueError when it is not a JSON object with a string ``type``,
    nests deeper than :data:`MAX_DEPTH`, or holds NaN/Infinity or an integer beyond Python's limit."""
    try:
        doc = json.loads(
            payload.decode("utf-8"), parse_constant=_no_constant, parse_float=_finite_float
        )
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON ({e.msg} at character {e.pos})") from None
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as e:  # an integer of more than 4300 digits, NaN, Infinity
        raise ValueError(safe_excerpt(str(e), 120)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("type"), str):
        raise ValueError("not a message object with a type")
    if _depth(doc) > MAX_DEPTH:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
    return doc


def _depth(doc: Any) -> int:
    deepest = 0
    stack = [(doc, 1)]
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        if deepest > MAX_DEPTH:
            break
        if isinstance(node, dict):
            stack.extend((v, d + 1) for v in node.values() if isinstance(v, (dict, list)))
        elif isinstance(node, list):
            stack.extend((v, d + 1) for v in node if isinstance(v, (dict, list)))
    return deepest


def describe_peer(addr: Any) -> str:
    """``('10.0.0.2', 53412)`` -> ``10.0.0.2:53412``; IPv6 as ``[fe80::1]:53412``."""
    if isinstance(addr, tuple) and len(addr) >= 2:
        host = str(addr[0])
        if host.startswith("::ffff:") and "." in host:
            host = host[7:]
        return f"[{host}]:{addr[1]}" if ":" in host else f"{host}:{addr[1]}"
    return str(addr)


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ``::1`` and IPv4-mapped ``::ffff:127.x.y.z``."""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def peer_closed(peer: str, waiting_for: str) -> PeerClosedError:
    """``peer`` closed the connection (a read of 0 bytes, a reset) while we waited for ``waiting_for``."""
    return PeerClosedError(
        f"{peer} closed the connection while we were waiting for {waiting_for}",
        hint="the peer process ended or was killed; see its log",
    )


def socket_error(e: OSError, peer: str, waiting_for: str, timeout_s: float) -> IbdiagError:
    """An OSError on a socket to ``peer`` as the ibdiag error a user can act on."""
    if isinstance(e, (socket.timeout, BlockingIOError)) or e.errno in (
        errno.EAGAIN,
        errno.EWOULDBLOCK,
        errno.ETIMEDOUT,
    ):
        return PeerTimeoutError(
            f"no answer from {peer} within {timeout_s:g} s while waiting for {waiting_for}",
            hint="is the peer alive and reachable? raise --timeout for slow links or large sizes",
        )
    if isinstance(
        e, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)
    ) or e.errno in (errno.ECONNRESET, errno.EPIPE):
        return peer_closed(peer, waiting_for)
    return CannotRunError(
        f"network error with {peer} while waiting for {waiting_for}: {e.strerror or e}",
        hint="check the network path between the hosts",
    )


class Channel:
    """A framed, deadline-bound control connection to ``peer``.

    ``session_key`` is set by the handshake (:func:`server_handshake`, :func:`client_handshake`).
    """

    def __init__(self, sock: socket.socket, peer: str, timeout_s: float) -> None:
        self.sock = sock
        self.peer = peer
        self.timeout_s = timeout_s
        self.session_key: bytes | None = None
        self._hdr = bytearray(_LEN.size)

    def send(self, msg: dict[str, Any], *, deadline: float | None = None) -> None:
        """Send ``msg`` within the channel's timeout, or by ``deadline`` (``time.monotonic()``)."""
        data = encode(msg)
        limit = self.timeout_s if deadline is None else max(deadline - time.monotonic(), 0.001)
        try:
            self.sock.settimeout(limit)
            self.sock.sendall(data)
        except OSError as e:
            raise socket_error(
                e, self.peer, f"it to accept a {msg.get('type')!r} message", self.timeout_s
            ) from None

    def send_error(self, code: str, message: str, hint: str | None = None) -> None:
        """Tell the peer why we stop; never raises (the peer may already be gone)."""
        try:
            msg: dict[str, Any] = {"type": "error", "code": code, "message": message}
            if hint:
                msg["hint"] = hint
            self.sock.settimeout(min(self.timeout_s, 2.0))
            self.sock.sendall(encode(msg))
        except (OSError, ValueError):
            pass

    def _read_exact(
        self, view: memoryview, deadline: float, limit_s: float, waiting_for: str, *, first: bool
    ) -> None:
        got = 0
        n = len(view)
        while got < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket_error(TimeoutError(), self.peer, waiting_for, limit_s)
            try:
                self.sock.settimeout(left)
                k = self.sock.recv_into(view[got:], n - got)
            except OSError as e:
                raise socket_error(e, self.peer, waiting_for, limit_s) from None
            if k == 0:
                if first and got == 0:
                    raise PeerClosedError(
                        f"{self.peer} closed the connection while we were waiting for {waiting_for}",
                        hint="the peer process ended or was killed, or refused us; see its log",
                    )
                raise PeerClosedError(
                    f"{self.peer} closed the connection in the middle of a message while we were waiting for {waiting_for}",
                    hint="the peer process ended or was killed; see its log",
                )
            got += k

    def recv(
        self, waiting_for: str, *, timeout_s: float | None = None, deadline: float | None = None
    ) -> dict[str, Any]:
        """The next message; PeerTimeoutError after ``timeout_s`` (default: the channel's timeout),
        or at ``deadline`` (``time.monotonic()``; then ``timeout_s`` is only what the error says).

        The deadline covers the whole message, not each byte: a peer trickling bytes gains nothing.
        """
        limit = self.timeout_s if timeout_s is None else timeout_s
        if deadline is None:
            deadline = time.monotonic() + limit
        self._read_exact(memoryview(self._hdr), deadline, limit, waiting_for, first=True)
        (length,) = _LEN.unpack(self._hdr)
        if length > MAX_MESSAGE_BYTES:
            raise ProtocolError(
                f"{self.peer} is not speaking the ibdiag p2p protocol (a {length}-byte message header; the limit is {MAX_MESSAGE_BYTES})",
                hint=DEFAULT_HINTS["protocol"],
            )
        payload = bytearray(length)
        self._read_exact(memoryview(payload), deadline, limit, waiting_for, first=False)
        try:
            return decode(bytes(payload))
        except ValueError as e:
            raise ProtocolError(
                f"{self.peer} sent a malformed message while we waited for {waiting_for}: {e}",
                hint=DEFAULT_HINTS["protocol"],
            ) from None

    def expect(
        self, kind: str, waiting_for: str, *, timeout_s: float | None = None
    ) -> dict[str, Any]:
        """The next message, which must be of type ``kind``; an ``error`` message raises :class:`RemoteError`."""
        msg = self.recv(waiting_for, timeout_s=timeout_s)
        if msg["type"] == "error":
            raise RemoteError.from_message(msg, self.peer)
        if msg["type"] != kind:
            raise ProtocolError(
                f"{self.peer} sent {peer_value(msg['type'])} while we waited for {waiting_for}",
                hint=DEFAULT_HINTS["protocol"],
            )
        return msg

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def close_gracefully(self, linger_s: float = 0.2) -> None:
        """Send FIN, discard what the peer still sends for up to ``linger_s``, then close.

        Closing with unread bytes in the receive queue makes the kernel answer with a reset, which
        can destroy the error message we just sent before the peer reads it (RFC 1122 4.2.2.13).
        """
        try:
            self.sock.shutdown(socket.SHUT_WR)
            self.sock.settimeout(linger_s)
            deadline = time.monotonic() + linger_s
            drained = 0
            while drained < MAX_MESSAGE_BYTES and time.monotonic() < deadline:
                chunk = self.sock.recv(4096)
                if not chunk:
                    break
                drained += len(chunk)
        except OSError:
            pass
        self.close()


def connect(host: str, port: int, timeout_s: float) -> socket.socket:
    """A TCP connection to ``host:port`` within ``timeout_s``; exit-3 errors that say what failed."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise CannotRunError(
            f"cannot resolve {host!r}: {e.strerror}",
            hint="check the host name, or give an IP address",
        ) from None
    last: OSError | None = None
    for family, kind, proto, _, addr in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(timeout_s)
            sock.connect(addr)
            return sock
        except OSError as e:
            last = e
            sock.close()
    where = f"{host}:{port}"
    if isinstance(last, ConnectionRefusedError):
        raise CannotRunError(
            f"nothing is listening on {where}",
            hint=f"start 'ibdiag bench serve' on {host} (port {port}), or check --port",
        )
    if isinstance(last, (socket.timeout, TimeoutError)):
        raise PeerTimeoutError(
            f"no answer from {where} within {timeout_s:g} s while connecting",
            hint="check that the host is up and no firewall drops the port",
        )
    raise CannotRunError(
        f"cannot connect to {where}: {getattr(last, 'strerror', None) or last}",
        hint="check the address and the route to the host",
    )
