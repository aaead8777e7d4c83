"""The RDMA path without an adapter: device/GID choice from sysfs fixtures, QP details exchanged
over a real TCP control channel, the connection plan, and the WRITE loops' logic.

This machine has no RDMA device; the loops run against ``FakeRdmaEndpoint`` (a named stand-in),
which only shows that the posting/signalling/polling logic is right — not that RDMA works.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from dataclasses import replace

import pytest

from ibdiag.bench.p2p.control.protocol import Channel
from ibdiag.bench.p2p.rdma.device import choose_device, choose_gid, ensure_port_active
from ibdiag.bench.p2p.rdma.latency import (
    lat_signal_interval,
    marker,
    write_lat_initiator,
    write_lat_responder,
)
from ibdiag.bench.p2p.rdma.loops import reset_areas, signal_interval, write_bw
from ibdiag.bench.p2p.rdma.plan import ConnectPlan, QpInfo, plan_connection
from ibdiag.errors import CannotRunError, PeerTimeoutError, UsageError
from ibdiag.node.discover import list_adapters, read_port
from ibdiag.node.sysfs import SysfsRoot
from tests.support.p2p import FakeRdmaEndpoint
from tests.sysfsgen.builder import Tree


def _ports(root, port=1):
    sysfs = SysfsRoot(root)
    return [read_port(sysfs, name, port) for name in list_adapters(sysfs)]


# --- device and GID choice from sysfs fixtures ------------------------------------------------------


def test_roce_gid_auto_picks_ipv4_mapped_roce_v2(fixture_root):
    port = read_port(SysfsRoot(fixture_root("roce-node")), "mlx5_0", 1)
    choice = choose_gid(port)
    # the table: 0 v1 link-local, 1 v2 link-local, 2 v1 IPv4-mapped, 3 v2 IPv4-mapped (10.0.1.5)
    assert choice.index == 3
    assert choice.gid == "0000:0000:0000:0000:0000:ffff:0a00:0105"
    assert choice.type == "RoCE v2"
    assert "IPv4-mapped" in choice.reason


def test_roce_gid_override_and_bad_index(fixture_root):
    port = read_port(SysfsRoot(fixture_root("roce-node")), "mlx5_1", 1)
    assert choose_gid(port, 1).index == 1
    assert choose_gid(port, 1).type == "RoCE v2"
    with pytest.raises(UsageError) as e:
        choose_gid(port, 7)
    assert "populated GID indices: 0, 1, 2, 3" in (e.value.hint or "")


def test_roce_gid_prefers_v2_link_local_over_v1_ipv4(tmp_path):
    """Without an IPv4 address on the netdev, RoCE v2 (link-local) still beats RoCE v1."""
    t = Tree(tmp_path)
    base = "class/infiniband/mlx5_0/ports/1"
    for name, value in (
        ("state", "4: ACTIVE"),
        ("phys_state", "5: LinkUp"),
        ("rate", "200 Gb/sec (4X HDR)"),
        ("link_layer", "Ethernet"),
    ):
        t.file(f"{base}/{name}", value)
    gids = [
        ("fe80:0000:0000:0000:0e42:a1ff:fe00:0001", "IB/RoCE v1"),
        ("fe80:0000:0000:0000:0e42:a1ff:fe00:0001", "RoCE v2"),
        ("0000:0000:0000:0000:0000:ffff:0a00:0001", "IB/RoCE v1"),
        ("2001:0db8:0000:0000:0000:0000:0000:0005", "RoCE v2"),
    ]
    for i, (gid, gtype) in enumerate(gids):
        t.file(f"{base}/gids/{i}", gid)
        t.file(f"{base}/gid_attrs/types/{i}", gtype)
        t.file(f"{base}/gid_attrs/ndevs/{i}", "eth0")
    port = read_port(SysfsRoot(tmp_path), "mlx5_0", 1)
    # global IPv6 RoCE v2 (3) beats link-local RoCE v2 (1); both beat v1
    assert choose_gid(port).index == 3


def test_infiniband_uses_lid_routing_without_gid(fixture_root):
    port = read_port(SysfsRoot(fixture_root("dgx-h100")), "mlx5_0", 1)
    assert port.link_layer == "InfiniBand"
    choice = choose_gid(port)
    assert choice.index is None and choice.gid is None
    assert choose_gid(port, 0).index == 0  # --gid-index forces a GRH


def test_roce_port_without_gids_cannot_run(tmp_path):
    t = Tree(tmp_path)
    base = "class/infiniband/rxe0/ports/1"
    t.file(f"{base}/state", "4: ACTIVE")
    t.file(f"{base}/link_layer", "Ethernet")
    port = read_port(SysfsRoot(tmp_path), "rxe0", 1)
    with pytest.raises(CannotRunError, match="no usable GID"):
        choose_gid(port)


def test_choose_device_first_active_and_named(fixture_root):
    ports = _ports(fixture_root("dgx-h100-faulty"))
    assert choose_device(ports, None).adapter == "mlx5_0"
    assert choose_device(ports, "mlx5_3").adapter == "mlx5_3"
    with pytest.raises(CannotRunError) as e:
        choose_device(ports, "mlx5_10")  # 1: DOWN, 2: Polling in the fixture
    assert "port 1 of mlx5_10 is not active (state DOWN, physical state Polling)" in e.value.message
    with pytest.raises(CannotRunError, match="no RDMA device named mlx9_9"):
        choose_device(ports, "mlx9_9")


def test_choose_device_none_active(fixture_root):
    ports = [p for p in _ports(fixture_root("dgx-h100-faulty")) if p.adapter == "mlx5_10"]
    with pytest.raises(CannotRunError, match="no active RDMA port"):
        choose_device(ports, None)


def test_ensure_port_active():
    ensure_port_active("mlx5_0", 1, "ACTIVE", "LinkUp")
    with pytest.raises(CannotRunError, match="state INIT"):
        ensure_port_active("mlx5_0", 1, "INIT", "LinkUp")


# --- what the two sides exchange --------------------------------------------------------------------

ROCE_A = QpInfo(
    lid=0,
    qpn=0x1A2,
    psn=0x123456,
    gid="0000:0000:0000:0000:0000:ffff:0a00:0105",
    link_layer="Ethernet",
    rkey=0xDEAD,
    addr=0x7F00_0000_1000,
    length=2**20,
    mtu_bytes=4096,
)
ROCE_B = QpInfo(
    lid=0,
    qpn=0x3B4,
    psn=0x654321,
    gid="0000:0000:0000:0000:0000:ffff:0a00:0205",
    link_layer="Ethernet",
    rkey=0xBEEF,
    addr=0x7F00_0000_9000,
    length=2**20,
    mtu_bytes=1024,
)


def test_qp_info_json_round_trip():
    assert QpInfo.from_json(ROCE_A.to_json()) == ROCE_A


@pytest.mark.parametrize(
    "field,value",
    [
        ("qpn", 2**24),
        ("psn", -1),
        ("lid", 70000),
        ("rkey", "1"),
        ("addr", 2**64),
        ("gid", "10.0.0.1"),
        ("link_layer", "iWARP"),
        ("mtu", 1500),
        ("length", True),
    ],
)
def test_qp_info_rejects_bad_fields(field, value):
    doc = ROCE_A.to_json()
    doc[field] = value
    with pytest.raises(ValueError):
        QpInfo.from_json(doc)


def test_qp_details_cross_a_real_control_channel_and_plans_match():
    """Both halves of the exchange over loopback TCP; each side plans towards what it received."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen()
    client_sock = socket.create_connection(ls.getsockname())
    server_sock, _ = ls.accept()
    ls.close()
    got: dict[str, ConnectPlan] = {}

    def server() -> None:
        ch = Channel(server_sock, "client", 5)
        ch.send({"type": "ready", "qp": ROCE_A.to_json()})
        remote = QpInfo.from_json(ch.expect("qp", "qp")["qp"])
        got["server"] = plan_connection(ROCE_A, remote, port_num=1, gid_index=3, needed_bytes=2**20)

    t = threading.Thread(target=server)
    t.start()
    ch = Channel(client_sock, "server", 5)
    remote = QpInfo.from_json(ch.expect("ready", "ready")["qp"])
    ch.send({"type": "qp", "qp": ROCE_B.to_json()})
    got["client"] = plan_connection(ROCE_B, remote, port_num=1, gid_index=3, needed_bytes=2**20)
    t.join(5)
    client_sock.close()
    server_sock.close()
    c, s = got["client"], got["server"]
    assert c.dest_qp_num == ROCE_A.qpn and s.dest_qp_num == ROCE_B.qpn
    assert c.rq_psn == ROCE_A.psn and c.sq_psn == ROCE_B.psn
    assert s.rq_psn == c.sq_psn and c.rq_psn == s.sq_psn
    assert c.path_mtu_bytes == s.path_mtu_bytes == 1024  # the smaller active MTU
    assert c.is_global and c.dgid == ROCE_A.gid and c.sgid_index == 3
    assert s.dgid == ROCE_B.gid


