"""``ibdiag verdict --fabric ... --nodes ... --rank-order ...``: the fabric's ceiling for a job where it
landed. Every expected number is worked out here by hand, not by the code under test.

The fabric (tests/support/fabric_topology.py): 16 hosts x 2 rails, 2 leaves per rail (gpu01-08 on
leaf-rR-1, gpu09-16 on leaf-rR-2), 2:1 — each leaf has 8 host links and 4 uplinks, all 4x HDR = 200 Gb/s,
so 800 Gb/s of uplinks per leaf. Payload share 1 ([verdict] link_payload_share's default). b is the busbw
one rail carries, in Gb/s on its wire; the job's busbw ceiling is 2 rails x b / 8 (GB/s).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ibdiag.fabric.placement import double_tree
from tests.support.cli import run_cli
from tests.support.env import REPO
from tests.support.fabric_topology import rail_fat_tree
from tests.support.ibsim import SimFabric, need_simulator

JOB = ["verdict", "--params", "8e9", "--dtype", "bf16", "--ranks", "32", "--ranks-per-node", "2"]
JOB += ["--compute-s", "2", "--busbw", "24", "-o", "json"]
LEAF_ORDER = [f"gpu{i:02d}" for i in range(1, 17)]
INTERLEAVED = [h for pair in zip(LEAF_ORDER[:8], LEAF_ORDER[8:], strict=True) for h in pair]


FIXTURE = REPO / "fixtures" / "fabric" / "two-to-one.net"


@pytest.fixture
def net() -> Path:
    return FIXTURE


def test_the_bundled_2to1_fabric_is_the_generators():
    """README's worked example runs on fixtures/fabric/two-to-one.net: it must stay this fabric."""
    assert FIXTURE.read_text() == (
        rail_fat_tree(hosts=16, rails=2, leaves_per_rail=2, oversubscription=2).text()
    )


def verdict(*args: str, env=None):
    r = run_cli(*JOB, *args, env=env)
    assert r.exception is None and r.exit_code in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    (f,) = [x for x in doc["findings"] if x["check"] == "verdict.placement"]
    return doc["placement"], f


def test_leaf_ordered_ranks_are_not_slowed_by_a_2to1_leaf(net):
    p, f = verdict("--fabric", str(net), "--nodes", "gpu[01-16]")
    # Ring gpu01..gpu16, per rail: gpu08 -> gpu09 leaves leaf 1, gpu16 -> gpu01 leaves leaf 2: one
    # edge per leaf, 800 Gb/s / 1 = 800 Gb/s > the 200 Gb/s host link, so b = 200: 2 x 200 / 8 = 50 GB/s.
    assert p["ceilings"]["ring"]["busbw_gbs"] == pytest.approx(50.0)
    assert p["ceilings"]["ring"]["binding"] == "host links"
    assert f["severity"] == "ok" and "ring 50 GB/s" in f["message"]
    assert p["leaves"] == [{"leaf": f"leaf-r{r}-{n}", "nodes": 8} for r in (0, 1) for n in (1, 2)]
    assert p["leaf_ordered_ring"] is None


def test_the_same_hosts_interleaved_are_capped_by_the_leaf_uplinks(net):
    p, f = verdict(
        "--fabric", str(net), "--nodes", "gpu[01-16]", "--rank-order", ",".join(INTERLEAVED)
    )
    # Every ring edge crosses: 8 edges leave each leaf per rail, 800 Gb/s / 8 = 100 Gb/s < 200:
    # b = 100, 2 x 100 / 8 = 25 GB/s; the leaf-by-leaf order would reach 50 GB/s.
    ring = p["ceilings"]["ring"]
    assert ring["busbw_gbs"] == pytest.approx(25.0) and ring["binding"] == "leaf-r0-1"
    assert ring["leaves"][0]["load_units"] == 8 and ring["leaves"][0]["up_gbps"] == 800
    assert p["leaf_ordered_ring"]["busbw_gbs"] == pytest.approx(50.0)
    assert f["severity"] == "warn" and f["value"] == pytest.approx(25.0)
    assert "ring 25 GB/s (bound by leaf-r0-1)" in f["message"]
    # measured 24 GB/s against the ring's 25: 96%, the placement explains it
    assert (
        "is 96% of the ring's: the network, where this job landed, is the bottleneck"
        in f["message"]
    )
    assert "placement is the cause" in f["hint"] and "reach 50 GB/s on a ring" in f["hint"]


