"""The data port: every TCP data connection proves it belongs to the authenticated session (the
run's nonce and a MAC under the session key, sent first, within a deadline). Strangers — silent,
wrong MAC, the run's nonce replayed as if it were a key — are dropped and logged; the run proceeds.

The stranger learns the data port the way an on-path attacker would: from the unencrypted
``ready`` message, read by a relay between the real client and the real server.
"""

from __future__ import annotations

import json
import os
import socket
import time

import pytest

from tests.adversarial.net_support import QUICK, ControlProxy, run_client, start_server, token_env
from tests.support.p2p import write_token

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("kind", ["silent", "wrong-mac", "nonce-as-key"])
def test_a_stranger_on_the_data_port_is_dropped_and_the_run_proceeds(ibdiag_exe, tmp_path, kind):
    token = write_token(tmp_path / "token", "data-port-token")
    s = start_server(ibdiag_exe, "--token-file", str(token), "--timeout", "3")
    strangers: list[socket.socket] = []

    def on_server_message(msg: dict) -> None:
        if msg.get("type") != "ready":
            return
        st = socket.create_connection(("127.0.0.1", msg["data_port"]), timeout=2)
        strangers.append(st)
        nonce = bytes.fromhex(str(msg.get("data_nonce", msg.get("cookie", "00"))))
        if kind == "wrong-mac":
            st.sendall(b"IBD2" + (0).to_bytes(4, "big") + os.urandom(32))
        elif kind == "nonce-as-key":
            st.sendall(nonce[:16] + (0).to_bytes(4, "big") + nonce + bytes(64))
        time.sleep(0.3)  # the stranger is first in the server's accept queue

    proxy = ControlProxy(s.port, on_server_message)
    try:
        r = run_client(
            ibdiag_exe,
            proxy.port,
            *QUICK,
            "--timeout",
            "3",
            env=token_env("data-port-token"),
            timeout=30,
        )
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["results"][0]["bw_gbs"] > 0
        assert strangers, "the relay never saw a ready message"
        s.log.wait_for(r"data connection from 127\.0\.0\.1:\d+: dropped: ")
        s.log.wait_for(r"done in")
    finally:
        proxy.close()
        for st in strangers:
            st.close()
        s.stop()


def test_a_client_that_hangs_up_before_its_data_connections_frees_the_server_at_once(ibdiag_exe):
    from ibdiag.bench.p2p.control.protocol import Channel, client_handshake
    from ibdiag.bench.p2p.params import RunRequest
    from tests.adversarial.net_support import good_run

    s = start_server(ibdiag_exe, "--timeout", "30")
    try:
        sock = socket.create_connection(("127.0.0.1", s.port), timeout=5)
        ch = Channel(sock, "server", 5)
        client_handshake(ch, token=None, host="quitter", version="1")
        ch.send(
            {
                "type": "run",
                "request": RunRequest(transport="tcp", mode="bw", sizes=(4096,), iters=2).to_json(),
            }
        )
        ch.expect("ready", "ready")
        sock.close()  # gone before opening a single data connection
        t0 = time.monotonic()
        s.log.wait_for(
            r"dropped: the client gave up \(closed or wrote to the control connection\) with 0 of 1 data connections set up",
            timeout=10,
        )
        assert time.monotonic() - t0 < 2  # not after --timeout (30 s)
        good_run(ibdiag_exe, s.port)  # and the next client is not told "busy"
    finally:
        s.stop()
