"""``bench p2p --transport rdma`` on a real kernel RDMA stack (Soft-RoCE in the guest).

Real pyverbs, real ``rdma_rxe``, a real ``ibdiag bench serve`` process; the client runs in this
process (typer's runner) because every Python start costs seconds under emulation.
"""

from __future__ import annotations

import json

from tests.rdmavm.guest.conftest import ADDR, DEVICE, client_env, p2p_args

SIZES = [2**k for k in range(3, 23)]  # 8 B ... 4 MiB


def test_bw_and_lat_8_bytes_to_4_mib(server, cli, token):
    s = server()
    r = cli(
        *p2p_args(
            s.port,
            "--sizes",
            "8:4M",
            "--mode",
            "both",
            "--iters",
            "5",
            "--warmup",
            "1",
            "-o",
            "json",
        ),
        env=client_env(token),
    )
    assert r.exception is None, r.exception
    assert r.exit_code in (0, 1), (
        r.stderr
    )  # 1 only for a line-rate finding (rxe reports 10 Gb/s whatever veth does)
    doc = json.loads(r.stdout)
    rows = doc["results"]
    assert [row["bytes"] for row in rows] == SIZES
    for row in rows:
        assert row["bw_gbs"] > 0 and row["msg_rate_mpps"] > 0, row
        assert 0 < row["lat_us"]["p50"] <= row["lat_us"]["max"], row
    assert doc["client"]["device"] == doc["server"]["device"] == DEVICE
    assert doc["path_mtu"] in (1024, 4096) and doc["tx_depth"] == 128
    s.log.wait_for(r"running rdma bw\+lat, 20 sizes 8 B\.\.4 MiB")
    s.log.wait_for(r"done in ")
    # the big messages moved real bytes through rxe: its hardware counters saw the packets
    assert any(row["bytes"] == 4 * 2**20 and row["bw_gbs"] > 0.001 for row in rows)
    assert ADDR in doc["peer"]


def test_message_over_max_msg_sz_is_exit_2_before_anything_is_allocated(cli, token):
    """rxe's max_msg_sz is 8 MiB (RXE_MAX_MSG_SZ in drivers/infiniband/sw/rxe/rxe_param.h of 6.1):
    a 16 MiB message is refused up front, before any buffer is allocated or a server contacted."""
    from ibdiag.bench.p2p.rdma import verbs

    assert verbs.port_max_msg_bytes(DEVICE, 1) == 8 * 2**20
    r = cli(*p2p_args(9, "--sizes", "1M,16M"), env=client_env(token))
    assert r.exit_code == 2, (r.stdout, r.stderr)
    assert (
        f"ibdiag: error: a 16 MiB message is larger than one RDMA WRITE on {DEVICE} port 1 can carry (8 MiB, its max_msg_sz)"
        in r.stderr
    )
    assert "hint: use sizes up to 8 MiB with --transport rdma, e.g. --sizes 8:8388608" in r.stderr
    assert "Traceback" not in r.stderr
