"""The control protocol of ``ibdiag bench serve``/``p2p`` (what perftest's out-of-band TCP exchange does).

Messages travel over a :class:`~ibdiag.bench.p2p.control.channel.Channel` (framing, deadlines, errors);
this module is what is said first: the handshake, the shared token and the session key.

Handshake (protocol :data:`VERSION`)::

    server -> client  hello   {proto, version, auth: "hmac-sha256"|"none", nonce, host, ibdiag, transports}
    client -> server  hello   {proto, version, nonce, mac, host, ibdiag}
    server -> client  welcome {mac, engines}  |  error {code, message, hint}

With a shared token both sides prove they know it without sending it: the client sends
``HMAC-SHA256(token, "ibdiag-p2p/2 client" + server_nonce + client_nonce)`` and the server answers
with the same over ``"... server"``; both compare with :func:`hmac.compare_digest`. Without a token
the server accepts loopback clients only. Both sides then derive the session key
``HMAC-SHA256(token, "ibdiag-p2p/2 session" + server_nonce + client_nonce)`` (an empty token without
one), which binds the run's data connections to this control connection (:func:`data_mac`).

Version 2 (this one) added the session key and the data connections' MAC; version 1 introduced
data connections with a bare cookie. Peers of different versions stop at the hello with a
"version mismatch" error.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The channel's names are part of this module's interface too: a caller of the protocol needs both.
from ibdiag.bench.p2p.control.channel import (
    DEFAULT_HINTS,
    DEFAULT_TIMEOUT_S,
    ERROR_CODES,
    MAX_DEPTH,
    MAX_MESSAGE_BYTES,
    PEER_TEXT_MAX,
    Channel,
    PeerClosedError,
    ProtocolError,
    Refused,
    RemoteError,
    connect,
    decode,
    describe_peer,
    encode,
    is_loopback,
    peer_text,
    peer_value,
    socket_error,
)
from ibdiag.errors import CannotRunError, InputError
from ibdiag.infile import RefusedFile, read_regular
from ibdiag.text import safe_value

__all__ = [
    "DEFAULT_HINTS",
    "DEFAULT_PORT",
    "DEFAULT_TIMEOUT_S",
    "ERROR_CODES",
    "MAX_DEPTH",
    "MAX_MESSAGE_BYTES",
    "NONCE_BYTES",
    "PEER_TEXT_MAX",
    "PROTO",
    "VERSION",
    "Channel",
    "Hello",
    "PeerClosedError",
    "ProtocolError",
    "Refused",
    "RemoteError",
    "client_handshake",
    "client_mac",
    "connect",
    "data_mac",
    "decode",
    "describe_peer",
    "encode",
    "is_loopback",
    "peer_text",
    "peer_value",
    "read_token_file",
    "server_handshake",
    "server_mac",
    "session_key",
    "socket_error",
    "token_from_env",
]

PROTO = "ibdiag-p2p"
VERSION = 2
#: Control port (perftest uses 18515 for its exchange; one above it so both can run side by side).
DEFAULT_PORT = 18516
NONCE_BYTES = 32

_AUTH_HMAC = "hmac-sha256"
#: Largest token file read (a token is a line of a few dozen characters).
MAX_TOKEN_FILE_BYTES = 64 * 1024


# --- tokens and authentication ---------------------------------------------------------------------


def read_token_file(path: str | os.PathLike[str]) -> bytes:
    """The shared token in ``path`` (surrounding whitespace removed); InputError (exit 2) if unusable."""
    p = Path(path)
    try:
        # through the checked reader: /dev/zero is refused unread, a FIFO is never opened (it would
        # hang the server); a secret from a command goes in $IBDIAG_TOKEN instead of <(...)
        raw = read_regular(p, MAX_TOKEN_FILE_BYTES)
    except RefusedFile as e:
        raise InputError(
            f"token file {safe_value(str(p))}: {e.problem}",
            hint="give a small regular file (or set $IBDIAG_TOKEN), e.g. head -c 32 /dev/urandom | base64 > ~/.ibdiag-token",
        ) from None
    except FileNotFoundError:
        raise InputError(
            f"token file {p}: no such file",
            hint="create one on both hosts, e.g. head -c 32 /dev/urandom | base64 > ~/.ibdiag-token",
        ) from None
    except OSError as e:
        raise InputError(
            f"token file {p}: cannot read: {e.strerror}", hint="check the file's permissions"
        ) from None
    token = raw.strip()
    if not token:
        raise InputError(
            f"token file {p} is empty",
            hint="put a random string in it, e.g. head -c 32 /dev/urandom | base64 > ~/.ibdiag-token",
        )
    return token


def token_from_env(value: str | None) -> bytes | None:
    """``IBDIAG_TOKEN``'s value as a token; None when unset or blank."""
    if value is None or not value.strip():
        return None
    return value.strip().encode()


