#!/usr/bin/env python3
"""Which end of the 8-byte WRITE ping-pong costs what: each end in C or in ibdiag's Python loop.

    python benchmarks/rdma_lat_sides.py [--iters 3000] [--rounds 8]      (root: boots the guest)

``rdma_vs_perftest.py`` compares ``bench p2p`` with ``ib_write_lat``; this script takes the gap
apart. A small C program (compiled in the guest with ``cc`` against libibverbs; Debian's
``libibverbs-dev``, installed when missing) runs one end of the ping-pong with *ibdiag's* loop
structure: 8-byte inline WRITEs on an RC queue pair on ``rxe0``, every 64th signalled and reaped
after its answer, a spin on the answer's last byte, one clock read per round trip. The other end is
the same C program or ibdiag's own loop (``write_lat_initiator`` / ``write_lat_responder`` on an
``RdmaEndpoint``), so four pairings run — C/C, Python client/C server, C client/Python server,
Python/Python — beside ``ib_write_lat`` on the same device, client ends on the guest's first CPU and
server ends on its last, as in ``rdma_vs_perftest.py``. The rounds rotate the order.

What it tells: C/C against ``ib_write_lat`` is the cost of ibdiag's loop *structure* (signalling,
spin, clock); each mixed pairing minus C/C is what one end's Python adds to the one-way latency;
Python/Python against ``ib_write_lat`` is the figure of issue 15 (target <= 1.5).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parent.parent
DEVICE = "rxe0"
SIGNAL_EVERY = 64
HALF = 4096  # the receive half; sends go from the second half, as RdmaEndpoint(send_offset=HALF)

C_PINGPONG = r"""
#define _GNU_SOURCE
#include <infiniband/verbs.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static long long now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000LL + t.tv_nsec; }
static int cmp(const void *x, const void *y) { long long a = *(const long long *)x, b = *(const long long *)y; return (a > b) - (a < b); }
/* pingpong DEVICE GID_INDEX N EVERY ROLE(c|s) CPU: one end of N 8-byte WRITE ping-pongs with ibdiag's
   loop structure. stdin/stdout carry the exchange: this end prints "QPN PSN RKEY ADDR GIDHEX", reads the
   peer's, prints "ready", waits for a line, runs; the client prints the one-way p50 in ns. */