def test_plan_refusals():
    ib = replace(ROCE_A, link_layer="InfiniBand", gid=None, lid=0x12)
    with pytest.raises(CannotRunError, match="link layers differ"):
        plan_connection(ROCE_B, ib, port_num=1, gid_index=3, needed_bytes=1)
    with pytest.raises(CannotRunError, match="registered"):
        plan_connection(ROCE_B, ROCE_A, port_num=1, gid_index=3, needed_bytes=2**21)
    with pytest.raises(CannotRunError, match="LID 0"):
        plan_connection(
            replace(ib, lid=5), replace(ib, lid=0), port_num=1, gid_index=None, needed_bytes=1
        )
    plan = plan_connection(replace(ib, lid=5), ib, port_num=2, gid_index=None, needed_bytes=1)
    assert not plan.is_global and plan.dlid == 0x12 and plan.port_num == 2 and plan.dgid is None


# --- the loops, against the named stand-in ----------------------------------------------------------


@pytest.mark.parametrize("tx_depth", [1, 2, 16, 128])
def test_write_bw_iterations_respect_queue_depth_and_signal_selectively(tx_depth):
    ep = FakeRdmaEndpoint(4096, tx_depth, delay_polls=3)
    starts = []
    stats = write_bw(
        ep,
        4096,
        warmup=10,
        iters=1000,
        duration_s=None,
        tx_depth=tx_depth,
        timeout_s=5,
        on_measure_start=lambda: starts.append(1),
    )
    assert stats.messages == 1000 and stats.bytes == 1000 * 4096 and stats.seconds > 0
    assert starts == [1]
    assert ep.max_outstanding <= tx_depth
    measured = ep.posted[10:]
    assert [w for w, _ in measured] == list(range(1000))
    cq_mod = signal_interval(tx_depth, 4096)
    signalled = [w for w, s in measured if s]
    # every cq_mod-th WRITE and the last one ask for a completion; no others do
    assert signalled == sorted(set(list(range(cq_mod - 1, 1000, cq_mod)) + [999]))
    assert ep.outstanding == 0


