"""The protocol is versioned: a peer of the previous version (1: data connections introduced by a
bare cookie) gets a clear "version mismatch" error on both sides, never a half-run."""

from __future__ import annotations

import os
import socket

import pytest

from ibdiag.bench.p2p.control import protocol
from tests.adversarial.net_support import client_against, frame, good_run, read_frame, start_server

pytestmark = pytest.mark.slow


def test_protocol_version_is_2():
    assert protocol.VERSION == 2


def test_an_old_client_is_told_version_mismatch(ibdiag_exe):
    s = start_server(ibdiag_exe)
    try:
        with socket.create_connection(("127.0.0.1", s.port), timeout=5) as raw:
            hello = read_frame(raw)
            assert hello is not None and hello["version"] == protocol.VERSION
            raw.sendall(
                frame(
                    {
                        "type": "hello",
                        "proto": protocol.PROTO,
                        "version": 1,
                        "nonce": "00" * 32,
                        "mac": None,
                        "host": "old",
                        "ibdiag": "0.0.9",
                    }
                )
            )
            answer = read_frame(raw)
        assert answer is not None and answer["type"] == "error" and answer["code"] == "version"
        assert (
            "version mismatch" in answer["message"]
            and "speaks 1" in answer["message"]
            and f"speaks {protocol.VERSION}" in answer["message"]
        )
        s.log.wait_for(
            r"refused: protocol version mismatch: the client speaks 1, this server speaks 2"
        )
        good_run(ibdiag_exe, s.port)
    finally:
        s.stop()


def test_an_old_server_is_reported_as_version_mismatch(ibdiag_exe):
    def old_server(conn: socket.socket) -> None:
        conn.sendall(
            frame(
                {
                    "type": "hello",
                    "proto": protocol.PROTO,
                    "version": 1,
                    "auth": "none",
                    "nonce": os.urandom(32).hex(),
                    "host": "old-node",
                    "ibdiag": "0.0.9",
                    "transports": ["tcp"],
                }
            )
        )
        read_frame(conn, timeout=3)

    r = client_against(ibdiag_exe, old_server)
    assert r.returncode == 3
    assert (
        "ibdiag: error: protocol version mismatch: 127.0.0.1:" in r.stderr
        and " speaks version 1 (ibdiag 0.0.9); this client speaks 2" in r.stderr
    )
    assert "hint: install the same ibdiag version on both hosts" in r.stderr
