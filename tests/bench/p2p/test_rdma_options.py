"""perftest's options in ``bench p2p --transport rdma`` without an adapter: --verb read/send, --qps,
--bidir, --inline, --tclass/--sl — validation at the boundary (command line and wire), what the
peers exchange, the JSON, the pyverbs objects, and the loops' logic.

The loops run against ``FakeVerbsEndpoint`` (a named stand-in for ibdiag.bench.p2p.rdma.endpoint.RdmaEndpoint:
this machine has no RDMA device). It only shows that posting, signalling, receiving and checking
are right; that the verbs move data on a real stack is shown in the Soft-RoCE guest
(tests/rdmavm/guest/test_rdma_options.py).
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest

from ibdiag.bench.p2p.control.protocol import ProtocolError
from ibdiag.bench.p2p.fields import RequestError
from ibdiag.bench.p2p.params import AUTO_INLINE_LAT, RunRequest
from ibdiag.bench.p2p.rdma.latency import read_lat, send_lat
from ibdiag.bench.p2p.rdma.loops import (
    Receiver,
    check_pattern,
    fill_pattern,
    pattern,
    serve_receives,
    signal_interval,
    write_bw,
)
from ibdiag.bench.p2p.rdma.plan import QpInfo, check_server_run, plan_connection, run_options
from ibdiag.bench.results.p2p_meta import P2PSetup, RdmaEnd, RdmaPath
from ibdiag.errors import CannotRunError, PeerTimeoutError
from ibdiag.jsonread import Fields
from tests.bench.p2p.test_rdma import ROCE_A, ROCE_B


class FakeVerbsEndpoint:
    """STAND-IN for :class:`ibdiag.bench.p2p.rdma.endpoint.RdmaEndpoint` with several queue pairs — no RDMA adapter here.

    A posted WRITE copies this side's send half into ``peer``'s receive half, a READ copies ``peer``'s
    send half into this side's receive half, a SEND consumes one receive ``peer`` posted on the same
    queue pair (none posted: it waits, as a real sender retries after RNR NAKs). A signalled work
    request completes with every earlier one of its queue pair. It enforces ``tx_depth`` per queue pair.
    """

    def __init__(self, half: int, tx_depth: int, lanes: int = 1) -> None:
        self.view = memoryview(bytearray(2 * half))
        self.send_offset = half
        self.tx_depth = tx_depth
        self.lanes = lanes
        self.peer: FakeVerbsEndpoint | None = None
        self.posted: list[
            tuple[str, int, int, bool, bool]
        ] = []  # verb, lane, wr_id, signalled, inline
        self.outstanding = [0] * lanes
        self.max_outstanding = [0] * lanes
        self._unsignalled: list[list[int]] = [[] for _ in range(lanes)]
        self._completions: list[int] = []
        self._recvs: list[list[int]] = [[] for _ in range(lanes)]
        self._recv_done: list[tuple[int, int]] = []
        self._lock = threading.Lock()

    def prepare(
        self, verb: str, length: int, *, signaled: bool, lane: int = 0, inline: bool = False
    ):
        return (verb, length, signaled, lane, inline, 1)

    def prepare_chain(
        self, verb: str, length: int, count: int, *, lane: int = 0, inline: bool = False
    ):
        """A post list: ``count`` requests, only the last signalled, the chain's id on the last."""
        return (verb, length, True, lane, inline, count)

    post_calls = 0

    def post(self, wr, wr_id: int) -> None:
        verb, length, signaled, lane, inline, count = wr
        self.post_calls += 1
        for k in range(count):
            self._post_one(
                (verb, length, signaled and k == count - 1, lane, inline),
                wr_id - (count - 1 - k) * self.lanes,
            )

    def _post_one(self, wr, wr_id: int) -> None:
        verb, length, signaled, lane, inline = wr
        assert wr_id % self.lanes == lane, "wr_id must carry its queue pair"
        with self._lock:
            self.outstanding[lane] += 1
            if self.outstanding[lane] > self.tx_depth:
                raise AssertionError(
                    f"send queue {lane} overflow: {self.outstanding[lane]} > {self.tx_depth}"
                )
            self.max_outstanding[lane] = max(self.max_outstanding[lane], self.outstanding[lane])
            self.posted.append((verb, lane, wr_id, signaled, inline))
            peer = self.peer
            if peer is not None:
                if verb == "write":
                    peer.view[0:length] = self.view[self.send_offset : self.send_offset + length]
                elif verb == "read":
                    self.view[0:length] = peer.view[peer.send_offset : peer.send_offset + length]
                else:
                    peer._deliver(
                        lane, bytes(self.view[self.send_offset : self.send_offset + length])
                    )
            self._unsignalled[lane].append(wr_id)
            if signaled:
                self.outstanding[lane] -= len(self._unsignalled[lane])
                self._unsignalled[lane] = []
                self._completions.append(wr_id)

    def _deliver(self, lane: int, data: bytes) -> None:
        # No receive posted: a real sender gets RNR NAKs and retries (rnr_retry 7 = forever); here it waits.
        deadline = time.monotonic() + 5
        while True:
            with self._lock:
                if self._recvs[lane]:
                    wr_id = self._recvs[lane].pop(0)
                    self.view[0 : len(data)] = data
                    self._recv_done.append((wr_id, len(data)))
                    return
            if time.monotonic() > deadline:
                raise AssertionError(f"SEND on queue pair {lane}: no receive posted for 5 s")
            time.sleep(0)

    def poll(self, max_entries: int = 16) -> list[int]:
        with self._lock:
            done = self._completions[:max_entries]
            del self._completions[: len(done)]
            return done

    recv_posts = 0

    def post_recv(self, lane: int, wr_id: int, count: int = 1) -> None:
        with self._lock:
            self.recv_posts += 1
            self._recvs[lane].extend([wr_id] * count)

    def poll_recv(self, max_entries: int = 16) -> list[tuple[int, int]]:
        with self._lock:
            done = self._recv_done[:max_entries]
            del self._recv_done[: len(done)]
            return done


