"""Selective signalling on the real stack: with ``sq_sig_all = 0`` only every ``cq_mod``-th WRITE completes.

Two real RC queue pairs on rxe0 in this process, connected to each other (rxe loops the traffic
back); the bandwidth loop runs unchanged, and every completion it polls is counted.
"""

from __future__ import annotations

import random

import pytest

from ibdiag.bench import verbs
from ibdiag.bench.buffers import allocate
from ibdiag.bench.p2p.rdma import plan_connection
from ibdiag.bench.p2p.rdma_loops import signal_interval, write_bw
from ibdiag.bench.p2p.session import select_rdma
from tests.rdmavm.guest.conftest import DEVICE

SIZE = 4096


class CountingCompletions:
    """The real endpoint, with every work request it posts and every completion its ``poll`` returns
    counted (nothing else changes: all other attributes are the endpoint's own)."""

    def __init__(self, ep: verbs.RdmaEndpoint) -> None:
        self.ep = ep
        self.cqes = 0
        self.posted = 0

    def __getattr__(self, name: str):
        return getattr(self.ep, name)

    def post(self, wr, wr_id: int) -> None:
        self.posted += 1  # one ibv_post_send of one work request
        self.ep.post(wr, wr_id)

    def poll(self, max_entries: int = 16) -> list[int]:
        done = self.ep.poll(max_entries)
        self.cqes += len(done)
        return done


@pytest.fixture
def qp_pair():
    sel = select_rdma("/", DEVICE, 1, None)
    bufs = [allocate(2 * SIZE), allocate(2 * SIZE)]
    eps = [verbs.RdmaEndpoint(sel.device, sel.port, b, send_offset=SIZE, tx_depth=32, gid=sel.gid, gid_index=sel.gid_index) for b in bufs]
    rng = random.Random(9)
    infos = [ep.local_info(rng.randrange(1 << 24)) for ep in eps]
    for me, other in ((0, 1), (1, 0)):
        plan = plan_connection(infos[me], infos[other], port_num=sel.port, gid_index=sel.gid_index, needed_bytes=SIZE)
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
    stats = write_bw(ep, SIZE, warmup=0, iters=iters, duration_s=None, tx_depth=tx_depth, timeout_s=10)
    assert stats.messages == iters == ep.posted
    # one completion per cq_mod WRITEs, plus the always-signalled last one when iters is not a multiple
    expected = iters // cq_mod + (1 if iters % cq_mod else 0)
    assert ep.cqes == expected, f"{ep.cqes} completions for {iters} WRITEs (sq_sig_all=1 would give {iters})"
    assert ep.cqes < iters
    # the bytes really arrived: the peer's receive half holds the sender's send half
    sender, receiver = qp_pair
    sender.view[SIZE : 2 * SIZE] = bytes(range(256)) * (SIZE // 256)
    write_bw(CountingCompletions(sender), SIZE, warmup=0, iters=1, duration_s=None, tx_depth=tx_depth, timeout_s=10)
    assert bytes(receiver.view[:SIZE]) == bytes(range(256)) * (SIZE // 256)
