"""``bench p2p --transport rdma`` between two kernels: node 1 (here) -> ``bench serve`` on node 0.

Two qemu guests, each with Soft-RoCE over its eth0, joined by a qemu socket netdev: every byte
crosses two rxe devices and the emulated wire. ``ib_write_bw`` between the same two nodes, in the
same run, is the yardstick: emulation is slow and noisy (tens of MB/s), so the assertion is a
sane fraction, not a performance threshold. Both numbers are left in pair-results.json.
"""

from __future__ import annotations

import json
import subprocess
import time

from tests.rdmavm.guest.conftest import DEVICE
from tests.rdmavm.pair.conftest import PEER, client_env, p2p_args, record

MIB = 2**20
BW_ITERS = 40
PERFTEST_PORT = 18515


def _gid_index() -> int:
    from ibdiag.bench.p2p.rdma.device import select_rdma
    from ibdiag.node.sysfs import SysfsRoot

    return select_rdma(SysfsRoot("/"), DEVICE, 1, None).gid_index


def ib_write_bw(node0, size: int, iters: int, tries: int = 3) -> float | None:
    """``ib_write_bw -s SIZE -n ITERS`` from here to a perftest server on node 0: bandwidth, GB/s.

    Tried again with four times the iterations when perftest prints 0.00 MB/s (it did once, for 40 MiB
    moved in seconds: its cycle clock under qemu's emulation came out unusable); None when every try
    did, which says nothing of the link or of ibdiag: the comparison is then left out, said so."""
    from ibdiag.bench.importers.perftest import parse_log

    base = [
        "ib_write_bw",
        "-d",
        DEVICE,
        "-i",
        "1",
        "-x",
        str(_gid_index()),
        "-p",
        str(PERFTEST_PORT),
        "-F",
        "-s",
        str(size),
        "-n",
        str(iters),
    ]
    for attempt in range(tries):
        if attempt:
            base[-1] = str(iters * 4**attempt)
        srv = node0.call("perftest", argv=base)["id"]
        for _ in range(60):
            r = subprocess.run([*base, PEER], capture_output=True, text=True, timeout=180)
            if r.returncode == 0:
                break
            time.sleep(1)  # the server was not listening yet
        else:
            raise AssertionError(f"ib_write_bw to node 0 failed: {r.stderr.strip()[-800:]}")
        node0.call("output", id=srv, timeout=60)
        runs = parse_log(r.stdout, "ib_write_bw")
        assert runs and runs[0].results, r.stdout  # perftest's output is read, whatever it says
        bw = runs[0].results[0].bw_gbs
        if bw:
            return bw
    print(
        f"ib_write_bw printed 0.00 MB/s on {tries} tries (its clock under emulation):\n{r.stdout}"
    )
    return None


def test_bw_and_lat_across_two_kernels_beside_ib_write_bw(remote_server, cli, token, node0):
    s = remote_server()
    ours = cli(
        *p2p_args(
            s.port,
            "--sizes",
            "1M",
            "--mode",
            "bw",
            "--iters",
            str(BW_ITERS),
            "--warmup",
            "2",
            "-o",
            "json",
        ),
        env=client_env(token),
    )
    assert ours.exception is None, ours.exception
    assert ours.exit_code in (0, 1), (
        ours.stderr
    )  # 1 only for a line-rate finding (emulation is far below rxe's 10 Gb/s)
    doc = json.loads(ours.stdout)
    (row,) = doc["results"]
    assert row["bytes"] == MIB and row["bw_gbs"] > 0
    assert doc["client"]["device"] == doc["server"]["device"] == DEVICE
    assert PEER in doc["peer"]
    theirs = ib_write_bw(node0, MIB, BW_ITERS)
    lat = cli(
        *p2p_args(
            s.port,
            "--sizes",
            "8",
            "--mode",
            "lat",
            "--iters",
            "200",
            "--warmup",
            "10",
            "-o",
            "json",
        ),
        env=client_env(token),
    )
    assert lat.exit_code in (0, 1), lat.stderr
    (lrow,) = json.loads(lat.stdout)["results"]
    ratio = None if theirs is None else row["bw_gbs"] / theirs
    record(
        "bw_1MiB",
        {"ibdiag_gbs": row["bw_gbs"], "ib_write_bw_gbs": theirs, "ratio": ratio, "iters": BW_ITERS},
    )
    record("lat_8B_us", lrow["lat_us"])
    print(
        f"1 MiB WRITE node1->node0: ibdiag {row['bw_gbs'] * 1e3:.1f} MB/s, ib_write_bw "
        + ("unusable" if theirs is None else f"{theirs * 1e3:.1f} MB/s, ratio {ratio:.2f}")
        + f"; 8 B lat p50 {lrow['lat_us']['p50']:.0f} us"
    )
    # a sane fraction: the same verbs over the same two rxe devices; 0.92 when first tried
    if ratio is not None:
        assert 0.25 <= ratio <= 4.0, f"ibdiag {row['bw_gbs']:.4f} GB/s vs ib_write_bw {theirs} GB/s"
    # one-way latency over two emulated kernels and a socket: above a microsecond, below 100 ms
    assert 1 < lrow["lat_us"]["p50"] <= lrow["lat_us"]["max"] and lrow["lat_us"]["p50"] < 100_000, (
        lrow["lat_us"]
    )
    log, rc = s.log()
    assert rc is None and "Traceback" not in log, log