int main(int argc, char **argv) {
    if (argc != 7) return 2;
    int gid_index = atoi(argv[2]), every = atoi(argv[4]), server = argv[5][0] == 's'; long n = atol(argv[3]);
    cpu_set_t cs; CPU_ZERO(&cs); CPU_SET(atoi(argv[6]), &cs); sched_setaffinity(0, sizeof cs, &cs);
    int num = 0; struct ibv_device **list = ibv_get_device_list(&num), *dev = NULL;
    for (int i = 0; i < num; i++) if (!strcmp(ibv_get_device_name(list[i]), argv[1])) dev = list[i];
    if (!dev) { fprintf(stderr, "no device %s\n", argv[1]); return 2; }
    struct ibv_context *ctx = ibv_open_device(dev);
    struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
    volatile char *buf = aligned_alloc(4096, 8192); memset((void *)buf, 0, 8192);
    struct ibv_mr *mr = pd ? ibv_reg_mr(pd, (void *)buf, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) : NULL;
    struct ibv_cq *cq = ctx ? ibv_create_cq(ctx, 256, NULL, NULL, 0) : NULL;
    struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .sq_sig_all = 0,
        .cap = {.max_send_wr = 128, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1, .max_inline_data = 64}};
    struct ibv_qp *qp = mr && cq ? ibv_create_qp(pd, &ia) : NULL;
    if (!qp) { fprintf(stderr, "setup failed\n"); return 2; }
    union ibv_gid gid, peer_gid; ibv_query_gid(ctx, 1, gid_index, &gid);
    printf("%u 0 %u %llu ", qp->qp_num, mr->rkey, (unsigned long long)(uintptr_t)buf);
    for (int i = 0; i < 16; i++) printf("%02x", gid.raw[i]);
    printf("\n"); fflush(stdout);
    unsigned qpn, psn, rkey; unsigned long long addr; char hex[33];
    if (scanf("%u %u %u %llu %32s", &qpn, &psn, &rkey, &addr, hex) != 5) return 2;
    for (int i = 0; i < 16; i++) { unsigned b; sscanf(hex + 2 * i, "%2x", &b); peer_gid.raw[i] = b; }
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return 2;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR; a.path_mtu = IBV_MTU_1024; a.dest_qp_num = qpn; a.rq_psn = psn; a.max_dest_rd_atomic = 1; a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1; a.ah_attr.grh.dgid = peer_gid; a.ah_attr.grh.sgid_index = gid_index; a.ah_attr.grh.hop_limit = 1; a.ah_attr.port_num = 1;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) return 2;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS; a.timeout = 14; a.retry_cnt = 7; a.rnr_retry = 7; a.max_rd_atomic = 1;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)) return 2;
    printf("ready\n"); fflush(stdout);
    if (scanf("%32s", hex) != 1) return 2;
    struct ibv_sge sge = {.addr = (uintptr_t)(buf + 4096), .length = 8, .lkey = mr->lkey};
    struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE}, *bad;
    wr.wr.rdma.remote_addr = addr; wr.wr.rdma.rkey = rkey;
    volatile char *mine = buf + 4096 + 7, *answer = buf + 7;
    long long *rtt = calloc(n, sizeof *rtt), t0 = now(), t;
    struct ibv_wc wc; int r;
    for (long i = 0; i < n; i++) {
        char m = (char)(i % 255 + 1);
        int sig = (i + 1) % every == 0 || i == n - 1;
        wr.send_flags = IBV_SEND_INLINE | (sig ? IBV_SEND_SIGNALED : 0);
        if (server) while (*answer != m) {}
        *mine = m;
        if (ibv_post_send(qp, &wr, &bad)) { fprintf(stderr, "post failed at %ld\n", i); return 3; }
        if (!server) { while (*answer != m) {} t = now(); rtt[i] = t - t0; t0 = t; }
        if (sig) {
            while ((r = ibv_poll_cq(cq, 1, &wc)) == 0) {}
            if (r < 0 || wc.status != IBV_WC_SUCCESS) { fprintf(stderr, "completion status %d\n", r < 0 ? -1 : (int)wc.status); return 4; }
            if (!server) t0 = now();
        }
    }
    if (!server) { qsort(rtt, n, sizeof *rtt, cmp); printf("%lld\n", rtt[n / 2] / 2); fflush(stdout); }
    return 0;
}
"""


class Side:
    """One end of a pairing: a process whose stdin/stdout speak the C program's exchange."""

    def __init__(self, stdin: IO[str], stdout: IO[str], wait) -> None:
        self.stdin, self.stdout, self._wait = stdin, stdout, wait

    def line(self) -> str:
        text = self.stdout.readline()
        if not text:
            raise SystemExit("a ping-pong end exited during the exchange")
        return text.strip()

    def say(self, text: str) -> None:
        self.stdin.write(text + "\n")
        self.stdin.flush()

    def wait(self) -> int:
        return self._wait()


