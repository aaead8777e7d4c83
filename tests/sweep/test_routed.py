"""``ibdiag sweep`` on a routed fabric with real ECMP: 8 host namespaces on 2 leaf routers, 4 spine routers,
one multipath route per leaf hashed per flow, every link shaped with ``tbf`` to the same 100 Mbit/s
(1:1: no bottleneck but the collisions of the sweep's own tests). tests/support/routed_fabric.py
builds it; each spine counts every ordered host pair's bytes (nftables), sampled while the sweep runs,
so which spine each test's flow took — and which flows met on one leaf-spine link — is measured.

The ranks are interleaved over the leaves (rank r on leaf r mod 2), the order in which the sweep once
measured its own collisions: a ring whose every edge crosses the spines, random rounds that pair
ranks wherever they sit. One process per host, a Slurm-style job (rank 0 serves the store).

* healthy, ring and random, no fabric description (``ibdiag sweep`` itself): nothing is named; slow
  results of shared rounds are re-tested alone;
* a host's cable at a quarter of the rate: that node is named, and nothing else;
* healthy, ring and random, with the fabric's cabling plan (the library entry point: ``--fabric`` is not
  on the command line yet): the rounds keep tests apart — no two flows ever crossed one leaf-spine
  link in the same direction, as the spines' counters show — and nothing is named.

Each sweep gets a fresh fabric (new hash seeds, empty queues). Thresholds as tests/sweep/test_netns.py's
(the hosts share two busy CPUs): nothing within 25 % of the rail's typical link is slow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.env import REPO
from tests.support.routed_fabric import RoutedFabric, SpineSampler, collisions, routed_fabric
from tests.support.sweep import slurm_env

RATE = "100mbit"
HOSTS = 8
CONFIG = "[sweep]\nfloor_share = 0.08333\nz_limit = 3\nstart_timeout_s = 120\n"
PORT = 29555
COMMON = ("--sizes", str(2**20), "--duration", "1", "--timeout", "5")


def test_the_collision_finder_sees_two_flows_on_one_spine_link_and_not_two_apart():
    """The spines' counters as the sampler reads them (samples written here): two flows from leaf 0
    through spine 1 for a second are a collision; a flow leaf 0 -> 1 and one leaf 1 -> 0 through the
    same spine use its two directions, and flows that follow each other never met."""
    fab = RoutedFabric("t", (), (), ("s0", "s1"), (0, 0, 1, 1), RATE, ("a0", "a1", "b0", "b1"))
    sampler = SpineSampler(fab, period_s=0.2)
    mb = 2_500_000  # bytes in 0.2 s at 100 Mbit/s
    totals: dict[tuple[str, str], int] = {}
    for step in range(20):
        t = step * 0.2
        if 2 <= step < 8:  # a0 -> b0 and a1 -> b1, both through spine 1, at half the rate each
            for k in (("a0", "b0"), ("a1", "b1")):
                totals[k] = totals.get(k, 0) + mb // 2
        if 10 <= step < 16:  # b0 -> a0 and a1 -> b1 through spine 1: opposite directions
            for k in (("b0", "a0"), ("a1", "b1")):
                totals[k] = totals.get(k, 0) + mb
        sampler.samples[1].append((t, dict(totals)))
        sampler.samples[0].append((t, {}))
    found = collisions(fab, sampler)
    assert [(s, f) for s, *f, _run in found] == [(1, ["a0", "b0", "a1", "b1"])]
    assert abs(found[0][-1] - 1.2) < 1e-6  # six back-to-back samples of 0.2 s


def interleaved(rank: int) -> int:
    """The host of rank r: ranks alternate between the two leaves."""
    return rank // 2 + (HOSTS // 2) * (rank % 2)


def run_job(
    fab: RoutedFabric, tmp_path: Path, *args: str, plan: Path | None = None
) -> tuple[dict, SpineSampler]:
    """One rank per host, rank r on host ``interleaved(r)``: ``ibdiag sweep`` over TCP (with ``plan``:
    ``--fabric PLAN``, read by rank 0 alone); rank 0's saved document and the samples."""
    cfg = tmp_path / "ibdiag.toml"
    cfg.write_text(CONFIG)
    save = tmp_path / "sweep.json"
    cmd = [sys.executable, "-m", "ibdiag", "sweep", "--transport", "tcp", *COMMON]
    cmd += ["--config", str(cfg), "--save", str(save), "-o", "line", *args]
    if plan is not None:
        cmd += ["--fabric", str(plan)]
    procs: list[subprocess.Popen[str]] = []
    logs = []
    with SpineSampler(fab) as sampler:
        try:
            for r in range(HOSTS):
                env = {
                    **slurm_env(r, HOSTS, PORT),
                    "MASTER_ADDR": fab.address(interleaved(0)),
                    "PYTHONPATH": str(REPO),
                    "OMP_NUM_THREADS": "1",
                }
                log = open(tmp_path / f"rank{r}.log", "w")  # closed below
                logs.append(log)
                procs.append(
                    subprocess.Popen(
                        [*fab.exec_prefix(interleaved(r)), *cmd],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=env,
                        cwd=REPO,
                        text=True,
                        start_new_session=True,
                    )
                )
            deadline = time.monotonic() + 300
            for p in procs:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, 9)
                    p.wait(timeout=10)
            for log in logs:
                log.close()
    rank0 = (tmp_path / "rank0.log").read_text()
    assert save.exists(), rank0[-3000:]
    return json.loads(save.read_text()), sampler


