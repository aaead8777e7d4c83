"""Log and terminal injection: strings a peer sends (client ``host``/``ibdiag``/``error``, server
errors and hints, 60,000 characters with newlines and ANSI escapes) reach the server's log and the
client's stderr escaped and capped — never a forged line, never an escape sequence.
"""

from __future__ import annotations

import os
import socket
import threading

import pytest

from ibdiag import __version__
from ibdiag.bench.p2p.control import protocol
from ibdiag.bench.p2p.control.protocol import Channel, client_handshake
from ibdiag.bench.p2p.params import RunRequest
from ibdiag.bench.p2p.tcp.sides import TcpClientSide
from tests.adversarial.net_support import client_against, frame, read_frame, start_server

pytestmark = pytest.mark.slow

FORGED = "ibdiag serve: 2026-01-01T00:00:00 127.0.0.1:1: done in 0.1 s"
EVIL = "x\n" + FORGED + "\r\n\x1b[2J\x1b[31mred\x1b]0;title\x07\u202eevil\x00" + "A" * 60_000
assert len(EVIL) > 60_000

LONGEST_LINE = 1000


def _check_lines(text: str, prefix: str) -> None:
    assert "\x1b" not in text and "\x07" not in text and "\x00" not in text and "\u202e" not in text
    for line in text.splitlines():
        assert line.startswith(prefix), f"a line not written by ibdiag: {line[:200]!r}"
        assert len(line) <= LONGEST_LINE, f"a {len(line)}-character line"


def _evil_client(
    port: int, *, host: str = "evil-client", version: str = __version__, error: str = "bye"
) -> None:
    """A client built from the library's own pieces that lies about itself and fails with ``error``."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    ch = Channel(sock, f"127.0.0.1:{port}", 5)
    side = None
    try:
        client_handshake(ch, token=None, host=host, version=version)
        req = RunRequest(transport="tcp", mode="bw", sizes=(65536,), iters=5, warmup=1)
        ch.send({"type": "run", "request": req.to_json()})
        ready = ch.expect("ready", "ready")
        side = TcpClientSide(ch, req, timeout_s=5)
        side.connect(ready)
        ch.expect("connected", "connected")
        ch.send({"type": "error", "message": error})
    finally:
        if side is not None:
            side.close()
        ch.close_gracefully()


def test_client_strings_reach_the_server_log_escaped_and_capped(ibdiag_exe):
    s = start_server(ibdiag_exe)
    try:
        _evil_client(s.port, host=EVIL)
        s.log.wait_for(r"client gave up: bye")
        _evil_client(s.port, version=EVIL)
        s.log.wait_for(r"client gave up: bye", start=len(s.log.lines) - 1)
        _evil_client(s.port, error=EVIL)
        s.log.wait_for(r"client gave up: x\\nibdiag serve: ")
        text = s.log.text()
        _check_lines(text, "ibdiag serve: ")
        assert FORGED not in text.replace("\\n" + FORGED, "")  # only ever inside an escaped line
        assert "running tcp bw, 64 KiB, 5 iterations per size for x\\nibdiag serve: " in text
        assert "… (" in text and "characters)" in text  # the cut is said
    finally:
        s.stop()


def _fake_server(answer: dict):
    def serve_one(conn: socket.socket) -> None:
        conn.sendall(
            frame(
                {
                    "type": "hello",
                    "proto": protocol.PROTO,
                    "version": protocol.VERSION,
                    "auth": "none",
                    "nonce": os.urandom(32).hex(),
                    "host": EVIL,
                    "ibdiag": EVIL[:2000],
                    "transports": ["tcp", EVIL[:2000]],
                }
            )
        )
        read_frame(conn)
        conn.sendall(frame(answer))
        conn.shutdown(socket.SHUT_WR)
        read_frame(conn, timeout=2)

    return serve_one


def test_server_errors_reach_the_client_stderr_escaped_and_capped(ibdiag_exe):
    r = client_against(
        ibdiag_exe,
        _fake_server({"type": "error", "code": "failed", "message": EVIL, "hint": EVIL[:3000]}),
    )
    assert r.returncode == 3, r.stderr
    assert r.stderr.startswith("ibdiag: error: 127.0.0.1:")
    assert ": x\\nibdiag serve: " in r.stderr.splitlines()[0]
    lines = r.stderr.splitlines()
    assert len(lines) == 2 and lines[1].startswith("hint: x\\n")
    _check_lines(r.stderr.replace("hint: ", "ibdiag: error: ", 1), "ibdiag: error: ")
    assert "Traceback" not in r.stderr


def test_the_server_hello_is_escaped_where_it_enters():
    a, b = socket.socketpair()
    with a, b:

        def serve() -> None:
            b.sendall(
                frame(
                    {
                        "type": "hello",
                        "proto": protocol.PROTO,
                        "version": protocol.VERSION,
                        "auth": "none",
                        "nonce": "ab" * 32,
                        "host": EVIL,
                        "ibdiag": EVIL[:2000],
                        "transports": ["tcp", EVIL[:2000]],
                    }
                )
            )
            read_frame(b)
            b.sendall(frame({"type": "welcome", "mac": None}))

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        hello = client_handshake(Channel(a, "server", 5), token=None, host="c", version="1")
        t.join(5)
    for value in (hello.host, hello.ibdiag_version, *hello.transports):
        assert (
            "\n" not in value and "\x1b" not in value and len(value) <= 1000
        )  # capped (255 characters of a host, escaped)
    assert hello.host.startswith("x\\nibdiag serve: ")
