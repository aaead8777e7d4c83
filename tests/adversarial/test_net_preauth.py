"""Pre-authentication slot exhaustion: a slowloris (many real sockets from several "hosts" — loopback
source addresses 127.0.0.2 ... — each trickling one byte at a time and reconnecting whenever it is
dropped) must not lock a client with the token out of a token server.

The server bounds the unauthenticated phase per connection (one deadline for the whole handshake),
per source address (a cap on its concurrent unauthenticated connections) and overall (a newcomer
from a less crowded address displaces the oldest connection of the most crowded one).
"""

from __future__ import annotations

import threading
import time

import pytest

from tests.adversarial.net_support import connect_from, good_run, start_server, token_env
from tests.support.p2p import write_token

pytestmark = pytest.mark.slow

ATTACKER_ADDRESSES = [f"127.0.0.{i}" for i in range(2, 10)]
SOCKETS_PER_ADDRESS = 10


class Slowloris:
    """Holds SOCKETS_PER_ADDRESS connections from each attacker address, trickling a frame header
    that announces a large hello one byte every ``interval`` seconds; reconnects when dropped."""

    def __init__(self, port: int, interval: float = 0.3) -> None:
        self.port = port
        self.interval = interval
        self.stop = threading.Event()
        self.connects = 0
        self.drops = 0
        self._lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self._hold, args=(addr,), daemon=True)
            for addr in ATTACKER_ADDRESSES
            for _ in range(SOCKETS_PER_ADDRESS)
        ]

    def __enter__(self) -> Slowloris:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(5)

    def _hold(self, addr: str) -> None:
        payload = b"\x00\x00\x10\x00" + b'{"type":"hello","proto":"ibdiag-p2p"' + b" " * 4000
        while not self.stop.is_set():
            try:
                s = connect_from(addr, self.port, timeout=2)
            except OSError:
                self.stop.wait(0.05)
                continue
            with self._lock:
                self.connects += 1
            try:
                for i in range(len(payload)):
                    if self.stop.wait(self.interval):
                        break
                    s.sendall(payload[i : i + 1])
            except OSError:
                with self._lock:
                    self.drops += 1
            finally:
                s.close()


def test_a_client_with_the_token_is_served_through_a_slowloris(ibdiag_exe, tmp_path):
    token = write_token(tmp_path / "token", "preauth-token")
    s = start_server(ibdiag_exe, "--token-file", str(token), "--timeout", "10")
    try:
        with Slowloris(s.port) as attack:
            time.sleep(2.0)  # every slot the attacker can get is taken and trickling
            assert attack.connects >= 16
            t0 = time.monotonic()
            good_run(
                ibdiag_exe, s.port, "--timeout", "5", env=token_env("preauth-token"), timeout=30
            )
            assert time.monotonic() - t0 < 15
            # and again, after the attacker had time to re-take what it lost
            time.sleep(1.0)
            good_run(
                ibdiag_exe, s.port, "--timeout", "5", env=token_env("preauth-token"), timeout=30
            )
        log = s.log.text()
        assert (
            "unauthenticated connections from 127.0.0." in log
        )  # the per-address cap refused some
        assert s.proc.poll() is None
    finally:
        s.stop()


def test_the_handshake_deadline_counts_the_whole_handshake(ibdiag_exe, tmp_path):
    """One byte every 0.3 s is progress, but the handshake as a whole gets one deadline."""
    token = write_token(tmp_path / "token", "preauth-token")
    s = start_server(ibdiag_exe, "--token-file", str(token), "--timeout", "30")
    try:
        sock = connect_from("127.0.0.2", s.port)
        t0 = time.monotonic()
        payload = b"\x00\x00\x10\x00" + b'{"type":"hello"' + b" " * 200
        closed_after = None
        for i in range(len(payload)):
            time.sleep(0.3)
            try:
                sock.sendall(payload[i : i + 1])
            except OSError:
                closed_after = time.monotonic() - t0
                break
        sock.close()
        assert closed_after is not None, "the trickling connection was never dropped"
        assert (
            closed_after < 5.0 + 2.0
        )  # the handshake deadline (5 s), not --timeout (30 s) per wait
        s.log.wait_for(
            r"127\.0\.0\.2:\d+: dropped: no answer from the client within 5 s while waiting for the client's hello"
        )
    finally:
        s.stop()


def test_admission_policy():
    from ibdiag.bench.p2p.control.admission import Admission

    a = Admission(per_source=2, total=4)
    assert a.admit("a1", "A").admitted and a.admit("a2", "A").admitted
    refused = a.admit("a3", "A")
    assert not refused.admitted and "2 unauthenticated connections from A already" in refused.reason
    assert a.admit("b1", "B").admitted and a.admit("b2", "B").admitted and len(a) == 4
    # full: a newcomer from an uncrowded address displaces the oldest of the most crowded one
    v = a.admit("c1", "C")
    assert v.admitted and v.displaced == "a1" and a.count("A") == 1 and len(a) == 4
    v = a.admit("c2", "C")
    assert v.admitted and v.displaced == "b1"  # A 1, B 1, C 2
    v = a.admit("d1", "D")
    assert v.admitted and v.displaced == "c1"  # A 1, B 1, C 1, D 1
    # a newcomer from an address as crowded as any is refused, and displaces nobody
    v = a.admit("a4", "A")
    assert not v.admitted and v.displaced is None and "none from a more crowded address" in v.reason
    a.release("a2")
    a.release("a2")  # twice: ignored
    assert a.count("A") == 0 and a.admit("a5", "A").admitted
