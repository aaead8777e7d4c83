#!/usr/bin/env python3
"""What one ``ibv_post_send`` costs from ibdiag's Python against the same call from C, on Soft-RoCE.

    python benchmarks/rdma_post_cost.py [--posts 20000] [--pairs 5]      (root: boots the guest)

The 8-byte WRITE ping-pong is two posts per round trip (``rdma_vs_perftest.py``'s profile), and on
rxe the requester runs inside the system call, so the post is most of the latency. This script
measures that one call both ways on the same kind of queue pair, in the same guest, in turn: a
reliable-connected QP on ``rxe0`` connected to itself (its WRITEs land in its own buffer), 8-byte
inline WRITEs, every 64th signalled and reaped, the others unsignalled and each timed from the call
to its return. C: a small program against libibverbs (compiled in the guest with ``cc``; the headers
come from Debian's ``libibverbs-dev``, installed when missing). Python: ibdiag's own endpoint
(``RdmaEndpoint.poster``, what the latency loop posts with). The pairs alternate which side runs
first; the medians of the per-post medians and their ratio go through ``benchmarks/ratios.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEVICE = "rxe0"
SIGNAL_EVERY = 64

C_POSTS = r"""
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static long long now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000LL + t.tv_nsec; }
static int cmp(const void *x, const void *y) { long long a = *(const long long *)x, b = *(const long long *)y; return (a > b) - (a < b); }
/* posts DEVICE GID_INDEX N EVERY: N 8-byte inline WRITEs on an RC QP connected to itself; prints the
   median ns of the unsignalled posts (call to return). */
int main(int argc, char **argv) {
    int num = 0, gid_index = atoi(argv[2]), every = atoi(argv[4]); long n = atol(argv[3]);
    struct ibv_device **list = ibv_get_device_list(&num), *dev = NULL;
    for (int i = 0; i < num; i++) if (!strcmp(ibv_get_device_name(list[i]), argv[1])) dev = list[i];
    if (!dev) { fprintf(stderr, "no device %s\n", argv[1]); return 2; }
    struct ibv_context *ctx = ibv_open_device(dev);
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    char *buf = calloc(1, 8192);
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    struct ibv_cq *cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
    struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .sq_sig_all = 0,
        .cap = {.max_send_wr = 128, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1, .max_inline_data = 64}};
    struct ibv_qp *qp = ibv_create_qp(pd, &ia);
    if (!ctx || !pd || !mr || !cq || !qp) { fprintf(stderr, "setup failed\n"); return 2; }
    union ibv_gid gid; ibv_query_gid(ctx, 1, gid_index, &gid);
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return 2;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR; a.path_mtu = IBV_MTU_1024; a.dest_qp_num = qp->qp_num; a.max_dest_rd_atomic = 1; a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1; a.ah_attr.grh.dgid = gid; a.ah_attr.grh.sgid_index = gid_index; a.ah_attr.grh.hop_limit = 1; a.ah_attr.port_num = 1;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) return 2;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS; a.timeout = 14; a.retry_cnt = 7; a.rnr_retry = 7; a.max_rd_atomic = 1;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)) return 2;
    struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey};
    struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE}, *bad;
    wr.wr.rdma.remote_addr = (uintptr_t)(buf + 4096); wr.wr.rdma.rkey = mr->rkey;
    long long *dt = malloc(n * sizeof *dt), t; long k = 0;
    for (long i = 0; i < n; i++) {
        int sig = (i + 1) % every == 0;
        wr.send_flags = IBV_SEND_INLINE | (sig ? IBV_SEND_SIGNALED : 0);
        t = now();
        if (ibv_post_send(qp, &wr, &bad)) { fprintf(stderr, "post failed at %ld\n", i); return 3; }
        t = now() - t;
        if (!sig) { dt[k++] = t; continue; }
        struct ibv_wc wc; int r;
        while ((r = ibv_poll_cq(cq, 1, &wc)) == 0) {}
        if (r < 0 || wc.status != IBV_WC_SUCCESS) { fprintf(stderr, "completion status %d\n", r < 0 ? -1 : (int)wc.status); return 4; }
    }
    qsort(dt, k, sizeof *dt, cmp);
    printf("%lld\n", dt[k / 2]);
    return 0;
}
"""


def python_posts(sel, n: int) -> float:
    """The same posts through ibdiag's endpoint (``poster`` for the unsignalled ones); median ns."""
    import random

    from ibdiag.bench.buffers import allocate
    from ibdiag.bench.p2p.params import DEFAULT_TX_DEPTH
    from ibdiag.bench.p2p.rdma.endpoint import RdmaEndpoint
    from ibdiag.bench.p2p.rdma.latency import _await_completion
    from ibdiag.bench.p2p.rdma.plan import plan_connection

    half = 4096
    buf = allocate(2 * half)
    ep = RdmaEndpoint(
        sel.device,
        sel.port,
        buf,
        send_offset=half,
        tx_depth=DEFAULT_TX_DEPTH,
        gid=sel.gid,
        gid_index=sel.gid_index,
        max_inline=64,
    )
    try:
        info = ep.local_info(random.randrange(1 << 24))
        ep.connect(
            plan_connection(
                info, info, port_num=sel.port, gid_index=sel.gid_index, needed_bytes=half
            ),
            info,
        )  # to itself
        plain = ep.prepare("write", 8, signaled=False, inline=True)
        signaled = ep.prepare("write", 8, signaled=True, inline=True)
        fast = ep.poster(plain)
        clock = time.perf_counter_ns
        samples = []
        for i in range(n):
            if (i + 1) % SIGNAL_EVERY == 0:
                ep.post(signaled, i)
                _await_completion(ep, i, 20)
                continue
            t = clock()
            fast()
            samples.append(clock() - t)
        return float(statistics.median(samples))
    finally:
        ep.close()
        buf.close()