def c_side(exe: Path, gid_index: int, iters: int, role: str, cpu: int) -> Side:
    p = subprocess.Popen(
        [str(exe), DEVICE, str(gid_index), str(iters), str(SIGNAL_EVERY), role, str(cpu)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    return Side(p.stdin, p.stdout, lambda: p.wait(60))


def py_side(sel, iters: int, role: str, cpu: int) -> Side:
    """ibdiag's loop as one end, in a forked process (the same pipes as the C program's)."""
    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()
    pid = os.fork()
    if pid:
        os.close(to_child_r)
        os.close(from_child_w)

        def wait() -> int:
            return os.waitpid(pid, 0)[1]

        return Side(os.fdopen(to_child_w, "w"), os.fdopen(from_child_r, "r"), wait)
    code = 1
    try:
        os.close(to_child_w)
        os.close(from_child_r)
        os.sched_setaffinity(0, {cpu})
        code = _py_end(
            sel,
            iters,
            role,
            Side(os.fdopen(from_child_w, "w"), os.fdopen(to_child_r, "r"), lambda: 0),
        )
    except BaseException as e:  # the parent sees the exit status and the message
        print(f"python {role} end failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
    finally:
        os._exit(code)


def _py_end(sel, iters: int, role: str, io: Side) -> int:
    from ibdiag.bench.buffers import allocate
    from ibdiag.bench.p2p.params import AUTO_INLINE_LAT, DEFAULT_TX_DEPTH
    from ibdiag.bench.p2p.rdma.endpoint import RdmaEndpoint
    from ibdiag.bench.p2p.rdma.latency import write_lat_initiator, write_lat_responder
    from ibdiag.bench.p2p.rdma.loops import reset_areas
    from ibdiag.bench.p2p.rdma.plan import QpInfo, plan_connection

    buf = allocate(2 * HALF)
    ep = RdmaEndpoint(
        sel.device,
        sel.port,
        buf,
        send_offset=HALF,
        tx_depth=DEFAULT_TX_DEPTH,
        gid=sel.gid,
        gid_index=sel.gid_index,
        max_inline=AUTO_INLINE_LAT,
    )
    try:
        info = ep.local_info(random.randrange(1 << 24))
        io.say(f"{info.qpn} {info.psn} {info.rkey} {info.addr} {info.gid.replace(':', '')}")
        qpn, psn, rkey, addr, gid_hex = io.line().split()
        gid = ":".join(gid_hex[i : i + 4] for i in range(0, 32, 4))
        remote = QpInfo(
            lid=0,
            qpn=int(qpn),
            psn=int(psn),
            gid=gid,
            link_layer=info.link_layer,
            rkey=int(rkey),
            addr=int(addr),
            length=HALF,
            mtu_bytes=info.mtu_bytes,
        )
        ep.connect(
            plan_connection(
                info, remote, port_num=sel.port, gid_index=sel.gid_index, needed_bytes=HALF
            ),
            remote,
        )
        reset_areas(ep.view, 8, HALF)
        io.say("ready")
        io.line()
        if role == "c":
            rtts = write_lat_initiator(ep, 8, 0, iters, timeout_s=30, inline=True)
            io.say(str(int(statistics.median(rtts) / 2)))
        else:
            write_lat_responder(ep, 8, 0, iters, timeout_s=30, inline=True)
        return 0
    finally:
        ep.close()
        buf.close()


def pairing(client: Side, server: Side) -> float:
    """Relay the two ends' exchange, start them, return the client's one-way p50 in us."""
    c_info, s_info = client.line(), server.line()
    client.say(s_info)
    server.say(c_info)
    if client.line() != "ready" or server.line() != "ready":
        raise SystemExit("a ping-pong end did not get ready")
    server.say("go")
    client.say("go")
    p50_ns = float(client.line())
    if client.wait() != 0 or server.wait() != 0:
        raise SystemExit("a ping-pong end failed")
    return p50_ns / 1000


def in_guest(args: argparse.Namespace) -> int:
    from guest_c import build_c
    from rdma_vs_perftest import CLIENT_CPU, SERVER_CPU, perftest

    from ibdiag.bench.p2p.rdma.device import select_rdma
    from ibdiag.node.sysfs import SysfsRoot

    sel = select_rdma(SysfsRoot("/"), DEVICE, 1, None)
    addr = os.environ.get("IBDIAG_RDMAVM_ADDR", "10.77.0.1")
    os.sched_setaffinity(0, {CLIENT_CPU})
    results: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(dir="/var/tmp") as d:
        exe = build_c(C_PINGPONG, Path(d), "pingpong")

        def end(kind: str, role: str):
            cpu = CLIENT_CPU if role == "c" else SERVER_CPU
            return (
                (lambda: c_side(exe, sel.gid_index, args.iters, role, cpu))
                if kind == "C"
                else (lambda: py_side(sel, args.iters, role, cpu))
            )

        tests = {
            f"{c} client + {s} server": (end(c, "c"), end(s, "s"))
            for c, s in (("C", "C"), ("Python", "C"), ("C", "Python"), ("Python", "Python"))
        }
        names = [*tests, "ib_write_lat"]
        for r in range(args.rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                if name == "ib_write_lat":
                    value = perftest(
                        "ib_write_lat", addr, sel.gid_index, ["-s", "8", "-n", str(args.iters)]
                    ).lat_us.p50_us
                else:
                    make_client, make_server = tests[name]
                    server = (
                        make_server()
                    )  # the server end first: it must be listening on its pipes
                    value = pairing(make_client(), server)
                results.setdefault(name, []).append(value)
            print(
                f"round {r + 1}/{args.rounds}: "
                + json.dumps({n: round(v[-1], 2) for n, v in results.items()}),
                file=sys.stderr,
                flush=True,
            )
    out = Path(os.environ.get("IBDIAG_RDMAVM_OUT", "."))
    (out / "lat-sides.json").write_text(
        json.dumps(
            {"iters": args.iters, "rounds": args.rounds, "one_way_p50_us": results}, indent=2
        )
    )
    return 0


def render(doc: dict) -> list[str]:
    res = doc["one_way_p50_us"]
    cc = res["C client + C server"]
    lines = [
        f"8-byte WRITE ping-pong on rxe0, one-way p50 (us), {doc['iters']} round trips per run, {doc['rounds']} rotating rounds:"
    ]
    for name, values in res.items():
        lines.append(
            f"  {name:28s} median {statistics.median(values):6.2f}  min {min(values):6.2f}  max {max(values):6.2f}"
        )
    lines.append("added one-way over C/C (median of the per-round differences, min-max):")
    for name in (
        "Python client + C server",
        "C client + Python server",
        "Python client + Python server",
    ):
        d = sorted(a - b for a, b in zip(res[name], cc, strict=False))
        lines.append(f"  {name:28s} {statistics.median(d):+6.2f} us  ({d[0]:+.2f} .. {d[-1]:+.2f})")
    return lines


def on_host(args: argparse.Namespace) -> int:
    from guest_c import run_in_guest
    from ratios import Paired, report

    doc = run_in_guest(
        "rdma_lat_sides.py", f"--iters {args.iters} --rounds {args.rounds}", "lat-sides.json"
    )
    if isinstance(doc, int):
        return doc
    print("\n".join(render(doc)))
    res = doc["one_way_p50_us"]
    perf = tuple(res["ib_write_lat"])
    report(
        "rdma lat p50, C ping-pong with ibdiag's loop vs ib_write_lat (Soft-RoCE guest)",
        Paired(tuple(res["C client + C server"]), perf),
        None,
        None,
        "us",
    )
    report(
        "rdma lat p50, ibdiag's loop at both ends vs ib_write_lat (Soft-RoCE guest)",
        Paired(tuple(res["Python client + Python server"]), perf),
        "<=",
        1.5,
        "us",
    )
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=3000, help="round trips per run")
    ap.add_argument(
        "--rounds",
        type=int,
        default=8,
        help="rounds; each runs every pairing and ib_write_lat once, the order rotating",
    )
    ap.add_argument("--in-guest", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rounds < 5 or args.iters < 100:
        ap.error("at least 5 rounds of at least 100 round trips")
    sys.path.insert(0, str(REPO / "benchmarks"))
    return in_guest(args) if args.in_guest else on_host(args)


if __name__ == "__main__":
    raise SystemExit(main())