def _hw(name: str) -> int:
    from tests.rdmavm.guest.conftest import PORT_DIR

    return int((PORT_DIR / "hw_counters" / name).read_text())


def _roce_finding(doc: dict) -> dict:
    found = [
        f
        for f in doc["findings"]
        if f["check"] == "counters.roce_errors" and f["subject"] == f"{DEVICE}:1"
    ]
    assert len(found) == 1, [(f["check"], f["subject"]) for f in doc["findings"]]
    return found[0]


def test_counters_on_both_nodes_judge_the_traffic_between_them(
    remote_server, cli, token, node0, tmp_path
):
    """``counters --since`` on each node over a window with 16 MiB from node 1 to node 0: each node's
    rxe0 port gets its transport-counter finding, and node 0's counters saw node 1's packets."""
    before1 = tmp_path / "before.json"
    b = cli("counters", "-o", "json")
    assert b.exit_code in (0, 1), b.stderr
    before1.write_text(b.stdout)
    r0 = node0.call("ibdiag", args=["counters", "-o", "json"], save="/root/counters-before.json")
    assert r0["rc"] in (0, 1), r0["stderr"]
    sent0, rcvd0 = _hw("sent_pkts"), node0.call("hw", name="rcvd_pkts")["value"]
    s = remote_server()
    r = cli(
        *p2p_args(s.port, "--sizes", "1M", "--iters", "16", "--warmup", "0", "-o", "json"),
        env=client_env(token),
    )
    assert r.exit_code in (0, 1), r.stderr
    sent = _hw("sent_pkts") - sent0
    rcvd = node0.call("hw", name="rcvd_pkts")["value"] - rcvd0
    assert sent >= 16 * MIB // 4096, f"node 1 sent {sent} packets for 16 x 1 MiB"
    assert rcvd >= 16 * MIB // 4096, f"node 0 received {rcvd} packets for 16 x 1 MiB"
    after1 = cli("counters", "--since", str(before1), "-o", "json")
    after0 = node0.call(
        "ibdiag", args=["counters", "--since", "/root/counters-before.json", "-o", "json"]
    )
    results = {}
    for node, rc, out, err in (
        ("node1", after1.exit_code, after1.stdout, after1.stderr),
        ("node0", after0["rc"], after0["stdout"], after0["stderr"]),
    ):
        assert rc in (0, 1), f"{node}: exit {rc}: {err}"
        assert "Traceback" not in err, err
        doc = json.loads(out)
        f = _roce_finding(doc)
        assert f["severity"] in ("ok", "warn", "fail"), f
        assert (rc == 1) == (doc["status"] == "fail"), (rc, doc["status"])
        results[node] = {"severity": f["severity"], "message": f["message"]}
    record("counters_roce_errors", {"sent_pkts_node1": sent, "rcvd_pkts_node0": rcvd, **results})
