"""ibdiag's own TCP data path: the ping-pong's busy-polling (and when a side gives it up), each stream's
figures, and what a server may report of them (real sockets on loopback)."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from ibdiag.bench.p2p.command import P2PRequest, run
from ibdiag.bench.p2p.control.protocol import ProtocolError
from ibdiag.bench.p2p.params import RunRequest
from ibdiag.bench.p2p.phase import check_stream_figures
from ibdiag.bench.p2p.tcp.latency import SPIN_WINDOW, Spin, ping, pong
from tests.support.p2p import server_thread


def test_a_side_whose_answers_are_already_there_keeps_spinning():
    """Every ping is in the socket before the ponger looks: each non-blocking receive finds it."""
    a, b = socket.socketpair()
    with a, b:
        n = 3 * SPIN_WINDOW
        a.sendall(b"x" * 8 * n)
        spin = Spin(50_000)
        pong(b, memoryview(bytearray(8)), n, peer="p", what="w", timeout_s=5.0, spin=spin)
        assert spin.spinning and spin.misses == 0
        assert a.recv(8 * n, socket.MSG_WAITALL) == b"x" * 8 * n


def test_a_side_whose_peer_answers_after_its_budget_stops_spinning():
    """A ponger that answers 2 ms late against a 100 µs budget: every receive runs out, and after one
    window the pinger blocks for the rest (the round trips still complete)."""
    a, b = socket.socketpair()
    n = 2 * SPIN_WINDOW

    def slow_ponger() -> None:
        for _ in range(n):
            data = b.recv(8, socket.MSG_WAITALL)
            time.sleep(0.002)
            b.sendall(data)

    t = threading.Thread(target=slow_ponger)
    t.start()
    with a, b:
        spin = Spin(100_000)
        samples = ping(
            a,
            memoryview(bytearray(8)),
            memoryview(bytearray(8)),
            n,
            peer="p",
            what="w",
            timeout_s=5.0,
            spin=spin,
        )
        t.join(10)
    assert not spin.spinning and len(samples) == n and min(samples) >= 2_000_000
    # no budget: blocking from the start, never a spin
    assert not Spin(0).spinning


def _doc(result) -> dict:
    return json.loads(json.dumps(result.report.data))


@pytest.mark.parametrize("budget", [None, 0, 1000])
def test_the_latency_row_says_how_each_side_waited(budget):
    req = RunRequest(
        transport="tcp", mode="lat", sizes=(8,), iters=300, warmup=5, busy_poll_us=budget
    )
    with server_thread() as (port, _, _):
        doc = _doc(run(P2PRequest(host="127.0.0.1", port=port, run_request=req, timeout_s=10.0)))
    (row,) = doc["results"]
    expected = 200 if budget is None else budget
    assert doc["busy_poll_us"] == expected
    assert set(row["lat_busy_poll"]) == {"client", "server"}
    if expected == 0:
        assert row["lat_busy_poll"] == {"client": False, "server": False}
        assert doc["so_busy_poll"] == {"client": None, "server": None}  # not asked
    else:
        assert set(doc["so_busy_poll"]) == {"client", "server"}
    assert row["lat_iters"] == 300 and row["lat_us"]["p50"] > 0


def test_several_streams_each_report_what_their_receiver_saw():
    req = RunRequest(transport="tcp", mode="bw", sizes=(65536,), iters=400, warmup=4, streams=3)
    with server_thread() as (port, _, _):
        doc = _doc(run(P2PRequest(host="127.0.0.1", port=port, run_request=req, timeout_s=10.0)))
    (row,) = doc["results"]
    each = row["per_stream"]
    assert len(each) == 3 and all(s["bytes"] == 400 * 65536 for s in each)
    assert sum(s["bytes"] for s in each) == row["iters"] * 65536
    assert all(0 < s["seconds"] <= row["elapsed_s"] + 1e-6 and s["bw_gbs"] > 0 for s in each)
    assert row["stream_senders"] == "processes"  # one forked sender per stream (tcp/senders.py)
    one = RunRequest(transport="tcp", mode="bw", sizes=(65536,), iters=50, warmup=2)
    with server_thread() as (port, _, _):
        doc = _doc(run(P2PRequest(host="127.0.0.1", port=port, run_request=one, timeout_s=10.0)))
    assert "per_stream" not in doc["results"][0]  # one stream: the row is unchanged
    assert "stream_senders" not in doc["results"][0]
    both = RunRequest(
        transport="tcp", mode="bw", sizes=(4096,), iters=100, warmup=2, streams=2, bidir=True
    )
    with server_thread() as (port, _, _):
        doc = _doc(run(P2PRequest(host="127.0.0.1", port=port, run_request=both, timeout_s=10.0)))
    (row,) = doc["results"]
    assert row["stream_senders"] == "threads" and len(row["per_stream"]) == 4  # 2 each way


@pytest.mark.parametrize(
    "streams,text",
    [
        ([[10, 0.5]], "not one entry per stream"),
        ([[10, 0.5], [11, 0.5]], "stream 2 received 11 messages, this client sent 10"),
        ([[10, 0.5], [10, 99.0]], "longer than the"),
        ([[10, 0.5], "x"], "is not [messages, seconds]"),
        ([[10, 0.5], [-1, 0.5]], "is not a count"),
    ],
)
def test_impossible_stream_figures_from_a_server_are_refused(streams, text):
    with pytest.raises(ProtocolError, match=r"impossible .*" + text.replace("[", r"\[")):
        check_stream_figures(
            {"rx_streams": streams}, size=4096, sent=[10, 10], span_s=2.0, peer="srv:1"
        )
    assert check_stream_figures({}, size=4096, sent=[10, 10], span_s=2.0, peer="srv:1") == ()