@pytest.mark.parametrize(
    "tx_depth,iters,warmup", [(128, 1000, 0), (16, 1000, 10), (1, 50, 0), (7, 101, 3)]
)
def test_write_bw_posts_one_chain_per_signalled_request(tx_depth, iters, warmup):
    """Post lists: one ibv_post_send per chain of cq_mod WRITEs, not one per WRITE; each chain ends signalled."""
    ep = FakeRdmaEndpoint(64, tx_depth)
    write_bw(ep, 64, warmup=warmup, iters=iters, duration_s=None, tx_depth=tx_depth, timeout_s=5)
    cq_mod = signal_interval(tx_depth, 64)
    chains = -(-iters // cq_mod) + -(-warmup // cq_mod)
    assert ep.post_calls == chains == sum(1 for _, s in ep.posted if s)
    assert (
        len(ep.posted) == iters + warmup and ep.max_outstanding <= tx_depth and ep.outstanding == 0
    )
    # polls: at most one that finds nothing per chain here (the stand-in completes at once), never one per WRITE
    assert ep.poll_calls <= 2 * chains + 2 < iters + warmup or cq_mod == 1


def test_write_bw_duration_stops_on_a_signalled_boundary():
    ep = FakeRdmaEndpoint(64, 32)
    stats = write_bw(ep, 64, warmup=0, iters=None, duration_s=0.05, tx_depth=32, timeout_s=5)
    assert stats.messages > 0 and stats.messages % signal_interval(32, 64) == 0
    assert ep.posted[-1][1] is True  # the last WRITE is signalled, so its completion ends the run
    assert ep.outstanding == 0 and 0.04 < stats.seconds < 2.0


@pytest.mark.parametrize("mode", ["iters", "duration"])
def test_write_bw_sends_heartbeats_while_it_runs(mode):
    """The server only waits on the control channel during RDMA WRITEs: the client must keep it informed."""
    ep = FakeRdmaEndpoint(64, 16)
    beats = []
    kw = (
        {"iters": 200_000, "duration_s": None}
        if mode == "iters"
        else {"iters": None, "duration_s": 0.2}
    )
    write_bw(
        ep,
        64,
        warmup=0,
        tx_depth=16,
        timeout_s=5,
        heartbeat=lambda: beats.append(1),
        heartbeat_s=0.02,
        **kw,
    )
    assert len(beats) >= 3


def test_write_bw_times_out_without_completions():
    ep = FakeRdmaEndpoint(64, 8)
    ep.poll = lambda max_entries=16: []  # a peer that never acknowledges
    with pytest.raises(PeerTimeoutError, match="no RDMA WRITE completion"):
        write_bw(ep, 64, warmup=0, iters=100, duration_s=None, tx_depth=8, timeout_s=0.2)


@pytest.fixture
def fast_gil_handover():
    """Both sides of the stand-in ping-pong spin on memory in one process: switch threads often."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(old)


def test_write_latency_ping_pong_between_two_threads(fast_gil_handover):
    size, n, warm = 256, 300, 5
    a = FakeRdmaEndpoint(1024, 4)
    b = FakeRdmaEndpoint(1024, 4)
    a.peer, b.peer = b, a
    reset_areas(a.view, size, a.send_offset)
    reset_areas(b.view, size, b.send_offset)
    errors = []

    def responder() -> None:
        try:
            write_lat_responder(b, size, 0, warm + n, timeout_s=5)
        except Exception as e:
            errors.append(e)

    t = threading.Thread(target=responder)
    t.start()
    write_lat_initiator(a, size, 0, warm, timeout_s=5)
    samples = write_lat_initiator(a, size, warm, n, timeout_s=5)
    t.join(5)
    assert not errors
    assert a.max_outstanding <= 4 and b.max_outstanding <= 4
    assert len(samples) == n and all(s > 0 for s in samples)
    # the last byte of each side's receive area carries the last iteration's marker
    assert a.view[size - 1] == b.view[size - 1] == marker(warm + n - 1)
    assert marker(0) == 1 and marker(254) == 255 and marker(255) == 1


@pytest.mark.parametrize("tx_depth,n", [(4, 301), (128, 200), (1, 20)])
def test_write_latency_signals_every_nth_write_and_polls_once_per_batch(
    fast_gil_handover, tx_depth, n
):
    a, b = FakeRdmaEndpoint(256, tx_depth), FakeRdmaEndpoint(256, tx_depth)
    a.peer, b.peer = b, a
    errors = []

    def responder() -> None:
        try:
            write_lat_responder(b, 8, 0, n, timeout_s=5)
        except Exception as e:
            errors.append(e)

    t = threading.Thread(target=responder)
    t.start()
    samples = write_lat_initiator(a, 8, 0, n, timeout_s=5)
    t.join(5)
    assert not errors and len(samples) == n
    every = lat_signal_interval(tx_depth)
    for ep in (a, b):
        signalled = [w for w, s in ep.posted if s]
        assert signalled == sorted(
            set(range(every - 1, n, every)) | {n - 1}
        )  # the last always signalled
        assert ep.poll_calls == len(
            signalled
        )  # the completion is there once the answer came: one poll each
        assert ep.max_outstanding <= max(1, every) <= tx_depth and ep.outstanding == 0


def test_write_latency_posts_again_through_post_when_the_bare_post_fails(fast_gil_handover):
    """The loops post unsignalled WRITEs through the endpoint's bare ``poster``; when that raises (a
    pyverbs error), the request goes through ``post``, which raises the endpoint's own error or posts."""

    class BarePostFails(FakeRdmaEndpoint):
        def poster(self, wr):
            def bare() -> None:
                raise OSError("ibv_post_send: bare failure")

            return bare

    a, b = BarePostFails(256, 8), BarePostFails(256, 8)
    a.peer, b.peer = b, a
    t = threading.Thread(target=write_lat_responder, args=(b, 8, 0, 30), kwargs={"timeout_s": 5})
    t.start()
    samples = write_lat_initiator(a, 8, 0, 30, timeout_s=5)
    t.join(5)
    assert len(samples) == 30 and len(a.posted) == len(b.posted) == 30 == a.post_calls
    a.post = lambda wr, wr_id: (_ for _ in ()).throw(
        CannotRunError("posting an RDMA work request on rxe0 failed")
    )
    with pytest.raises(CannotRunError, match="posting an RDMA work request"):
        write_lat_initiator(a, 8, 30, 2, timeout_s=1)


