"""``bench serve`` serves RDMA clients one after another without leaking kernel objects.

The kernel's own count (``rdma resource show``: PDs, CQs, QPs, MRs, contexts of rxe0) is read
before and after 20 client runs against one long-lived server process; the clients run in this
process, so a leak on either side shows.
"""

from __future__ import annotations

from tests.rdmavm.guest.conftest import client_env, p2p_args, rdma_resources

RUNS = 20


def test_twenty_clients_in_turn_leave_no_qp_mr_cq_pd_behind(server, cli, token):
    s = server("--timeout", "5")
    before = rdma_resources()
    env = client_env(token)
    during = []
    for i in range(RUNS):
        r = cli(
            *p2p_args(
                s.port,
                "--sizes",
                "4K",
                "--iters",
                "5",
                "--warmup",
                "0",
                "--mode",
                "both",
                "-o",
                "json",
            ),
            env=env,
        )
        assert r.exit_code in (0, 1) and r.exception is None, (i, r.stderr, r.exception)
        s.log.wait_for(r"done in ", start=0)
        during.append(rdma_resources())
    done = len([line for line in s.log.lines if "done in " in line])
    assert done == RUNS, s.log.text()
    after = rdma_resources()
    for kind in ("pd", "cq", "qp", "mr", "ctx"):
        if kind in before:
            assert after[kind] == before[kind], (
                f"{kind}: {before[kind]} before, {after[kind]} after {RUNS} runs; per run: {[d.get(kind) for d in during]}"
            )
    assert s.poll() is None