def named(doc: dict) -> list[tuple[str, str, str]]:
    """Every node and link finding that is not ok (fail or warn)."""
    return sorted(
        (f["check"], f["severity"], f["subject"])
        for f in doc["findings"]
        if f["check"] in ("sweep.node", "sweep.link", "sweep.unreachable") and f["severity"] != "ok"
    )


def cross_leaf_tests(fab: RoutedFabric, doc: dict) -> list[tuple[str, str]]:
    """(sender, receiver) addresses of every test that crossed the spines (the measuring end sends)."""
    addr = [n["address"] for n in doc["nodes"]]
    leaf = {fab.address(h): fab.leaf_of[h] for h in range(HOSTS)}
    return [
        (addr[row[5]], addr[row[3]])
        for row in doc["pairs"]["rows"]
        if row[7] is not None and leaf[addr[row[5]]] != leaf[addr[row[3]]]
    ]


def spine_bytes(sampler: SpineSampler) -> dict[tuple[str, str], int]:
    """Bytes per ordered host pair over all spines, from each spine's last sample."""
    out: dict[tuple[str, str], int] = {}
    for samples in sampler.samples:
        for key, n in (samples[-1][1] if samples else {}).items():
            out[key] = out.get(key, 0) + n
    return out


def check_watched(fab: RoutedFabric, doc: dict, sampler: SpineSampler) -> None:
    """The spines saw every cross-leaf test, its data from the measuring end to the serving one."""
    seen = spine_bytes(sampler)
    tests = cross_leaf_tests(fab, doc)
    assert tests
    for src, dst in tests:
        assert seen.get((src, dst), 0) > 10 * seen.get((dst, src), 0) > 0, (src, dst, seen)


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.parametrize("pattern", ["ring", "random"])
def test_a_healthy_routed_fabric_names_nothing_in_interleaved_order(tmp_path, pattern):
    with routed_fabric(rate=RATE, tag="a") as fab:
        doc, sampler = run_job(fab, tmp_path, "--pattern", pattern)
    assert named(doc) == [], json.dumps(doc["findings"], indent=1)
    assert [n["host"] for n in doc["nodes"]] == [
        fab.host_name(interleaved(r)) for r in range(HOSTS)
    ]
    check_watched(fab, doc, sampler)
    c = doc["sweep"]["confirmation"]
    assert c["shared_tests"] > 0 and c["links_confounded"] == 0
    # a flow that met another on a spine link was re-tested alone, unless another test of that link
    # (beside others, so a lower bound) was fine anyway
    limit = doc["rails"][0]["limit_bw_gbs"]
    addr = [n["address"] for n in doc["nodes"]]
    clean: set[tuple[str, str]] = set()
    best: dict[tuple[str, str], float] = {}
    for r in doc["pairs"]["rows"]:
        if r[7] is None:
            continue
        flow = (addr[r[5]], addr[r[3]])
        best[flow] = max(best.get(flow, 0.0), r[7])
        if not r[12]:
            clean.add(flow)
    for _s, a_src, a_dst, b_src, b_dst, _run in collisions(fab, sampler):
        for flow in ((a_src, a_dst), (b_src, b_dst)):
            assert flow in clean or best[flow] > limit, (flow, best.get(flow), limit)


@pytest.mark.slow
@pytest.mark.root
def test_a_slow_host_cable_is_named_alone(tmp_path):
    slow_host = interleaved(5)
    with routed_fabric(rate=RATE, tag="b") as fab:
        fab.slow_host_link(slow_host, "25mbit")
        doc, _ = run_job(fab, tmp_path, "--pattern", "random")
    host = fab.host_name(slow_host)
    failing = [(c, s) for c, sev, s in named(doc) if sev == "fail"]
    assert failing == [("sweep.node", f"{host} (rank 5)")], json.dumps(doc["findings"], indent=1)
    assert [x for x in named(doc) if x[1] == "warn"] == [], named(doc)
    bad = next(n for n in doc["nodes"] if n["rank"] == 5)
    median = doc["rails"][0]["median_bw_gbs"]
    assert bad["status"] == "bad" and bad["ends"][0]["bw_gbs"] < 0.4 * median


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.parametrize("pattern", ["ring", "random"])
def test_with_the_cabling_plan_no_two_tests_of_a_round_share_a_spine_link(tmp_path, pattern):
    with routed_fabric(rate=RATE, tag="c") as fab:
        plan = tmp_path / "fabric.csv"
        plan.write_text(fab.plan_csv())
        doc, sampler = run_job(fab, tmp_path, "--pattern", pattern, plan=plan)
    assert collisions(fab, sampler) == []
    check_watched(fab, doc, sampler)
    assert named(doc) == [], json.dumps(doc["findings"], indent=1)
    use = doc["sweep"]["fabric"]
    assert use["routing"] == "hashed" and use["proven"] and use["unplaced"] == []
    assert use["max_link_load"] == 1
    assert not any(
        row[12] for row in doc["pairs"]["rows"]
    )  # no test ran beside a possible collision
    assert doc["sweep"]["confirm_rounds"] == 0
    assert doc["sweep"]["first_pass_rounds"] >= doc["sweep"]["pattern_rounds"]
