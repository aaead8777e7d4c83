#!/usr/bin/env python3
"""ibdiag bench p2p --transport rdma side by side with perftest (ib_write_bw, ib_write_lat) on Soft-RoCE.

    python benchmarks/rdma_vs_perftest.py [--runs 5] [--duration 1] [--bw-sizes 64K,1M] [--rate-sizes 8,4K] [--profile-iters 2000]

This machine's kernel has no RDMA stack, so the script boots the RDMA test bed's guest
(tests/rdmavm/vm.py; root, installs qemu and the kernel on first use) and runs itself inside it
(``--in-guest``). There ibdiag and perftest use the same ``rxe0`` device (Soft-RoCE over veth0,
looped back inside rxe) in the same guest, ``--runs`` pairs of each measurement, the order alternating
from pair to pair (ibdiag first in even pairs, perftest first in odd ones):

* bandwidth: ibdiag RDMA WRITE bw over ``--duration`` vs ``ib_write_bw -s SIZE -n N`` with the
  number N of messages ibdiag moved in its last run (target >= 1.0 x at >= 64 KiB, issue 15);
* message rate at small sizes: ibdiag's msg_rate vs ib_write_bw's MsgRate[Mpps];
* latency: ibdiag 8-byte one-way p50 vs ``ib_write_lat -s 8 -n N`` t_typical (both RTT/2).

The ibdiag client runs in the script's process (through the same run_p2p the CLI calls) and the
server in a forked child, so neither pays a Python start per measurement; perftest's processes are
started per measurement (a C start costs milliseconds). Under emulation (qemu TCG on a shared
machine) absolute numbers mean little; the ratios are the point. The median ratio and the spread
(min..max of the per-pair ratios) are printed and left in build/rdmavm/bench/rdma_vs_perftest.json;
back on the host each comparison goes through benchmarks/ratios.py (``make bench``'s summary).

Afterwards (``--profile-iters``, 0 = skip) the 8-byte WRITE ping-pong is taken apart per call, between
two processes pinned like the benchmark's ends: the time in ``ep.post`` (one ``ibv_post_send``), the
spin on the marker byte, the completion poll, the answering side's turnaround, and the bare costs of
a clock read, an empty poll and a raw pyverbs post (docs/bench-p2p.md).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

DEVICE = "rxe0"
#: Server ends on the guest's last CPU, client ends on its first (both tools alike): two spinning
#: ends left to the guest's scheduler sometimes share one vCPU and then wait a whole time slice.
CPUS = sorted(os.sched_getaffinity(0))
SERVER_CPU, CLIENT_CPU = CPUS[-1], CPUS[0]
SERVER_PORT = 18520
PERFTEST_PORT = 18530


def parse_size(text: str) -> int:
    from ibdiag.units import parse_size as ibdiag_size

    return ibdiag_size(text)


# --- inside the guest ----------------------------------------------------------------------------


def wait_port(addr: str, port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection((addr, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"nothing listens on {addr}:{port} after {timeout:g} s")


def fork_server(addr: str, token_file: Path) -> int:
    """``ibdiag bench serve --transport rdma`` in a forked child (ibdiag is imported already)."""
    from ibdiag.cli import app

    pid = os.fork()
    if pid == 0:
        os.sched_setaffinity(0, {SERVER_CPU})
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        code = 0
        try:
            app(
                [
                    "bench",
                    "serve",
                    "--bind",
                    addr,
                    "--port",
                    str(SERVER_PORT),
                    "--transport",
                    "rdma",
                    "--token-file",
                    str(token_file),
                    "--timeout",
                    "20",
                ],
                prog_name="ibdiag",
            )
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        finally:
            os._exit(code)
    return pid


def ibdiag_run(
    addr: str,
    token: bytes,
    mode: str,
    sizes: tuple[int, ...],
    *,
    duration: float | None = None,
    iters: int | None = None,
):
    from ibdiag.bench.p2p.client import ClientOptions, run_p2p
    from ibdiag.bench.p2p.params import RunRequest

    req = RunRequest("rdma", mode, sizes, iters=iters, duration_s=duration)
    return run_p2p(
        req, ClientOptions(addr, SERVER_PORT, token=token, timeout_s=20, device=DEVICE)
    ).results


def perftest(tool: str, addr: str, gid_index: int, args: list[str]):
    """One perftest measurement; a run whose output cannot be read (under emulation ib_write_lat now
    and then prints ``inf`` for t_min) is repeated, up to three times."""
    from ibdiag.errors import InputError

    for _attempt in range(3):
        try:
            return _perftest_once(tool, addr, gid_index, args)
        except InputError as e:
            print(f"{tool}: unreadable result ({e.message}); again", file=sys.stderr, flush=True)
    raise SystemExit(f"{tool} gave no readable result in 3 runs")


def _perftest_once(tool: str, addr: str, gid_index: int, args: list[str]):
    """One perftest measurement (server and client processes); its result through ibdiag's perftest importer."""
    from ibdiag.bench.importers.perftest import parse_log

    base = [
        tool,
        "-d",
        DEVICE,
        "-i",
        "1",
        "-x",
        str(gid_index),
        "-p",
        str(PERFTEST_PORT),
        "-F",
        *args,
    ]
    server = subprocess.Popen(
        ["taskset", "-c", str(SERVER_CPU), *base],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(0.5)
        for _attempt in range(20):
            r = subprocess.run(
                ["taskset", "-c", str(CLIENT_CPU), *base, addr],
                capture_output=True,
                text=True,
                timeout=120,
            )
            if r.returncode == 0:
                break
            time.sleep(0.5)  # the server was not listening yet
        else:
            raise SystemExit(f"{tool} failed: {r.stderr.strip()[-500:]}")
        server.wait(30)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    with open(Path(os.environ.get("IBDIAG_RDMAVM_OUT", ".")) / "perftest-raw.log", "a") as raw:
        raw.write(f"$ {' '.join(base)} {addr}\n{r.stdout}\n")
    runs = parse_log(r.stdout, tool)
    if not runs or not runs[0].results:
        raise SystemExit(f"cannot read {tool} output:\n{r.stdout}")
    return runs[0].results[0]


def summarize(
    name: str,
    unit: str,
    ours: list[float],
    theirs: list[float],
    target: str,
    *,
    lower_is_better: bool = False,
) -> dict:
    ratios = [a / b for a, b in zip(ours, theirs, strict=False) if b]
    return {
        "metric": name, "unit": unit, "target": target,
        "ibdiag_median": statistics.median(ours), "perftest_median": statistics.median(theirs),
        "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
        "pairs": len(ratios), "lower_is_better": lower_is_better, "ibdiag": ours, "perftest": theirs,
    }  # fmt: skip


def in_guest(args: argparse.Namespace) -> int:
    from ibdiag.bench.p2p.rdma.device import select_rdma
    from ibdiag.node.sysfs import SysfsRoot

    addr = os.environ.get("IBDIAG_RDMAVM_ADDR", "10.77.0.1")
    out = Path(os.environ.get("IBDIAG_RDMAVM_OUT", "."))
    token_file = Path("/var/tmp/ibdiag-bench-token")
    token_file.write_text("rdma-vs-perftest\n")
    token_file.chmod(0o600)
    from ibdiag.bench.p2p.control.protocol import read_token_file

    token = read_token_file(token_file)
    sel = select_rdma(SysfsRoot("/"), DEVICE, 1, None)
    bw_sizes = tuple(parse_size(s) for s in args.bw_sizes.split(","))
    rate_sizes = tuple(parse_size(s) for s in args.rate_sizes.split(","))
    sizes = tuple(sorted(set(bw_sizes + rate_sizes)))
    pid = fork_server(addr, token_file)
    os.sched_setaffinity(0, {CLIENT_CPU})
    rows: dict[str, tuple[list[float], list[float]]] = {}

    def add(key: str, ours: float, theirs: float) -> None:
        rows.setdefault(key, ([], []))
        rows[key][0].append(ours)
        rows[key][1].append(theirs)

    # perftest moves the number of messages (-n) ibdiag moved in its last --duration run: its own
    # duration mode reports 0 iterations when the first completion takes longer than its window
    counts: dict[int, int] = {}

    def ours_bw() -> dict:
        got = {r.bytes: r for r in ibdiag_run(addr, token, "bw", sizes, duration=args.duration)}
        counts.update({s: got[s].iters for s in sizes})
        return got

    def theirs_bw() -> dict:
        return {
            s: perftest(
                "ib_write_bw",
                addr,
                sel.gid_index,
                ["-s", str(s), "-n", str(max(100, counts.get(s, 1000)))],
            )
            for s in sizes
        }

    try:
        wait_port(addr, SERVER_PORT, 120)
        for pair in range(args.runs):
            t0 = time.monotonic()
            if pair % 2 == 0:
                ours, theirs = ours_bw(), theirs_bw()
                (lat,) = ibdiag_run(addr, token, "lat", (8,), iters=args.lat_iters)
                plat = perftest(
                    "ib_write_lat", addr, sel.gid_index, ["-s", "8", "-n", str(args.lat_iters)]
                )
            else:
                theirs, ours = theirs_bw(), ours_bw()
                plat = perftest(
                    "ib_write_lat", addr, sel.gid_index, ["-s", "8", "-n", str(args.lat_iters)]
                )
                (lat,) = ibdiag_run(addr, token, "lat", (8,), iters=args.lat_iters)
            for s in sizes:
                if s in bw_sizes:
                    add(f"bw {s}", ours[s].bw_gbs, theirs[s].bw_gbs)
                if s in rate_sizes:
                    add(f"rate {s}", ours[s].msg_rate_mpps, theirs[s].msg_rate_mpps)
            add("lat 8", lat.lat_us.p50_us, plat.lat_us.p50_us)
            print(
                f"pair {pair + 1}/{args.runs} in {time.monotonic() - t0:.0f} s: {json.dumps({k: (v[0][-1], v[1][-1]) for k, v in rows.items()})}",
                file=sys.stderr,
                flush=True,
            )
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    from ibdiag.units import format_bytes

    summary = []
    for key, (ours_v, theirs_v) in rows.items():
        kind, size = key.split()
        label = f"{format_bytes(int(size))}"
        if kind == "bw":
            summary.append(
                summarize(
                    f"RDMA WRITE bandwidth {label}",
                    "GB/s",
                    ours_v,
                    theirs_v,
                    ">= 1.0 (issue 15)" if int(size) >= 65536 else "-",
                )
            )
        elif kind == "rate":
            summary.append(
                summarize(f"message rate {label}", "Mpps", ours_v, theirs_v, ">= 0.5 (issue 15)")
            )
        else:
            summary.append(
                summarize(
                    f"latency p50 {label} (one-way)",
                    "us",
                    ours_v,
                    theirs_v,
                    "<= 1.5 (issue 15)",
                    lower_is_better=True,
                )
            )
    doc = {
        "device": DEVICE,
        "kernel": os.uname().release,
        "runs": args.runs,
        "duration_s": args.duration,
        "lat_iters": args.lat_iters,
        "results": summary,
    }
    if args.profile_iters:
        try:
            doc["latency_profile"] = latency_profile(sel, args.profile_iters)
        except Exception as e:  # the comparison above stands without the profile
            doc["latency_profile"] = {"error": f"{type(e).__name__}: {e}"}
    (out / "rdma_vs_perftest.json").write_text(json.dumps(doc, indent=2) + "\n")
    print(render(doc))
    return 0


# --- the per-call profile of the latency ping-pong (in the guest) ---------------------------------


def _pctl(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return (
        ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000.0 if ordered else float("nan")
    )


def latency_profile(sel, iters: int) -> dict:
    """The 8-byte WRITE ping-pong taken apart per call, in two processes pinned like the benchmark's
    ends (client on CLIENT_CPU, server on SERVER_CPU), over their own pair of QPs on rxe0."""
    import random

    from ibdiag.bench.buffers import allocate
    from ibdiag.bench.p2p.params import AUTO_INLINE_LAT, DEFAULT_TX_DEPTH
    from ibdiag.bench.p2p.rdma.endpoint import RdmaEndpoint
    from ibdiag.bench.p2p.rdma.latency import (
        _await_completion,
        lat_signal_interval,
        write_lat_initiator,
        write_lat_responder,
    )
    from ibdiag.bench.p2p.rdma.loops import POLL_BATCH, reset_areas
    from ibdiag.bench.p2p.rdma.plan import QpInfo, plan_connection

    c2s_r, c2s_w = os.pipe()
    s2c_r, s2c_w = os.pipe()
    pid = os.fork()
    server = pid == 0
    rfd, wfd = (c2s_r, s2c_w) if server else (s2c_r, c2s_w)
    for fd in (c2s_r, c2s_w, s2c_r, s2c_w):
        if fd not in (rfd, wfd):
            os.close(fd)
    os.sched_setaffinity(0, {SERVER_CPU if server else CLIENT_CPU})
    rd, wr = os.fdopen(rfd, "r"), os.fdopen(wfd, "w")

    def send(doc) -> None:
        wr.write(json.dumps(doc) + "\n")
        wr.flush()

    def recv():
        return json.loads(rd.readline())

    half, size, warm = 4096, 8, 200
    clock = time.perf_counter_ns
    result: dict = {}
    try:
        buf = allocate(2 * half)
        ep = RdmaEndpoint(
            sel.device,
            sel.port,
            buf,
            send_offset=half,
            tx_depth=DEFAULT_TX_DEPTH,
            gid=sel.gid,
            gid_index=sel.gid_index,
            max_inline=AUTO_INLINE_LAT,
        )
        info = ep.local_info(random.randrange(1 << 24))
        send(info.to_json())
        remote = QpInfo.from_json(recv())
        ep.connect(
            plan_connection(
                info, remote, port_num=sel.port, gid_index=sel.gid_index, needed_bytes=half
            ),
            remote,
        )
        every = lat_signal_interval(DEFAULT_TX_DEPTH)
        view, last, mine = ep.view, size - 1, half + size - 1

        # 1. the loop as ibdiag runs it
        reset_areas(view, size, half)
        send("go")
        recv()
        if server:
            write_lat_responder(ep, size, 0, warm + iters, timeout_s=20, inline=True)
        else:
            write_lat_initiator(ep, size, 0, warm, timeout_s=20, inline=True)
            rtts = write_lat_initiator(ep, size, warm, iters, timeout_s=20, inline=True)
            result["loop_one_way_p50_us"] = _pctl(rtts, 0.5) / 2

        # 2. the same loop with a clock read around every call
        plain = ep.prepare("write", size, signaled=False, inline=True)
        signaled = ep.prepare("write", size, signaled=True, inline=True)
        post = ep.post
        fast = ep.poster(plain)  # what the loop posts unsignalled WRITEs with
        n = warm + iters
        t_post, t_wait, t_poll, t_turn, t_rtt = [], [], [], [], []
        reset_areas(view, size, half)
        send("go")
        recv()
        for k in range(n):
            i = n + k  # markers continue from phase 1's
            m = i % 255 + 1
            sig = k % every == every - 1 or k == n - 1
            if server:
                while view[last] != m:
                    pass
                a = clock()
                view[mine] = m
                post(signaled, i) if sig else fast()
                b = clock()
                if sig:
                    _await_completion(ep, i, 20)
                c = clock()
                if k >= warm:
                    t_turn.append(b - a)
                    if sig:
                        t_poll.append(c - b)
            else:
                view[mine] = m
                a = clock()
                post(signaled, i) if sig else fast()
                b = clock()
                while view[last] != m:
                    pass
                c = clock()
                if sig:
                    _await_completion(ep, i, 20)
                d = clock()
                if k >= warm:
                    t_post.append(b - a)
                    t_wait.append(c - b)
                    t_rtt.append(c - a)
                    if sig:
                        t_poll.append(d - c)
        send(t_turn if server else "done")
        peer = recv()
        if not server:
            result.update(
                instrumented_one_way_p50_us=_pctl(t_rtt, 0.5) / 2,
                client_post_p50_us=_pctl(t_post, 0.5),
                client_wait_for_answer_p50_us=_pctl(t_wait, 0.5),
                server_turnaround_p50_us=_pctl(peer, 0.5),
                client_poll_per_signalled_p50_us=_pctl(t_poll, 0.5),
                signal_every=every,
            )
            # 3. bare costs, client side only (the server waits on the pipe)
            reps = 20000
            a = clock()
            for _ in range(reps):
                clock()
            result["clock_read_us"] = (clock() - a) / reps / 1000
            a = clock()
            for _ in range(reps):
                view[last] != 0  # noqa: B015 - the spin's comparison, timed
            result["marker_compare_us"] = (clock() - a) / reps / 1000
            poll = ep.poll
            a = clock()
            for _ in range(reps):
                poll(POLL_BATCH)
            result["empty_ep_poll_us"] = (clock() - a) / reps / 1000
            cq = ep.cq
            a = clock()
            for _ in range(reps):
                cq.poll(POLL_BATCH)
            result["empty_pyverbs_poll_us"] = (clock() - a) / reps / 1000
            # posts into the peer's buffer with nobody answering: ep.post, ep.poster, pyverbs' post_send
            wrapped, bare, raw = [], [], []
            qp, head = plain.qp, plain.head
            for rnd in range(60):
                for j in range(every - 1):
                    if rnd % 3 == 2:
                        a = clock()
                        qp.post_send(head)
                        raw.append(clock() - a)
                    elif rnd % 3 == 1:
                        a = clock()
                        fast()
                        bare.append(clock() - a)
                    else:
                        a = clock()
                        post(plain, j)
                        wrapped.append(clock() - a)
                post(signaled, 1 << 40)
                _await_completion(ep, 1 << 40, 20)
            result["ep_post_unsignalled_p50_us"] = _pctl(wrapped, 0.5)
            result["ep_poster_unsignalled_p50_us"] = _pctl(bare, 0.5)
            result["pyverbs_post_send_p50_us"] = _pctl(raw, 0.5)
            send("bye")
        else:
            recv()  # keep the QP up until the client's posts into this buffer are done
        del peer
        ep.close()
        buf.close()
    except BaseException:
        if not server:
            raise
        import traceback

        traceback.print_exc()
        os._exit(1)
    if server:
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if status:
        raise SystemExit(f"the profile's server end failed (wait status {status})")
    return result


def render(doc: dict) -> str:
    lines = [
        f"Soft-RoCE ({doc['device']}, kernel {doc['kernel']}, qemu TCG guest): {doc['runs']} alternating pairs; medians; "
        f"ratio = ibdiag / perftest (spread = min..max of the pairs)",
        f"{'metric':<36} {'ibdiag':>10} {'perftest':>10} {'unit':>5} {'ratio':>6} {'spread':>12}  target",
    ]
    for r in doc["results"]:
        lines.append(
            f"{r['metric']:<36} {r['ibdiag_median']:>10.4g} {r['perftest_median']:>10.4g} {r['unit']:>5} {r['ratio_median']:>6.2f} "
            f"{r['ratio_min']:>5.2f}..{r['ratio_max']:<5.2f}  {r['target']}"
        )
    prof = doc.get("latency_profile")
    if prof:
        lines.append(
            "8-byte WRITE ping-pong per call (us, p50; client and server ends pinned like the benchmark's):"
        )
        lines.extend(
            f"  {k:<38} {v:.3f}" if isinstance(v, float) else f"  {k:<38} {v}"
            for k, v in prof.items()
        )
    return "\n".join(lines)


# --- on the host ---------------------------------------------------------------------------------


def on_host(args: argparse.Namespace, argv: list[str]) -> int:
    from tests.rdmavm import vm

    out = REPO / "build" / "rdmavm" / "bench"
    cmd = " ".join([sys.executable, "benchmarks/rdma_vs_perftest.py", "--in-guest", *argv])
    try:
        run = vm.run(cmd, out, timeout_s=args.guest_timeout)
    except vm.Unavailable as e:
        print(f"cannot boot the RDMA test bed: {e}", file=sys.stderr)
        sys.path.insert(0, str(REPO / "benchmarks"))
        from ratios import append_summary

        append_summary(
            f"rdma_vs_perftest: not measured (cannot boot the RDMA test bed: {e})"
        )  # make bench: say why these ratios are missing
        return 3
    sys.stdout.write(run.log)
    if run.rc != 0:
        print(f"guest exit {run.rc}; console: {out / 'console.log'}", file=sys.stderr)
        return 1
    report_ratios(json.loads((out / "rdma_vs_perftest.json").read_text()))
    return 0


def report_ratios(doc: dict) -> None:
    """Every comparison through benchmarks/ratios.py: printed, and appended to ``make bench``'s summary."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from ratios import Paired, report

    for r in doc["results"]:
        target = r["target"].split()
        op, value = (target[0], float(target[1])) if len(target) >= 2 else (None, None)
        report(
            f"rdma_vs_perftest {r['metric']}",
            Paired(tuple(r["ibdiag"]), tuple(r["perftest"])),
            op,
            value,
            r["unit"],
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="alternating pairs of each measurement")
    ap.add_argument("--duration", type=float, default=1.0, help="seconds per bandwidth measurement")
    ap.add_argument("--bw-sizes", default="64K,1M", help="bandwidth sizes (target at >= 64K)")
    ap.add_argument("--rate-sizes", default="8,4K", help="message-rate sizes")
    ap.add_argument(
        "--lat-iters", type=int, default=1000, help="latency ping-pongs per measurement"
    )
    ap.add_argument(
        "--profile-iters",
        type=int,
        default=2000,
        help="ping-pongs of the per-call latency profile (0: none)",
    )
    ap.add_argument(
        "--guest-timeout", type=float, default=1500, help="seconds before the guest is killed"
    )
    ap.add_argument("--in-guest", action="store_true", help=argparse.SUPPRESS)
    argv = sys.argv[1:]
    args = ap.parse_args(argv)
    if args.in_guest:
        return in_guest(args)
    return on_host(args, [a for a in argv if a != "--in-guest"])


if __name__ == "__main__":
    raise SystemExit(main())