def test_write_latency_times_out_when_the_peer_is_silent():
    a = FakeRdmaEndpoint(64, 4)
    a.peer = FakeRdmaEndpoint(64, 4)  # writes land, nobody answers
    with pytest.raises(PeerTimeoutError, match="the answer to WRITE 0"):
        write_lat_initiator(a, 64, 0, 1, timeout_s=0.2)


def test_round_trips_run_from_the_previous_stamp_or_from_after_the_reaped_completion():
    from ibdiag.bench.p2p.rdma.latency import _round_trips

    # answers stamped at 10, 20, 35, 50; iteration 1 was signalled and its completion reaped at 27
    assert _round_trips(0, [10, 20, 35, 50], {1: 27}) == [10, 10, 8, 15]
    assert _round_trips(5, [], {}) == []


def test_write_latency_waits_past_the_inline_spins_for_a_late_answer(
    fast_gil_handover, monkeypatch
):
    """An answer later than the loops' inline spins goes to the wait that keeps the timeout, and the
    ping-pong goes on; the slow round trips show in the samples."""
    from ibdiag.bench.p2p.rdma import latency as rdma_loops

    waits = []
    real = rdma_loops._spin_until

    def counted(view, pos, value, timeout_s, what):
        waits.append(what)
        real(view, pos, value, timeout_s, what)

    monkeypatch.setattr(rdma_loops, "_spin_until", counted)
    monkeypatch.setattr(rdma_loops, "_INLINE_SPINS", 50)

    class SlowAnswers(FakeRdmaEndpoint):
        def post(self, wr, wr_id):
            if self.post_calls in (3, 7):  # the 4th and 8th answers come 30 ms late
                time.sleep(0.03)
            super().post(wr, wr_id)

    a, b = FakeRdmaEndpoint(256, 8), SlowAnswers(256, 8)
    a.peer, b.peer = b, a
    t = threading.Thread(target=write_lat_responder, args=(b, 8, 0, 12), kwargs={"timeout_s": 5})
    t.start()
    samples = write_lat_initiator(a, 8, 0, 12, timeout_s=5)
    t.join(5)
    assert len(samples) == 12 and all(s > 0 for s in samples)
    assert samples[3] >= 25_000_000 and samples[7] >= 25_000_000
    assert "the answer to WRITE 3" in waits and "the answer to WRITE 7" in waits
    assert a.view[7] == marker(11)


