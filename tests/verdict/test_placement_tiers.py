"""``verdict --fabric`` on a three-tier fat tree (issue 25): a job spanning pods loads the spines' uplinks
to the cores; the ceiling is the least over the leaves and the spines. Every ceiling here is worked out
by hand from the fabric below.

The fabric (tests/support/fabric_topology.py ``three_tier()``): 2 pods x 2 leaves x 4 hosts (one adapter,
rail 0), 2 spines per pod, 2 cores, every link 4x HDR = 200 Gb/s. A leaf: 4 host links, 2 uplinks to
each spine of its pod (800 Gb/s up). A spine: 4 links down (800), 2 to each core (800 up). Pod 1 is
leaf-p1-1 (gpu01-04), leaf-p1-2 (gpu05-08), spine-p1-1, spine-p1-2; pod 2 gpu09-16. Here spine-p1-1's
two links to core-2 (its ports 7, 8) are out: it has 400 Gb/s up, its pod's other spine 800.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.fabric_topology import remove_link, three_tier

JOB = ["verdict", "--params", "8e9", "--dtype", "bf16", "--ranks", "32", "--ranks-per-node", "2"]
JOB += ["--compute-s", "2", "--busbw", "12", "-o", "json"]
POD1 = [f"gpu{i:02d}" for i in range(1, 9)]
POD2 = [f"gpu{i:02d}" for i in range(9, 17)]
ACROSS = [h for pair in zip(POD1, POD2, strict=True) for h in pair]


@pytest.fixture
def net(tmp_path: Path) -> Path:
    t = three_tier()
    remove_link(t, "spine-p1-1", 7)
    remove_link(t, "spine-p1-1", 8)
    path = tmp_path / "three.net"
    path.write_text(t.text())
    return path


def verdict(net: Path, order: list[str]):
    r = run_cli(
        *JOB, "--fabric", str(net), "--nodes", "gpu[01-16]", "--rank-order", ",".join(order)
    )
    assert r.exception is None and r.exit_code in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    (f,) = [x for x in doc["findings"] if x["check"] == "verdict.placement"]
    return doc["placement"], f


def spine_units(ceiling):
    return {x["spine"]: x["load_units"] for x in ceiling["spines"]}


def test_a_ring_across_pods_is_bound_by_the_spine_short_of_core_uplinks(net):
    p, f = verdict(net, ACROSS)
    ring = p["ceilings"]["ring"]
    # gpu01, gpu09, gpu02, gpu10, ...: all 16 ring edges cross pods, 8 leave each pod. Each spine of a
    # pod has half its pod's capacity down (800 of 1600): 4 units each. spine-p1-1: 400 / 4 = 100 Gb/s
    # per rail, below the 200 Gb/s host link; the others 800 / 4 = 200. Each leaf: its 4 nodes' edges
    # all leave it, 800 / 4 = 200, not below. b = 100: 1 rail x 100 / 8 = 12.5 GB/s.
    assert spine_units(ring) == {"spine-p1-1": 4, "spine-p1-2": 4, "spine-p2-1": 4, "spine-p2-2": 4}
    assert {x["leaf"]: x["load_units"] for x in ring["leaves"]} == {
        "leaf-p1-1": 4,
        "leaf-p1-2": 4,
        "leaf-p2-1": 4,
        "leaf-p2-2": 4,
    }
    assert ring["busbw_gbs"] == pytest.approx(12.5) and ring["binding"] == "spine-p1-1"
    assert p["pods"] == 2
    # Leaf by leaf (gpu01..gpu16) only 08 -> 09 and 16 -> 01 cross pods: 0.5 unit per spine, 400 / 0.5 =
    # 800 > 200: the host links bind, 25 GB/s.
    assert p["leaf_ordered_ring"]["busbw_gbs"] == pytest.approx(25.0)
    assert f["severity"] == "warn" and "ring 12.5 GB/s (bound by spine-p1-1)" in f["message"]
    assert "placement is the cause" in f["hint"]


def test_all_to_all_across_pods_whatever_the_order(net):
    for order in (ACROSS, POD1 + POD2):
        p, f = verdict(net, order)
        a2a = p["ceilings"]["alltoall"]
        # n = 16: a pod holds k = 8, 8 x 8 / 15 = 64/15 units, 32/15 per spine: spine-p1-1 400 / (32/15)
        # = 187.5 Gb/s < 200; a leaf (k = 4) 4 x 12 / 15 = 3.2 units, 800 / 3.2 = 250. 187.5 / 8 GB/s.
        assert spine_units(a2a)["spine-p1-1"] == pytest.approx(32 / 15, abs=1e-5)
        assert a2a["busbw_gbs"] == pytest.approx(187.5 / 8) and a2a["binding"] == "spine-p1-1"


def test_a_job_inside_one_pod_loads_no_spine_uplink(net):
    r = run_cli(*JOB, "--fabric", str(net), "--nodes", "gpu[01-08]", "--rank-order", "gpu[01-08]")
    p = json.loads(r.stdout)["placement"]
    assert p["pods"] == 1
    for algo in ("ring", "tree", "alltoall"):
        assert set(spine_units(p["ceilings"][algo]).values()) == {0}
        assert p["ceilings"][algo]["busbw_gbs"] == pytest.approx(25.0)


def test_tree_crossings_are_counted_per_pod(net):
    r = run_cli(
        *JOB,
        "--fabric",
        str(net),
        "--nodes",
        "gpu[01,05,09,13]",
        "--rank-order",
        "gpu[01,05,09,13]",
    )
    p = json.loads(r.stdout)["placement"]
    # NCCL's double binary tree over 4 ranks: (child, parent) 1-2, 2-0, 3-2 and 0-1, 1-3, 2-1. Ranks 0, 1
    # in pod 1, 2, 3 in pod 2: 1-2, 2-0, 1-3, 2-1 cross, each 4 / (4 x 3) = 1/3 b each way: 4/3 units
    # per pod, 2/3 per spine; spine-p1-1 400 / (2/3) = 600 > 200: host links, 25 GB/s.
    tree = p["ceilings"]["tree"]
    assert spine_units(tree) == pytest.approx(dict.fromkeys(
        ("spine-p1-1", "spine-p1-2", "spine-p2-1", "spine-p2-2"), 2 / 3
    ), abs=1e-5)  # fmt: skip
    assert tree["busbw_gbs"] == pytest.approx(25.0) and tree["binding"] == "host links"


def test_a_spine_bound_ring_in_leaf_order_asks_for_fewer_pods(tmp_path):
    # spine-p1-1's four core uplinks (ports 5-8) trained 1x SDR: 4 x 2 = 8 Gb/s up. Leaf by leaf
    # (gpu01..gpu16) 08 -> 09 leaves pod 1: 1 unit, half of it on spine-p1-1: 8 / 0.5 = 16 Gb/s per
    # rail: 1 x 16 / 8 = 2 GB/s, and no better order of the same nodes by leaf: fewer pods is the remedy.
    t = three_tier()
    for port in (5, 6, 7, 8):
        t.set_link("spine-p1-1", port, "1xSDR")
    net = tmp_path / "slow.net"
    net.write_text(t.text())
    r = run_cli(*JOB, "--fabric", str(net), "--nodes", "gpu[01-16]")
    doc = json.loads(r.stdout)
    ring = doc["placement"]["ceilings"]["ring"]
    assert ring["binding"] == "spine-p1-1" and ring["busbw_gbs"] == pytest.approx(2.0)
    assert spine_units(ring)["spine-p1-1"] == pytest.approx(0.5)
    (f,) = [x for x in doc["findings"] if x["check"] == "verdict.placement"]
    assert f["severity"] == "warn"
    assert "span 2 pods whose spines' uplinks to the cores cannot carry it" in f["hint"]
    assert "fix spine-p1-1's uplinks" in f["hint"]
