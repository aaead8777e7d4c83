"""Selective signalling and post lists on the real stack: with ``sq_sig_all = 0`` only every
``cq_mod``-th WRITE completes, and the bandwidth loop makes one ``ibv_post_send`` per chain of them.

Two real RC queue pairs on rxe0 in this process, connected to each other (rxe loops the traffic
back); the loops run unchanged, and every post and every completion they make is counted.
"""

from __future__ import annotations

import random
import sys
import threading

import pytest

from ibdiag.bench.buffers import allocate
from ibdiag.bench.p2p.rdma import verbs
from ibdiag.bench.p2p.rdma.device import select_rdma
from ibdiag.bench.p2p.rdma.endpoint import RdmaEndpoint
from ibdiag.bench.p2p.rdma.latency import (
    lat_signal_interval,
    write_lat_initiator,
    write_lat_responder,
)
from ibdiag.bench.p2p.rdma.loops import reset_areas, signal_interval, write_bw
from ibdiag.bench.p2p.rdma.plan import plan_connection
from ibdiag.node.sysfs import SysfsRoot
from tests.rdmavm.guest.conftest import DEVICE

SIZE = 4096


class CountingCompletions:
    """The real endpoint, with every work request it posts and every completion its ``poll`` returns
    counted (nothing else changes: all other attributes are the endpoint's own)."""

    def __init__(self, ep: RdmaEndpoint) -> None:
        self.ep = ep
        self.cqes = 0
        self.posted = 0
        self.post_calls = 0

    def __getattr__(self, name: str):
        return getattr(self.ep, name)

    def post(self, wr: verbs.PostList, wr_id: int) -> None:
        self.post_calls += 1  # one ibv_post_send ...
        self.posted += wr.count  # ... of a post list of this many work requests
        self.ep.post(wr, wr_id)

    def poster(self, wr: verbs.PostList):
        bare = self.ep.poster(wr)  # the latency loops' bare ibv_post_send, counted the same way

        def counted() -> None:
            self.post_calls += 1
            self.posted += wr.count
            bare()

        return counted

    def poll(self, max_entries: int = 16) -> list[int]:
        done = self.ep.poll(max_entries)
        self.cqes += len(done)
        return done


@pytest.fixture
def qp_pair():
    sel = select_rdma(SysfsRoot("/"), DEVICE, 1, None)
    bufs = [allocate(2 * SIZE), allocate(2 * SIZE)]
    eps = [
        RdmaEndpoint(
            sel.device,
            sel.port,
            b,
            send_offset=SIZE,
            tx_depth=32,
            gid=sel.gid,
            gid_index=sel.gid_index,
        )
        for b in bufs
    ]
    rng = random.Random(9)
    infos = [ep.local_info(rng.randrange(1 << 24)) for ep in eps]
    for me, other in ((0, 1), (1, 0)):
        plan = plan_connection(
            infos[me], infos[other], port_num=sel.port, gid_index=sel.gid_index, needed_bytes=SIZE
        )
        eps[me].connect(plan, infos[other])
    yield eps
    for ep in eps:
        ep.close()
    for b in bufs:
        b.close()


def test_the_kernel_qp_has_sq_sig_all_0(qp_pair):
    """ibv_query_qp on the QP the kernel created: the init attributes it reports."""
    pv = verbs.import_pyverbs()
    _attr, init = qp_pair[0].qp.query(pv.enums.IBV_QP_STATE | pv.enums.IBV_QP_CAP)
    assert init.sq_sig_all == 0


@pytest.mark.parametrize("tx_depth,iters", [(32, 256), (8, 100)])
def test_completions_arrive_every_cq_mod_writes(qp_pair, tx_depth, iters):
    ep = CountingCompletions(qp_pair[0])
    cq_mod = signal_interval(tx_depth, SIZE)
    stats = write_bw(
        ep, SIZE, warmup=0, iters=iters, duration_s=None, tx_depth=tx_depth, timeout_s=10
    )
    assert stats.messages == iters == ep.posted
    # one completion per cq_mod WRITEs, plus the always-signalled last one when iters is not a multiple
    expected = iters // cq_mod + (1 if iters % cq_mod else 0)
    assert ep.cqes == expected, (
        f"{ep.cqes} completions for {iters} WRITEs (sq_sig_all=1 would give {iters})"
    )
    assert ep.cqes < iters
    assert (
        ep.post_calls == expected
    )  # one ibv_post_send per chain, the chain's last WRITE signalled
    # the bytes really arrived: the peer's receive half holds the sender's send half
    sender, receiver = qp_pair
    sender.view[SIZE : 2 * SIZE] = bytes(range(256)) * (SIZE // 256)
    write_bw(
        CountingCompletions(sender),
        SIZE,
        warmup=0,
        iters=1,
        duration_s=None,
        tx_depth=tx_depth,
        timeout_s=10,
    )
    assert bytes(receiver.view[:SIZE]) == bytes(range(256)) * (SIZE // 256)


def test_latency_ping_pong_completes_every_nth_write(qp_pair):
    """The WRITE ping-pong on two real QPs (one thread each): only every lat_signal_interval-th WRITE
    of each side completes, and the marker bytes cross over RDMA."""
    n, tx_depth = 40, 8
    a, b = (CountingCompletions(ep) for ep in qp_pair)
    for ep in qp_pair:
        reset_areas(ep.view, 8, SIZE)
    every = lat_signal_interval(tx_depth)
    assert (
        every == 4 and qp_pair[0].tx_depth == 32
    )  # the fixture's QPs are deeper than the interval asked for
    errors = []

    def responder() -> None:
        try:
            write_lat_responder(b, 8, 0, n, timeout_s=20, signal_every=every)
        except Exception as e:
            errors.append(e)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # both ends spin on memory in one process: hand the GIL over often
    try:
        t = threading.Thread(target=responder)
        t.start()
        samples = write_lat_initiator(a, 8, 0, n, timeout_s=20, signal_every=every)
        t.join(30)
    finally:
        sys.setswitchinterval(old)
    assert not errors and len(samples) == n and all(s > 0 for s in samples)
    assert a.posted == b.posted == n
    assert (
        a.cqes == b.cqes == n // every
    )  # 40 WRITEs, every 4th signalled (the 40th is one of them)
