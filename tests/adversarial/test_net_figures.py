"""Figures a peer reports are checked against what this side knows before they are used.

The lying server is the real library server in a thread whose outgoing ``result`` messages are
rewritten (a stand-in for a hostile or broken server, named as such); the client is the real
``ibdiag`` process, which must refuse the figures (exit 3, naming the server) instead of printing
1.6e53 GB/s with status ok.
"""

from __future__ import annotations

import json
import socket

import pytest

from ibdiag.bench.p2p.control import protocol
from ibdiag.bench.p2p.control.protocol import Channel, client_handshake
from ibdiag.bench.p2p.params import RunRequest
from ibdiag.bench.p2p.tcp.sides import TcpClientSide
from tests.adversarial.net_support import run_client, start_server
from tests.support.p2p import server_thread

pytestmark = pytest.mark.slow

INF = "__inf__"

LIES = {
    "rx_bytes 2**200": {"rx_bytes": 2**200},
    "more bytes than were sent": {"rx_bytes": "+1"},
    "bytes not a multiple of the messages": {"rx_messages": "-1"},
    "negative messages": {"rx_messages": -5},
    "bytes as a string": {"rx_bytes": "lots"},
    "messages as a boolean": {"rx_messages": True},
    "zero seconds": {"rx_seconds": 0},
    "negative seconds": {"rx_seconds": -1.0},
    "infinite seconds": {"rx_seconds": INF},
    "seconds longer than the whole phase": {"rx_seconds": 1e6},
    "infinite cpu": {"cpu_s": INF},
    "negative cpu": {"cpu_s": -3.0},
}


def _lying_send(lie: dict):
    real_send = Channel.send

    def send(self: Channel, msg: dict, **kw: object) -> None:
        if msg.get("type") != "result" or "rx_bytes" not in msg:
            return real_send(self, msg, **kw)  # type: ignore[arg-type]
        msg = dict(msg)
        for key, value in lie.items():
            if value == "+1":
                msg[key] = msg[key] + 1
            elif value == "-1":
                msg[key] = msg[key] - 1
            else:
                msg[key] = value
        body = json.dumps(msg).replace(f'"{INF}"', "1e999").encode()  # 1e999 parses as inf
        self.sock.sendall(len(body).to_bytes(4, "big") + body)

    return send


@pytest.mark.parametrize("case", list(LIES))
def test_the_client_refuses_impossible_server_figures(ibdiag_exe, monkeypatch, case):
    monkeypatch.setattr(protocol.Channel, "send", _lying_send(LIES[case]))
    with server_thread() as (port, _, _):
        r = run_client(
            ibdiag_exe,
            port,
            "--sizes",
            "64K",
            "--iters",
            "20",
            "--warmup",
            "2",
            "-o",
            "json",
            "--timeout",
            "5",
            timeout=60,
        )
    assert r.returncode == 3, (case, r.stdout[:300], r.stderr)
    assert r.stdout == ""  # nothing printed as if it were a measurement
    assert r.stderr.startswith(f"ibdiag: error: 127.0.0.1:{port} "), r.stderr
    # an impossible figure, or a number JSON cannot hold as a float (1e999) refused with the message
    assert (
        "reported an impossible" in r.stderr
        or "sent a malformed message" in r.stderr
        and "beyond the range of a float" in r.stderr
    ), r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr


def _client_until_connected(port: int):
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    ch = Channel(sock, f"127.0.0.1:{port}", 5)
    client_handshake(ch, token=None, host="c", version="1")
    req = RunRequest(transport="tcp", mode="both", sizes=(1,), iters=5, warmup=1)
    ch.send({"type": "run", "request": req.to_json()})
    side = TcpClientSide(ch, req, timeout_s=5)
    side.connect(ch.expect("ready", "ready"))
    ch.expect("connected", "connected")
    return ch, side


@pytest.mark.parametrize(
    "phase",
    [
        {"kind": "bw", "bytes": 1.0, "warmup": 1},
        {"kind": "bw", "bytes": True, "warmup": 1},
        {"kind": "bw", "bytes": 1, "warmup": 2**200},
        {"kind": "lat", "bytes": 1, "warmup": 1.5},
        {"kind": ["bw"], "bytes": 1, "warmup": 1},
    ],
)
def test_the_server_refuses_impossible_client_numbers(ibdiag_exe, phase):
    s = start_server(ibdiag_exe)
    try:
        ch, side = _client_until_connected(s.port)
        try:
            ch.send({"type": "phase", **phase})
            with pytest.raises(protocol.RemoteError) as exc:
                ch.expect("go", "go")
            assert exc.value.code == "protocol"
        finally:
            side.close()
            ch.close()
        line = s.log.wait_for(r"127\.0\.0\.1:\d+: (refused|dropped|internal error)")
        assert "refused: " in line and "internal error" not in s.log.text()
    finally:
        s.stop()