def test_message_sizes_checked_against_max_msg_sz_and_the_sge_length():
    from ibdiag.bench.p2p.rdma.plan import SGE_MAX_BYTES, check_message_sizes, message_size_problem
    from ibdiag.errors import UsageError

    assert message_size_problem([8, 2**31], 2**31, "rxe0", 1) is None
    problem = message_size_problem([8, 2**31 + 1, 4096], 2**31, "rxe0", 1)
    assert (
        problem is not None
        and "rxe0 port 1" in problem
        and "max_msg_sz" in problem
        and "2 GiB" in problem
    )
    # a port that allows more than a 32-bit SGE length: the SGE length is the limit
    assert message_size_problem([2**32], 2**40, "mlx5_0", 1) == (
        "a 4 GiB message is larger than one RDMA WRITE on mlx5_0 port 1 can carry (4294967295 bytes, the 32-bit SGE length)"
    )
    assert message_size_problem([SGE_MAX_BYTES], 0, "mlx5_0", 1) is None  # max_msg_sz 0: unknown
    with pytest.raises(UsageError) as e:
        check_message_sizes([4 * 2**30], 2**31, "rxe0", 1)
    assert int(e.value.exit_status) == 2
    assert e.value.message.startswith(
        "a 4 GiB message is larger than one RDMA WRITE on rxe0 port 1"
    )
    assert e.value.hint == "use sizes up to 2 GiB with --transport rdma, e.g. --sizes 8:2147483648"


def test_signal_interval_bounds_the_bytes_between_completions():
    from ibdiag.bench.p2p.rdma.loops import SIGNAL_BYTES

    assert signal_interval(128, 8) == 64 and signal_interval(128, 64 * 1024) == 16
    assert signal_interval(128, 4 * 2**20) == 1 and signal_interval(1, 8) == 1
    for size in (8, 4096, 65536, 2**20, 2**22):
        assert signal_interval(128, size) * size <= max(SIGNAL_BYTES, size)


def test_write_bw_large_messages_signal_every_write():
    ep = FakeRdmaEndpoint(4 * 2**20, 128)
    write_bw(ep, 4 * 2**20, warmup=0, iters=10, duration_s=None, tx_depth=128, timeout_s=5)
    assert all(s for _, s in ep.posted)