def test_a_job_packed_on_one_leaf_gets_its_host_links(net):
    p, f = verdict("--fabric", str(net), "--nodes", "gpu[01-08]", "--rank-order", "gpu[08,01-07]")
    # Nothing leaves leaf 1 (of either rail): b = 200 Gb/s for every algorithm, 50 GB/s.
    for algo in ("ring", "tree", "alltoall"):
        assert p["ceilings"][algo]["busbw_gbs"] == pytest.approx(50.0)
    assert f["severity"] == "ok"
    assert [x["leaf"] for x in p["leaves"]] == ["leaf-r0-1", "leaf-r1-1"]


def test_all_to_all_loads_uplinks_whatever_the_order(net):
    ordered, _ = verdict("--fabric", str(net), "--nodes", "gpu[01-16]")
    mixed, _ = verdict(
        "--fabric", str(net), "--nodes", "gpu[01-16]", "--rank-order", ",".join(INTERLEAVED)
    )
    # n = 16, k = 8 per leaf: 8 x 8 / 15 = 4.2667 b leave each leaf; 800 / 4.2667 = 187.5 Gb/s < 200:
    # 2 x 187.5 / 8 = 46.875 GB/s in both orders — while the ring is 50 GB/s ordered, 25 interleaved.
    for p in (ordered, mixed):
        assert p["ceilings"]["alltoall"]["busbw_gbs"] == pytest.approx(46.875)
        assert p["ceilings"]["alltoall"]["leaves"][0]["load_units"] == pytest.approx(64 / 15)
    assert ordered["ceilings"]["ring"]["busbw_gbs"] > mixed["ceilings"]["ring"]["busbw_gbs"]


def test_the_double_binary_tree_is_nccls():
    # ncclGetBtree for 4 ranks: 0 is the root with child 2; 1 and 3 hang off 2. The second tree mirrors
    # it (r -> 3 - r): 3 the root with child 1; 2 and 0 hang off 1.
    first, second = double_tree(4)
    assert sorted(first) == [(1, 2), (2, 0), (3, 2)]
    assert sorted(second) == [(0, 1), (1, 3), (2, 1)]
    # 5 ranks: 0 -> 4 -> 2 -> {1, 3}; odd, so the second tree is the first shifted by one rank.
    first, second = double_tree(5)
    assert sorted(first) == [(1, 2), (2, 4), (3, 2), (4, 0)]
    assert sorted(second) == [(0, 1), (2, 3), (3, 0), (4, 3)]


def test_tree_ceiling_for_four_nodes_on_two_leaves(tmp_path):
    # 4 hosts x 1 rail, 2 leaves (gpu01-02, gpu03-04), 1 uplink each (2:1), 200 Gb/s links.
    t = rail_fat_tree(hosts=4, rails=1, leaves_per_rail=2, spines=1, oversubscription=2)
    net = tmp_path / "f.net"
    net.write_text(t.text())
    p, _ = verdict("--fabric", str(net), "--nodes", "gpu[01-04]")
    # Trees over ranks 0-3 (above): first 1-2, 2-0, 3-2; second 0-1, 1-3, 2-1. Leaves {0,1} and {2,3}:
    # crossing edges 1-2, 2-0 (first) and 1-3, 2-1 (second): 4 edges, each n/(4(n-1)) = 4/12 = 1/3 b
    # each way: 4/3 b on each leaf's 200 Gb/s uplink -> b = 150 Gb/s; 1 rail x 150 / 8 = 18.75 GB/s.
    tree = p["ceilings"]["tree"]
    assert tree["leaves"][0]["load_units"] == pytest.approx(4 / 3)
    assert tree["busbw_gbs"] == pytest.approx(18.75)
    # The ring gpu01-04: 2 crossing edges (02->03, 04->01), one per leaf: 200/1 = 200 -> 25 GB/s.
    assert p["ceilings"]["ring"]["busbw_gbs"] == pytest.approx(25.0)