def read_token(
    token_file: Path | None,
    environ: Mapping[str, str],
    warn: Callable[[str], None] | None = None,
) -> bytes | None:
    """The shared token: ``--token-file``'s, else ``$IBDIAG_TOKEN`` in ``environ``; None without either.
    A token file other users can read still works, and ``warn`` is told so."""
    if token_file is None:
        return token_from_env(environ.get("IBDIAG_TOKEN"))
    token = read_token_file(token_file)
    try:
        mode = token_file.stat().st_mode
    except OSError:
        return token
    if mode & 0o077 and warn is not None:
        warn(
            f"token file {token_file} can be read by other users (mode {mode & 0o777:o}); chmod 600 {token_file}"
        )
    return token


def _mac(token: bytes, role: str, server_nonce: bytes, client_nonce: bytes) -> str:
    return hmac.new(
        token, f"{PROTO}/{VERSION} {role}".encode() + server_nonce + client_nonce, hashlib.sha256
    ).hexdigest()


def client_mac(token: bytes, server_nonce: bytes, client_nonce: bytes) -> str:
    """What the client proves: HMAC-SHA256 over ``"ibdiag-p2p/1 client" + server_nonce + client_nonce``."""
    return _mac(token, "client", server_nonce, client_nonce)


def server_mac(token: bytes, server_nonce: bytes, client_nonce: bytes) -> str:
    return _mac(token, "server", server_nonce, client_nonce)


def session_key(token: bytes | None, server_nonce: bytes, client_nonce: bytes) -> bytes:
    """The key both ends derive after the handshake: HMAC-SHA256 over ``"ibdiag-p2p/2 session"`` and
    both nonces. Without a token the key is keyed by nothing: it still binds the data connections
    to this session, but anyone who saw the (loopback) handshake could compute it."""
    return hmac.new(
        token or b"",
        f"{PROTO}/{VERSION} session".encode() + server_nonce + client_nonce,
        hashlib.sha256,
    ).digest()


def data_mac(key: bytes, run_nonce: bytes, index: int) -> bytes:
    """What data connection ``index`` of a run sends first: HMAC-SHA256(session key, ``"ibdiag-p2p/2
    data"`` + the run's nonce from ``ready`` + the index as 4 big-endian bytes)."""
    return hmac.new(
        key,
        f"{PROTO}/{VERSION} data".encode() + run_nonce + index.to_bytes(4, "big"),
        hashlib.sha256,
    ).digest()


def _nonce(msg: dict[str, Any]) -> bytes | None:
    value = msg.get("nonce")
    if not isinstance(value, str) or len(value) != 2 * NONCE_BYTES:
        return None
    try:
        return bytes.fromhex(value)
    except ValueError:
        return None


@dataclass(frozen=True)
class Hello:
    """Who is at the other end, from its hello."""

    host: str
    ibdiag_version: str
    transports: tuple[str, ...] = ()
    engines: tuple[str, ...] | None = None
    """The engines the server can run (its ``welcome``; told only to an authenticated client); None
    from a server too old to say."""


def server_handshake(
    ch: Channel,
    *,
    token: bytes | None,
    client_ip: str,
    host: str,
    version: str,
    transports: tuple[str, ...],
    deadline: float | None = None,
    engines: tuple[str, ...] = (),
) -> Hello:
    """Greet a new client and authenticate it; :class:`Refused` (after telling the client) otherwise.

    ``deadline`` (``time.monotonic()``) bounds the whole handshake, however the client paces its
    bytes; without it the channel's timeout applies to each message. On success ``ch.session_key``
    is set.
    """
    limit = ch.timeout_s if deadline is None else max(0.0, deadline - time.monotonic())
    nonce = os.urandom(NONCE_BYTES)
    ch.send(
        {
            "type": "hello",
            "proto": PROTO,
            "version": VERSION,
            "auth": _AUTH_HMAC if token else "none",
            "nonce": nonce.hex(),
            "host": host,
            "ibdiag": version,
            "transports": list(transports),
        },
        deadline=deadline,
    )
    msg = ch.recv("the client's hello", timeout_s=round(limit, 1), deadline=deadline)
    if msg.get("type") == "error":
        raise Refused(
            "client", f"the client gave up: {peer_text(msg.get('message', 'no reason given'))}"
        )
    if msg.get("type") != "hello" or msg.get("proto") != PROTO:
        ch.send_error("protocol", "this is an ibdiag p2p server; expected a hello")
        raise Refused(
            "protocol", f"not an ibdiag client (first message {peer_value(msg.get('type'))})"
        )
    their = msg.get("version")
    if type(their) is not int or their != VERSION:
        shown = peer_value(their)
        ch.send_error(
            "version",
            f"protocol version mismatch: the client speaks {shown}, this server (ibdiag {version}) speaks {VERSION}",
        )
        raise Refused(
            "version",
            f"protocol version mismatch: the client speaks {shown}, this server speaks {VERSION}",
        )
    client_nonce = _nonce(msg)
    if client_nonce is None:
        ch.send_error("protocol", "the hello carries no valid nonce")
        raise Refused("protocol", "hello without a valid nonce")
    mac = msg.get("mac")
    if token:
        if not isinstance(mac, str):
            ch.send_error("auth", "this server requires a token")
            raise Refused("auth", "no token given by the client")
        if not hmac.compare_digest(mac.encode(), client_mac(token, nonce, client_nonce).encode()):
            ch.send_error("auth", "authentication failed: the tokens differ")
            raise Refused("auth", "wrong token")
        answer: str | None = server_mac(token, nonce, client_nonce)
    else:
        if not is_loopback(client_ip):
            ch.send_error(
                "auth",
                "this server has no token and accepts clients from its own host (loopback) only",
                "start the server and the client with the same --token-file FILE (or IBDIAG_TOKEN)",
            )
            raise Refused("auth", "not a loopback client and this server has no token")
        answer = None
    ch.send({"type": "welcome", "mac": answer, "engines": list(engines)}, deadline=deadline)
    ch.session_key = session_key(token, nonce, client_nonce)
    return Hello(peer_text(msg.get("host", "?"), 255), peer_text(msg.get("ibdiag", "?"), 64))