def _pair(half: int, tx_depth: int, lanes: int = 1) -> tuple[FakeVerbsEndpoint, FakeVerbsEndpoint]:
    a, b = FakeVerbsEndpoint(half, tx_depth, lanes), FakeVerbsEndpoint(half, tx_depth, lanes)
    a.peer, b.peer = b, a
    return a, b


# --- the loops ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("lanes,iters", [(4, 1000), (3, 1001), (8, 5)])
def test_several_queue_pairs_share_the_messages_each_within_its_depth(lanes, iters):
    a, _ = _pair(4096, 16, lanes)
    stats = write_bw(
        a, 4096, warmup=0, iters=iters, duration_s=None, tx_depth=16, timeout_s=5, lanes=lanes
    )
    assert stats.messages == iters and stats.bytes == iters * 4096
    per_lane = [[w for _, k, w, _, _ in a.posted if k == lane] for lane in range(lanes)]
    assert sorted(len(p) for p in per_lane) == sorted(
        iters // lanes + (1 if k < iters % lanes else 0) for k in range(lanes)
    )
    cq_mod = signal_interval(16, 4096)
    for lane, ids in enumerate(per_lane):
        seqs = [w // lanes for w in ids]
        assert seqs == list(range(len(ids)))  # each lane numbers its own requests
        signalled = [w // lanes for v, k, w, s, _ in a.posted if k == lane and s]
        if ids:
            assert signalled[-1] == len(ids) - 1  # every lane's last request asks for a completion
            assert all((s + 1) % cq_mod == 0 for s in signalled[:-1])
    assert max(a.max_outstanding) <= 16 and a.outstanding == [0] * lanes


@pytest.mark.parametrize("verb", ["write", "read", "send"])
def test_every_verb_posts_chains_one_per_signalled_request_on_each_queue_pair(verb):
    lanes, iters, tx_depth = 3, 301, 16
    a, b = _pair(4096, tx_depth, lanes)
    rx = Receiver(b, lanes, iters) if verb == "send" else None
    stats = write_bw(
        a,
        64,
        warmup=0,
        iters=iters,
        duration_s=None,
        tx_depth=tx_depth,
        timeout_s=5,
        verb=verb,
        lanes=lanes,
        idle=None,
    )
    assert stats.messages == iters and len(a.posted) == iters and {p[0] for p in a.posted} == {verb}
    cq_mod = signal_interval(tx_depth, 64)
    per_lane = [iters // lanes + (1 if k < iters % lanes else 0) for k in range(lanes)]
    assert (
        a.post_calls == sum(-(-c // cq_mod) for c in per_lane) == sum(1 for p in a.posted if p[3])
    )
    assert max(a.max_outstanding) <= tx_depth and a.outstanding == [0] * lanes
    if rx is not None:
        assert rx.drain() == min(iters, 32)  # one poll returns up to POLL_BATCH receives ...
        # ... and re-posts them as one post list per queue pair they came on (not 32 ibv_post_recv calls)
        assert lanes < b.recv_posts <= lanes + lanes


def test_duration_with_several_queue_pairs_ends_each_on_a_signalled_request():
    a, _ = _pair(64, 8, 3)
    stats = write_bw(a, 64, warmup=4, iters=None, duration_s=0.05, tx_depth=8, timeout_s=5, lanes=3)
    assert stats.messages > 0 and a.outstanding == [0, 0, 0]
    for lane in range(3):
        mine = [p for p in a.posted if p[1] == lane]
        assert mine[-1][3] is True


def test_write_read_and_send_move_the_pattern_and_a_changed_byte_is_caught():
    size = 10_000
    a, b = _pair(16384, 8)
    fill_pattern(a.view, a.send_offset, size, "c2s")
    write_bw(a, size, warmup=2, iters=20, duration_s=None, tx_depth=8, timeout_s=5)
    assert check_pattern(b.view, 0, size, "c2s")  # WRITE: client -> server
    fill_pattern(b.view, b.send_offset, size, "s2c")
    a.view[0:size] = bytes(size)
    write_bw(a, size, warmup=0, iters=20, duration_s=None, tx_depth=8, timeout_s=5, verb="read")
    assert check_pattern(a.view, 0, size, "s2c")  # READ: server -> client
    assert {p[0] for p in a.posted} == {"write", "read"}
    a.view[1234] ^= 0xFF
    assert not check_pattern(a.view, 0, size, "s2c")
    assert pattern(size, "c2s") != pattern(size, "s2c") and len(pattern(5, "c2s")) == 5


def test_send_bandwidth_against_posted_receives_counts_every_message():
    a, b = _pair(8192, 16, 2)
    rx = Receiver(b, 2, 64)
    done = threading.Event()
    errors = []

    def receiver() -> None:
        try:
            serve_receives(rx, lambda: 10 + 500 if done.is_set() else None, timeout_s=5)
        except Exception as e:
            errors.append(e)

    t = threading.Thread(target=receiver)
    t.start()
    fill_pattern(a.view, a.send_offset, 4096, "c2s")
    stats = write_bw(
        a,
        4096,
        warmup=10,
        iters=500,
        duration_s=None,
        tx_depth=16,
        timeout_s=5,
        verb="send",
        lanes=2,
        idle=None,
    )
    done.set()
    t.join(5)
    assert not errors and stats.messages == 500
    assert rx.received == 510 and rx.bytes == 510 * 4096
    assert check_pattern(b.view, 0, 4096, "c2s")


def test_receives_time_out_when_nothing_arrives():
    _, b = _pair(64, 4)
    rx = Receiver(b, 1, 4)
    with pytest.raises(PeerTimeoutError, match="no RDMA SEND arrived"):
        serve_receives(rx, lambda: 5, timeout_s=0.2)


def test_send_latency_ping_pong_between_two_threads(fast_gil_handover):
    a, b = _pair(1024, 4)
    rxa, rxb = Receiver(a, 1, 2), Receiver(b, 1, 2)
    errors = []

    def responder() -> None:
        try:
            send_lat(b, rxb, 64, 0, 105, initiator=False, timeout_s=5, inline=True)
        except Exception as e:
            errors.append(e)

    t = threading.Thread(target=responder)
    t.start()
    warm = send_lat(a, rxa, 64, 0, 5, initiator=True, timeout_s=5, inline=True)
    samples = send_lat(a, rxa, 64, 5, 100, initiator=True, timeout_s=5, inline=True)
    t.join(5)
    assert not errors and len(warm) == 5 and len(samples) == 100 and all(s > 0 for s in samples)
    assert rxa.received == rxb.received == 105
    assert all(p[0] == "send" and p[4] for p in a.posted)  # inline SENDs


def test_read_latency_reports_the_whole_read():
    a, _ = _pair(256, 4)
    samples = read_lat(a, 128, 0, 20, timeout_s=5)
    assert len(samples) == 20 and all(
        s > 0 and s % 2 == 0 for s in samples
    )  # x2: one-way stats = the READ's time
    assert [p[0] for p in a.posted] == ["read"] * 20 and all(p[3] for p in a.posted)


@pytest.fixture
def fast_gil_handover():
    import sys

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(old)


# --- the request: one set of bounds for the command line and the wire ----------------------------------


def _rdma(**kw) -> RunRequest:
    return RunRequest(transport="rdma", mode="both", sizes=(8, 4096), **kw)


@pytest.mark.parametrize(
    "kw,text",
    [
        ({"qps": 0}, "--qps 0"),
        ({"qps": 65}, "--qps 65"),
        ({"qps": True}, "--qps must be a whole number"),
        ({"verb": "atomic"}, "--verb 'atomic'"),
        ({"inline": -1}, "--inline -1"),
        ({"inline": 5000}, "--inline 5000"),
        ({"tclass": 256}, "--tclass 256"),
        ({"sl": 16}, "--sl 16"),
        ({"streams": 2}, "--streams applies to --transport tcp"),
        ({"verb": "read", "inline": 64}, "--inline does not apply to --verb read"),
    ],
)
def test_rdma_options_are_checked(kw, text):
    with pytest.raises(RequestError) as e:
        _rdma(**kw)
    assert text in e.value.message and int(e.value.exit_status) == 2


def test_rdma_options_with_tcp_are_refused():
    with pytest.raises(RequestError, match="--qps, --sl apply to --transport rdma"):
        RunRequest(transport="tcp", mode="bw", sizes=(8,), qps=2, sl=1)
    RunRequest(transport="tcp", mode="bw", sizes=(8,), bidir=True)  # --bidir is both transports'


def test_request_round_trips_and_an_old_client_means_write_on_one_qp():
    req = _rdma(verb="send", qps=4, inline=64, tclass=106, sl=3, bidir=True)
    assert RunRequest.from_json(req.to_json()) == req
    old = {
        k: v for k, v in req.to_json().items() if k not in ("verb", "qps", "inline", "tclass", "sl")
    }
    back = RunRequest.from_json(old)
    assert (back.verb, back.qps, back.inline, back.tclass, back.sl) == ("write", 1, None, 0, 0)
    for key, bad in (("verb", "atomic"), ("qps", 0), ("qps", "4"), ("tclass", -1), ("inline", 1.5)):
        with pytest.raises(ValueError):
            RunRequest.from_json({**req.to_json(), key: bad})
    assert "rdma SEND 4 QPs tclass 106 sl 3 bw+lat" in req.describe()


def test_inline_sizes():
    auto = _rdma()
    assert auto.inline_cap == AUTO_INLINE_LAT
    assert (
        auto.inline_for(8, "lat", 256) == 8
        and auto.inline_for(220, "lat", 256) == 220
        and auto.inline_for(221, "lat", 256) == 0
    )
    assert auto.inline_for(8, "lat", 0) == 0  # the device (or the fallback) gives none
    assert auto.inline_for(8, "bw", 256) == 0  # bandwidth posts from the MR, like perftest
    explicit = _rdma(inline=64)
    assert explicit.inline_for(64, "bw", 256) == 64 and explicit.inline_for(65, "lat", 256) == 0
    assert _rdma(inline=0).inline_for(8, "lat", 256) == 0 and _rdma(inline=0).inline_cap == 0
    assert _rdma(verb="read").inline_cap == 0 and _rdma(verb="read").inline_for(8, "lat", 256) == 0
    assert RunRequest(transport="rdma", mode="bw", sizes=(8,)).inline_cap == 0


# --- what the peers exchange and the plan ---------------------------------------------------------------


def test_queue_pair_numbers_cross_and_each_lane_targets_its_peer():
    a = replace(ROCE_A, qpns=(0x1A2, 0x1A3, 0x1A4))
    b = replace(ROCE_B, qpns=(0x3B4, 0x3B5, 0x3B6))
    assert QpInfo.from_json(a.to_json()) == a and a.to_json()["qpns"] == [0x1A2, 0x1A3, 0x1A4]
    assert ROCE_A.to_json()["qpns"] == [0x1A2] and ROCE_A.all_qpns == (0x1A2,)
    plans = [
        plan_connection(
            a,
            b,
            port_num=1,
            gid_index=3,
            needed_bytes=4096,
            lane=k,
            traffic_class=106,
            sl=3,
            rd_atomic=16,
            remote_read=True,
        )
        for k in range(3)
    ]
    assert [p.dest_qp_num for p in plans] == [0x3B4, 0x3B5, 0x3B6]
    assert {
        (p.traffic_class, p.sl, p.max_rd_atomic, p.max_dest_rd_atomic, p.remote_read) for p in plans
    } == {(106, 3, 16, 16, True)}
    with pytest.raises(CannotRunError, match="1 queue pair"):
        plan_connection(a, ROCE_B, port_num=1, gid_index=3, needed_bytes=4096, lane=1)
    for bad in ([0x3B4] * 65, [0x3B5, 1], [2**24], "x", [True]):
        with pytest.raises(ValueError):
            QpInfo.from_json({**ROCE_B.to_json(), "qpns": bad})


def test_client_checks_the_server_runs_what_it_asked():
    req = _rdma(verb="read", qps=2)
    check_server_run({"rdma_run": run_options(req)}, req, "srv:1")
    for ready in (
        {},
        {"rdma_run": {**run_options(req), "verb": "write"}},
        {"rdma_run": {**run_options(req), "qps": 1}},
    ):
        with pytest.raises(ProtocolError, match="does not run RDMA the way this client asked"):
            check_server_run(ready, req, "srv:1")


def test_rdma_options_in_the_result_json():
    end = RdmaEnd(
        "rxe0", 1, 1, None, "auto", "Ethernet", 1024, relaxed_ordering=True, max_inline=220
    )
    setup = P2PSetup(
        peer="n:1",
        rdma=RdmaPath(
            end,
            replace(end, relaxed_ordering=False),
            1024,
            128,
            verb="send",
            qps=4,
            inline=None,
            tclass=106,
            sl=3,
        ),
    )
    doc = setup.to_json("rdma")
    assert (doc["verb"], doc["qps"], doc["inline"], doc["tclass"], doc["sl"]) == (
        "send",
        4,
        "auto",
        106,
        3,
    )
    assert doc["client"]["relaxed_ordering"] is True and doc["server"]["max_inline"] == 220
    assert P2PSetup.read(Fields(doc, "doc")).rdma == setup.rdma
    explicit = P2PSetup.read(Fields({**doc, "inline": 64}, "doc")).rdma
    assert explicit is not None and explicit.inline == 64
    with pytest.raises(ValueError):
        P2PSetup.read(Fields({**doc, "verb": "atomic"}, "doc"))


# --- the pyverbs objects (real pyverbs, no device) ---------------------------------------------------------


def _pv():
    from ibdiag.bench.p2p.rdma import verbs
    from ibdiag.errors import CannotRunError as Missing

    try:
        return verbs, verbs.import_pyverbs()
    except Missing as e:
        pytest.skip(str(e))


def test_read_send_and_inline_work_requests():
    verbs, pv = _pv()
    e = pv.enums
    read = verbs.build_send_wr(
        pv, "read", addr=0x1000, length=4096, lkey=1, remote_addr=0x9000, rkey=2, signaled=True
    )
    send = verbs.build_send_wr(
        pv, "send", addr=0x1000, length=64, lkey=1, signaled=False, inline=True
    )
    write = verbs.build_send_wr(
        pv,
        "write",
        addr=0x1000,
        length=64,
        lkey=1,
        remote_addr=0x9000,
        rkey=2,
        signaled=True,
        inline=True,
    )
    assert read.opcode == e.IBV_WR_RDMA_READ and read.send_flags == e.IBV_SEND_SIGNALED
    assert send.opcode == e.IBV_WR_SEND and send.send_flags == e.IBV_SEND_INLINE
    assert (
        write.opcode == e.IBV_WR_RDMA_WRITE
        and write.send_flags == e.IBV_SEND_SIGNALED | e.IBV_SEND_INLINE
    )
    assert (
        verbs.build_send_wr(
            pv, "read", addr=0, length=8, lkey=1, signaled=False, inline=True
        ).send_flags
        == 0
    )  # READ is never inline


def test_queue_pair_attributes_carry_tclass_sl_read_access_inline_and_receives():
    verbs, pv = _pv()
    from tests.bench.p2p.test_verbs import PLAN

    e = pv.enums
    attr = verbs.build_qp_attr(
        replace(
            PLAN, traffic_class=106, sl=3, max_rd_atomic=16, max_dest_rd_atomic=16, remote_read=True
        )
    )
    assert attr.ah_attr.traffic_class == 106 and attr.ah_attr.sl == 3
    assert (
        attr.qp_access_flags
        == e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
    )
    assert attr.max_rd_atomic == 16 and attr.max_dest_rd_atomic == 16
    init = verbs.build_qp_init_attr(pv, None, 64, rx_depth=512, max_inline=220)
    assert init.cap.max_inline_data == 220 and init.cap.max_recv_wr == 512 and init.sq_sig_all == 0
    access = verbs.mr_access(pv, relaxed=True)
    assert access & e.IBV_ACCESS_REMOTE_READ and access & e.IBV_ACCESS_REMOTE_WRITE
    if hasattr(e, "IBV_ACCESS_RELAXED_ORDERING"):
        assert access & e.IBV_ACCESS_RELAXED_ORDERING
    assert not verbs.mr_access(pv, relaxed=False) & getattr(e, "IBV_ACCESS_RELAXED_ORDERING", 0)