def test_live_fabric_and_slurm_job_nodelist(tmp_path):
    need_simulator()
    t = rail_fat_tree(hosts=16, rails=2, leaves_per_rail=2, oversubscription=2)
    with SimFabric(t.text(), tmp_path / "sim") as f:
        env = {**f.env(), "SLURM_JOB_NODELIST": "gpu[01-16]"}
        p, fnd = verdict("--fabric", "live", "--rank-order", ",".join(INTERLEAVED), env=env)
    assert p["ceilings"]["ring"]["busbw_gbs"] == pytest.approx(25.0) and fnd["severity"] == "warn"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--nodes", "gpu[01-04]"], "--nodes, --rank-order and --topo place the job on a fabric"),
        (
            ["--fabric", "X", "--nodes", "gpu[01-02]", "--rank-order", "gpu03,gpu01"],
            "name different nodes",
        ),
        (["--fabric", "X", "--nodes", "gpu[01-02],gpu99"], "have no adapter on this fabric: gpu99"),
    ],
)
def test_bad_placement_inputs_exit_2(net, args, said):
    args = [str(net) if a == "X" else a for a in args]
    r = run_cli(*JOB[:-2], *args)
    assert r.exit_code == 2 and said in r.stderr, r.stderr


def test_topo_files_name_the_hosts_where_node_descriptions_do_not(tmp_path):
    # 8 hosts x 2 rails, 2 leaves per rail (gpu01-04, gpu05-08), 2 uplinks per leaf (2:1), 200 Gb/s,
    # every adapter described as the firmware's default (no host in it), its device name not its NIC
    # index (mlx5_4 is NIC 0, mlx5_5 NIC 1): only the topo files place the job.
    t = rail_fat_tree(hosts=8, rails=2, leaves_per_rail=2, oversubscription=2)
    topos = []
    for ca in t.cas:
        ca.desc = "MT4123 ConnectX6 Mellanox Technologies"
    for h in range(1, 9):
        host = f"gpu{h:02d}"
        adapters = []
        for r in (0, 1):
            g = f"{t.ca(host, r).guid:016x}"
            guid = ":".join(g[i : i + 4] for i in range(0, 16, 4))
            adapters.append({"name": f"mlx5_{r + 4}", "nic_index": r, "node_guid": guid})
        doc = {"schema": "ibdiag.topo/1", "host": host, "adapters": adapters, "pairings": []}
        topos.append(tmp_path / f"{host}.json")
        topos[-1].write_text(json.dumps(doc))
    net = tmp_path / "f.net"
    net.write_text(t.text())
    order = "gpu01,gpu05,gpu02,gpu06,gpu03,gpu07,gpu04,gpu08"
    r = run_cli(*JOB[:-2], "--fabric", str(net), "--nodes", "gpu[01-08]", "--rank-order", order)
    assert r.exit_code == 2 and "8 of the job's nodes have no adapter" in r.stderr, r.stderr
    p, f = verdict(
        "--fabric", str(net), "--nodes", "gpu[01-08]", "--rank-order", order,
        *(x for path in topos for x in ("--topo", str(path))),
    )  # fmt: skip
    # Interleaved, every ring edge crosses: 4 leave each leaf per rail; 2 uplinks = 400 Gb/s / 4 =
    # 100 Gb/s < 200: b = 100, 2 rails x 100 / 8 = 25 GB/s. Rails 0 and 1 are the NIC indexes.
    assert p["rails"] == [0, 1]
    assert p["ceilings"]["ring"]["busbw_gbs"] == pytest.approx(25.0)
    assert p["ceilings"]["ring"]["binding"] == "leaf-r0-1"
    assert {x["leaf"] for x in p["leaves"]} == {f"leaf-r{r}-{n}" for r in (0, 1) for n in (1, 2)}
    assert f["severity"] == "warn"


def test_topo_without_fabric_is_a_usage_error(tmp_path):
    r = run_cli(*JOB[:-2], "--topo", str(tmp_path / "gpu01.json"))
    assert r.exit_code == 2 and "--topo place the job on a fabric" in r.stderr, r.stderr
