"""``ibdiag report SWEEP --fabric SNAPSHOT``: a sweep's slow pairs on a real simulated subnet.

The fabric is real: ibsim + opensm + infiniband-diags (tests/support/ibsim.py) run the 12-host x 2-rail
fat tree of tests/support/fabric_topology.py with 3 leaves per rail (4 hosts each, ports 1-4; 4 uplinks
each, ports 5-8, to spine-1 and spine-2), and ``ibdiag fabric --save`` stores it; the report reads that
dump. The sweep is NOT measured: the simulated subnet carries no data, so no pair test can run over it.
Its results are written in the sweep's real format (``ibdiag.sweep/1``, through :class:`SweepResult` and
the same JSON writer ``ibdiag sweep --save`` uses) with hand-chosen bandwidths: healthy pairs 23 GB/s,
slow ones 5 GB/s; the report re-derives every verdict from those pairs.

Rail 0 of rank i is ``gpu{i+1:02d} mlx5_0``; ranks 0-3 sit on leaf-r0-1, 4-7 on leaf-r0-2, 8-11 on
leaf-r0-3. Rail 0 is tested as a ring (i, i+1) plus (i, i+4): 9 pairs within a leaf and 5 between each
two leaves; rail 1 as the ring only, all healthy.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ibdiag.findings.model import Report, RunMeta
from ibdiag.output.jsonout import render_json
from ibdiag.sweep.analysis import SweepConfig
from ibdiag.sweep.attribution import analyse
from ibdiag.sweep.checks import sweep_findings
from ibdiag.sweep.model import SweepResult, SweepSettings
from ibdiag.sweep.nodes import FleetNode, Rail, check_fleet
from ibdiag.sweep.runner import PairResult, PairSpec
from ibdiag.sweep.schedule import Pattern, Phase
from tests.support.cli import run_cli
from tests.support.env import SYSFS_FIXTURES
from tests.support.fabric_topology import Topology, rail_fat_tree
from tests.support.ibsim import SimFabric, need_simulator

HOSTS = 12
GOOD, SLOW = 23.0, 5.0  # GB/s on 4xHDR (200 Gb/s = 25 GB/s) links


def saved(topo: Topology, work: Path) -> Path:
    """``topo`` run by the simulator and saved by ``ibdiag fabric --save`` (a dump any later report reads)."""
    need_simulator()
    f = SimFabric(topo.text(), work / "sim")
    try:
        out = work / "fabric.tar.gz"
        r = run_cli("fabric", "--save", str(out), env=f.env())
        assert r.exit_code in (0, 1), r.stderr
    finally:
        f.close()
    return out


@pytest.fixture(scope="module")
def dump(tmp_path_factory) -> Path:
    return saved(
        rail_fat_tree(hosts=HOSTS, rails=2, leaves_per_rail=3), tmp_path_factory.mktemp("tree")
    )


@pytest.fixture(scope="module")
def mesh(tmp_path_factory) -> Path:
    """The same fat tree with leaf-r0-1 port 9 cabled to leaf-r0-2 port 9: an ISL inside the leaf tier."""
    t = rail_fat_tree(hosts=HOSTS, rails=2, leaves_per_rail=3)
    one, two = t.switch("leaf-r0-1"), t.switch("leaf-r0-2")
    one.nports = two.nports = 9
    one.peers[9] = (two.node_id, 9, "4xHDR")
    two.peers[9] = (one.node_id, 9, "4xHDR")
    return saved(t, tmp_path_factory.mktemp("mesh"))


def rail0_pairs(n: int = HOSTS) -> list[tuple[int, int]]:
    ring = [(i, (i + 1) % n) for i in range(n)]
    across = [(i, (i + 4) % n) for i in range(HOSTS)]
    return ring + across


def write_sweep(
    path: Path, slow: set[frozenset[int]], hosts: int = HOSTS, swapped: frozenset[int] = frozenset()
) -> Path:
    """A sweep document in ibdiag's own format: rail-0 pairs in ``slow`` at SLOW, the rest GOOD; the
    ranks in ``swapped`` list their adapters mlx5_1 first (their rail 0 is mlx5_1)."""
    nodes = check_fleet(
        [
            FleetNode(
                i,
                f"gpu{i + 1:02d}",
                f"10.0.0.{i + 1}",
                tuple(
                    Rail(k, name, 1, 200.0)
                    for k, name in enumerate(
                        ("mlx5_1", "mlx5_0") if i in swapped else ("mlx5_0", "mlx5_1")
                    )
                ),
            )
            for i in range(hosts)
        ]
    )
    pairs = []
    for k, (a, b) in enumerate(rail0_pairs(hosts)):
        bw = SLOW if frozenset((a, b)) in slow else GOOD
        pairs.append(PairResult(k, Phase.FIRST, 0, min(a, b), max(a, b), bw, engine="ibdiag"))
    for k in range(hosts):
        a, b = k, (k + 1) % hosts
        pairs.append(PairResult(k, Phase.FIRST, 1, min(a, b), max(a, b), GOOD, engine="ibdiag"))
    settings = SweepSettings(Pattern.PAIRWISE, None, 0, PairSpec(), False, len(pairs), 0)
    result = SweepResult(settings, nodes, tuple(pairs), analyse(nodes, tuple(pairs), SweepConfig()))
    meta = RunMeta(host="gpu01", version="0.1.0", generated_at="2026-12-03T12:00:00Z")
    path.write_text(
        render_json(Report("sweep", result.to_json(), tuple(sweep_findings(result))), meta)
    )
    return path


def report(sweep: Path, dump: Path, *more: str):
    r = run_cli("report", str(sweep), "--fabric", str(dump), "-o", "json", *more)
    assert r.exception is None, r.stderr
    doc = json.loads(r.stdout)
    found = [x for x in doc["findings"] if x["check"].startswith("report.fabric")]
    return doc, found


def culprits(found):
    return [(x["subject"], x["value"]) for x in found if x["check"] == "report.fabric_culprit"]


def test_slow_pairs_through_one_host_port_name_that_port(dump, tmp_path):
    # gpu03 mlx5_0 (rank 2, leaf-r0-1 port 3) slow with each of its 4 partners: 1-2, 2-3 (same
    # leaf), 2-6 (leaf-r0-2), 10-2 (leaf-r0-3). Its port carries those 4 and nothing healthy; the
    # uplinks of leaf-r0-1 carry 2 of them and 8 healthy crossings.
    slow = {frozenset(p) for p in ((1, 2), (2, 3), (2, 6), (10, 2))}
    doc, found = report(write_sweep(tmp_path / "sweep.json", slow), dump)
    assert culprits(found) == [("leaf-r0-1:3", 4)]
    (c,) = [x for x in found if x["check"] == "report.fabric_culprit"]
    assert c["message"] == (
        "likely culprit: leaf-r0-1 port 3 (cable to gpu03 mlx5_0): 4 of 4 slow pairs pass it, "
        "no healthy pair passes it"
    )
    (placed,) = doc["fabric"]
    assert (
        placed["slow_pairs"] == 4
        and placed["healthy_pairs"] == 20 + 12  # rail 0's 20, rail 1's ring
        and placed["routes_read"] is False
    )
    # the sweep called the node bad on rail 0: its link on the fabric
    (node,) = placed["bad_nodes"]
    assert node["node"] == "gpu03 (rank 2)"
    assert [(e["adapter"], e["switch_port"]) for e in node["links"]] == [("mlx5_0", 3)]
    paths = {p["pair"]: p for p in placed["paths"]}
    same = paths["gpu02 (rank 1) mlx5_0 <-> gpu03 (rank 2) mlx5_0"]
    assert same["isl_hops"] == 0
    assert same["route"] == (
        "gpu02 mlx5_0 -> leaf-r0-1 port 2 -> (same switch, no ISL) -> leaf-r0-1 port 3 -> gpu03 mlx5_0"
    )


def test_slow_pairs_crossing_one_leafs_uplinks_name_them(dump, tmp_path):
    # Every pair leaving leaf-r0-1 is slow: 3-4, 11-0 (ring), 0-4 .. 3-7, 8-0 .. 11-3 = 10; the 3
    # pairs inside leaf-r0-1 and everything between leaf-r0-2 and leaf-r0-3 are fine. leaf-r0-2's
    # uplinks carry 5 of the slow pairs and 5 healthy ones; each host port of leaf-r0-1 at most 3
    # slow beside a healthy one: the uplinks of leaf-r0-1 explain all 10, with nothing healthy.
    leaf1 = set(range(4))
    slow = {frozenset(p) for p in rail0_pairs() if len(leaf1 & set(p)) == 1}
    assert len(slow) == 10
    doc, found = report(write_sweep(tmp_path / "sweep.json", slow), dump)
    assert culprits(found) == [("leaf-r0-1:uplinks", 10)]
    line = run_cli("report", str(tmp_path / "sweep.json"), "--fabric", str(dump), "-o", "line")
    assert "fabric: leaf-r0-1:uplinks" in line.stdout and len(line.stdout.strip()) <= 80
    (c,) = [x for x in found if x["check"] == "report.fabric_culprit"]
    assert c["message"] == (
        "likely culprit: the uplinks of leaf-r0-1 (port(s) 5, 6, 7, 8): 10 of 10 slow pairs cross them, "
        "no healthy pair crosses them; the 3 pair(s) within the switch are fine; every slow pair of the "
        "sweep's bad gpu01 mlx5_0, gpu02 mlx5_0, gpu03 mlx5_0, gpu04 mlx5_0 crosses them: "
        "fix these before draining those"
    )
    # the sweep blames the 4 hosts of leaf-r0-1 (3 of each one's 4 partners are slow): all bad nodes
    assert sorted(n["node"] for n in doc["fabric"][0]["bad_nodes"]) == [
        "gpu01 (rank 0)",
        "gpu02 (rank 1)",
        "gpu03 (rank 2)",
        "gpu04 (rank 3)",
    ]
    (placed,) = doc["fabric"]
    paths = {p["pair"]: p for p in placed["paths"]}
    cross = paths["gpu01 (rank 0) mlx5_0 <-> gpu05 (rank 4) mlx5_0"]
    assert cross["isl_hops"] == 2
    assert cross["route"] == (
        "gpu01 mlx5_0 -> leaf-r0-1 port 1 -> any of 4 uplink(s) of leaf-r0-1 (port(s) 5, 6, 7, 8) -> "
        "any of 4 uplink(s) of leaf-r0-2 (port(s) 5, 6, 7, 8) -> leaf-r0-2 port 1 -> gpu05 mlx5_0"
    )
    assert cross["hops"] == ["leaf-r0-1:1", "leaf-r0-1:uplinks", "leaf-r0-2:uplinks", "leaf-r0-2:1"]


def test_a_single_slow_pair_gets_its_path_and_no_culprit(dump, tmp_path):
    slow = {frozenset((1, 5))}
    doc, found = report(write_sweep(tmp_path / "sweep.json", slow), dump)
    assert culprits(found) == []
    (placed,) = doc["fabric"]
    (path,) = placed["paths"]
    assert path["pair"] == "gpu02 (rank 1) mlx5_0 <-> gpu06 (rank 5) mlx5_0"
    assert path["route"] == (
        "gpu02 mlx5_0 -> leaf-r0-1 port 2 -> any of 4 uplink(s) of leaf-r0-1 (port(s) 5, 6, 7, 8) -> "
        "any of 4 uplink(s) of leaf-r0-2 (port(s) 5, 6, 7, 8) -> leaf-r0-2 port 2 -> gpu06 mlx5_0"
    )
    assert [(x["severity"], x["check"], x["subject"]) for x in found] == [
        ("ok", "report.fabric_path", "fleet"),
        ("ok", "report.fabric_health", "fabric"),  # the saved fabric itself is healthy
    ]
    assert found[0]["message"].startswith("1 of 1 slow pair(s) of ")
    # the table says it too
    r = run_cli("report", str(tmp_path / "sweep.json"), "--fabric", str(dump))
    assert "gpu02 mlx5_0 -> leaf-r0-1 port 2 -> any of 4 uplink(s)" in r.stdout
    assert "no port or uplink is shared by 2 or more slow pairs" in r.stdout
    # the snapshot has no routes, and the table says so (issue 38: the sentence follows the data)
    assert "(routes not read: the ISLs are the candidates on shortest paths" in r.stdout
    assert "routes read:" not in r.stdout
    # and the HTML page, escaped
    r = run_cli("report", str(tmp_path / "sweep.json"), "--fabric", str(dump), "-o", "html")
    assert "on the fabric</h2>" in r.stdout
    assert "gpu02 mlx5_0 -&gt; leaf-r0-1 port 2 -&gt; any of 4 uplink(s)" in r.stdout


def test_a_port_that_healthy_pairs_also_cross_is_not_blamed(dump, tmp_path):
    # gpu02 (rank 1) slow with its partners on other leaves, 1-5 and 9-1, fine with 0-1 and 1-2 on its
    # own leaf. Its port: 2 slow, 2 healthy (not more slow than healthy). leaf-r0-1's uplinks: 2 slow
    # of 10 crossing pairs (8 healthy), below the 1 in 4 one bad uplink of its 4 would slow. Nothing.
    slow = {frozenset((1, 5)), frozenset((9, 1))}
    doc, found = report(write_sweep(tmp_path / "sweep.json", slow), dump)
    assert culprits(found) == []
    assert doc["fabric"][0]["slow_pairs"] == 2


def test_a_pair_of_adapters_on_different_rails_is_said(dump, tmp_path):
    # gpu05 (rank 4) lists mlx5_1 first: the sweep's rail 0 of it is mlx5_1, on leaf-r1-2 port 1.
    # Its slow pair with gpu06 (rank 5) mlx5_0 (leaf-r0-2 port 2) crosses from a rail-1 leaf to a rail-0 one.
    slow = {frozenset((4, 5))}
    doc, found = report(write_sweep(tmp_path / "sweep.json", slow, swapped=frozenset({4})), dump)
    (path,) = doc["fabric"][0]["paths"]
    assert path["cross_rail"] is True
    assert path["route"] == (
        "gpu05 mlx5_1 -> leaf-r1-2 port 1 -> any of 4 uplink(s) of leaf-r1-2 (port(s) 5, 6, 7, 8) -> "
        "any of 4 uplink(s) of leaf-r0-2 (port(s) 5, 6, 7, 8) -> leaf-r0-2 port 2 -> gpu06 mlx5_0"
    )
    assert "the ends are on different rails of the fabric (1 and 0)" in path["notes"]
    (warn,) = [x for x in found if x["check"] == "report.fabric_path"]
    assert warn["severity"] == "warn"
    assert "gpu05 mlx5_1 (rail 1) <-> gpu06 mlx5_0 (rail 0)" in warn["message"]


def test_a_host_missing_from_the_fabric_is_said_not_dropped(dump, tmp_path):
    # 13 nodes: gpu13 is in the sweep, not in the subnet; its pairs are slow at its end only.
    slow = {frozenset((11, 12)), frozenset((12, 0))}
    doc, found = report(write_sweep(tmp_path / "sweep.json", slow, hosts=13), dump)
    missing = [x for x in found if x["check"] == "report.fabric_path" and x["severity"] == "warn"]
    assert [(x["subject"], x["value"]) for x in missing] == [("gpu13", 2)]
    assert "gpu13 mlx5_0 is not on this fabric" in missing[0]["message"]
    (placed,) = doc["fabric"]
    assert placed["slow_pairs"] == 2 and placed["slow_pairs_placed"] == 0
    assert [(e["host"], e["adapter"]) for e in placed["not_on_fabric"]] == [
        ("gpu13", "mlx5_0"),
        ("gpu13", "mlx5_1"),
    ]
    path = next(p for p in placed["paths"] if "gpu13" in p["pair"])
    assert path["route"].endswith("-> ? -> gpu13 mlx5_0") or path["route"].startswith("gpu13")
    assert any("gpu13 mlx5_0 is not on this fabric" in n for n in path["notes"])
    # gpu13's two slow pairs share only its own (unknown) end: no fabric port is blamed
    assert culprits(found) == []


def test_fabric_without_a_sweep_or_with_a_missing_snapshot_is_refused(dump, tmp_path):
    write_sweep(tmp_path / "sweep.json", set())
    r = run_cli("report", str(tmp_path / "sweep.json"), "--fabric", str(tmp_path / "absent.tar.gz"))
    assert r.exit_code == 2 and "No such file or directory" in r.stderr
    # a readable topo document, but no sweep to place
    topo = run_cli("topo", "--root", str(SYSFS_FIXTURES / "dgx-h100"), "-o", "json")
    (tmp_path / "topo.json").write_text(topo.stdout)
    r = run_cli("report", str(tmp_path / "topo.json"), "--fabric", str(dump))
    assert r.exit_code == 2 and "no sweep file was given" in r.stderr


def test_a_fabric_that_is_not_a_tree_names_host_links_only_and_says_so(mesh, tmp_path):
    # gpu03 mlx5_0's four slow pairs, as in the first test, on the mesh: its port is still shared by
    # all four, but the ISLs are not counted, and that is said on the culprit, the pairs and the fabric.
    slow = {frozenset(p) for p in ((1, 2), (2, 3), (2, 6), (10, 2))}
    doc, found = report(write_sweep(tmp_path / "sweep.json", slow), mesh)
    assert culprits(found) == [("leaf-r0-1:3", 4)]
    (c,) = [x for x in found if x["check"] == "report.fabric_culprit"]
    assert c["message"].endswith(
        "; the ISLs were not counted (not a tree of tiers): the slow pairs may share one instead"
    )
    (warn,) = [x for x in found if x["check"] == "report.fabric_path"]
    assert warn["severity"] == "warn" and warn["subject"] == "fleet"
    assert "ISLs between switches are not named" in warn["message"]
    assert "leaf-r0-1 — leaf-r0-2" in warn["message"]
    (placed,) = doc["fabric"]
    assert placed["isls_named"] is False
    path = next(p for p in placed["paths"] if "gpu07" in p["pair"])
    assert path["isl_hops"] is None
    assert path["route"] == (
        "gpu03 mlx5_0 -> leaf-r0-1 port 3 -> (ISLs not named) -> leaf-r0-2 port 3 -> gpu07 mlx5_0"
    )
    assert path["notes"][0].startswith(
        "the ISLs between leaf-r0-1 and leaf-r0-2 are not named: not a tree"
    )