def client_handshake(ch: Channel, *, token: bytes | None, host: str, version: str) -> Hello:
    """Answer the server's hello and check that the server knows the token too; sets ``ch.session_key``."""
    msg = ch.recv("the server's hello")
    if msg["type"] == "error":
        raise RemoteError.from_message(msg, ch.peer)
    if msg.get("type") != "hello" or msg.get("proto") != PROTO:
        raise ProtocolError(
            f"{ch.peer} is not an ibdiag bench serve (it sent {peer_value(msg.get('type'))})",
            hint=DEFAULT_HINTS["protocol"],
        )
    their = msg.get("version")
    if type(their) is not int or their != VERSION:
        raise CannotRunError(
            f"protocol version mismatch: {ch.peer} speaks version {peer_value(their)} (ibdiag {peer_text(msg.get('ibdiag', '?'), 64)}); this client speaks {VERSION}",
            hint=DEFAULT_HINTS["version"],
        )
    server_nonce = _nonce(msg)
    if server_nonce is None:
        raise ProtocolError(
            f"{ch.peer} sent a hello without a valid nonce", hint=DEFAULT_HINTS["protocol"]
        )
    auth = msg.get("auth")
    if auth == _AUTH_HMAC and not token:
        raise CannotRunError(
            f"{ch.peer} requires a token",
            hint="give the server's token with --token-file FILE or IBDIAG_TOKEN",
        )
    if auth == "none" and token:
        raise CannotRunError(
            f"{ch.peer} runs without a token, but this client has one (--token-file or IBDIAG_TOKEN)",
            hint="start the server with the same token; for a loopback test without tokens unset IBDIAG_TOKEN",
        )
    if auth not in (_AUTH_HMAC, "none"):
        raise ProtocolError(
            f"{ch.peer} asks for unknown authentication {peer_value(auth)}",
            hint=DEFAULT_HINTS["version"],
        )
    client_nonce = os.urandom(NONCE_BYTES)
    ch.send(
        {
            "type": "hello",
            "proto": PROTO,
            "version": VERSION,
            "nonce": client_nonce.hex(),
            "mac": client_mac(token, server_nonce, client_nonce) if token else None,
            "host": host,
            "ibdiag": version,
        }
    )
    welcome = ch.expect("welcome", "the server to accept our hello")
    if token:
        theirs = welcome.get("mac")
        if not isinstance(theirs, str) or not hmac.compare_digest(
            theirs.encode(), server_mac(token, server_nonce, client_nonce).encode()
        ):
            raise CannotRunError(
                f"{ch.peer} did not prove that it knows the token",
                hint="something other than your ibdiag server may be listening on that port",
            )
    ch.session_key = session_key(token, server_nonce, client_nonce)
    transports = msg.get("transports")
    engines = welcome.get("engines")
    return Hello(
        host=peer_text(msg.get("host", "?"), 255),
        ibdiag_version=peer_text(msg.get("ibdiag", "?"), 64),
        transports=tuple(peer_text(t, 16) for t in transports[:8])
        if isinstance(transports, list)
        else (),
        engines=tuple(e for e in engines[:16] if isinstance(e, str) and e.isidentifier())
        if isinstance(engines, list)
        else None,
    )