def c_posts(exe: Path, gid_index: int, n: int) -> float:
    r = subprocess.run(
        [str(exe), DEVICE, str(gid_index), str(n), str(SIGNAL_EVERY)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if r.returncode != 0:
        raise SystemExit(f"the C poster failed ({r.returncode}): {r.stderr.strip()[-300:]}")
    return float(r.stdout.strip())


def in_guest(args: argparse.Namespace) -> int:
    from guest_c import build_c

    from ibdiag.bench.p2p.rdma.device import select_rdma
    from ibdiag.node.sysfs import SysfsRoot

    sel = select_rdma(SysfsRoot("/"), DEVICE, 1, None)
    with tempfile.TemporaryDirectory() as d:
        exe = build_c(C_POSTS, Path(d), "posts")
        py: list[float] = []
        c: list[float] = []
        for i in range(args.pairs):
            order = [
                ("py", lambda: python_posts(sel, args.posts)),
                ("c", lambda: c_posts(exe, sel.gid_index, args.posts)),
            ]
            for name, fn in order if i % 2 == 0 else order[::-1]:
                (py if name == "py" else c).append(fn())
    out = Path(os.environ.get("IBDIAG_RDMAVM_OUT", "."))
    (out / "post-cost.json").write_text(
        json.dumps({"python_ns": py, "c_ns": c, "gid_index": sel.gid_index, "posts": args.posts})
    )
    return 0


def on_host(args: argparse.Namespace) -> int:
    from guest_c import run_in_guest
    from ratios import Paired, report

    doc = run_in_guest(
        "rdma_post_cost.py", f"--posts {args.posts} --pairs {args.pairs}", "post-cost.json"
    )
    if isinstance(doc, int):
        return doc
    res = Paired(tuple(doc["python_ns"]), tuple(doc["c_ns"]))
    print(
        f"one unsignalled 8-byte inline WRITE post on an RC QP connected to itself, rxe0, median of {doc['posts']} posts per run, {len(res.ratios)} pairs:"
    )
    print(
        f"  ibdiag (RdmaEndpoint.poster): {statistics.median(res.mine) / 1000:6.2f} us   C (ibv_post_send): {statistics.median(res.theirs) / 1000:6.2f} us"
    )
    report("rdma post, ibdiag vs C (Soft-RoCE guest)", res, None, None, "ns")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--posts", type=int, default=20000)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--in-guest", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.in_guest:
        sys.path.insert(0, str(REPO / "benchmarks"))
        return in_guest(args)
    sys.path.insert(0, str(REPO / "benchmarks"))
    return on_host(args)


if __name__ == "__main__":
    raise SystemExit(main())
