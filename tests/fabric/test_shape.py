"""The fabric's shape judged on a real simulated subnet: tiers, oversubscription, bisection, rails.

Fabrics from tests/support/fabric_topology.py. The default is 8 hosts x 4 rails, one leaf per rail
(8 host links and 8 uplinks each, 4 to each of 2 spines), every link 4x HDR = 200 Gb/s.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.fabric_topology import (
    CA_BASE,
    CaNode,
    Topology,
    rail_fat_tree,
    remove_link,
    single_switch,
    three_tier,
)
from tests.support.ibsim import SimFabric, need_simulator


@pytest.fixture
def sim(tmp_path: Path):
    need_simulator()
    made: list[SimFabric] = []

    def start(topo: Topology) -> SimFabric:
        f = SimFabric(topo.text(), tmp_path / f"sim{len(made)}")
        made.append(f)
        return f

    yield start
    for f in made:
        f.close()


def settled(f: SimFabric, *args: str):
    """``fabric`` once opensm has brought the changed ports up again (a re-sweep takes longer on a loaded
    machine than ``settle``'s wait): asked again while a port waits in Initialize/Armed."""
    for _ in range(20):
        got = fabric(f, *args)
        if not any(x["check"] in ("fabric.port_state", "fabric.discovery") for x in got[2]):
            break
        f.settle(0.5)
    return got


def fabric(f: SimFabric, *args: str):
    r = run_cli("fabric", "-o", "json", *args, env=f.env())
    assert r.exception is None, r.stderr
    doc = json.loads(r.stdout)
    return r.exit_code, doc, [x for x in doc["findings"] if x["severity"] != "ok"]


def ok(doc, check):
    return [x["message"] for x in doc["findings"] if x["check"] == check]


def test_a_1to1_rail_optimised_fat_tree_is_ok_with_its_tiers_and_bisection(sim):
    f = sim(rail_fat_tree())
    code, doc, bad = fabric(f)
    assert code == 0 and bad == []
    (tiers,) = ok(doc, "fabric.tiers")
    # 4 leaves x 8 hosts x 200 Gb/s = 6400 Gb/s of host links; half of them, 3200, cross the middle.
    assert tiers.startswith("two-tier fat tree: 4 leaves, 2 spines")
    assert "bisection 3200 Gb/s of 3200 Gb/s" in tiers
    assert "every leaf 1:1" in ok(doc, "fabric.oversubscription")[0]
    assert ok(doc, "fabric.rails")[0].startswith("rail-optimised: 4 rails on 4 leaves")
    assert doc["shape"]["kind"] == "tree" and doc["rails"]["rail_optimised"] is True
    leaves = [s for s in doc["shape"]["switches"] if s["tier"] == "leaf"]
    assert len(leaves) == 4 and all(s["oversubscription"] == 1.0 for s in leaves)


def test_one_leaf_with_its_uplinks_halved_is_named_at_2to1(sim):
    t = rail_fat_tree()
    for nth in (7, 5, 3, 1):  # 2 of its 4 uplinks to each spine
        leaf, lport, _, _ = t.isl("leaf-r1-1", nth)
        remove_link(t, leaf.desc, lport)
    f = sim(t)
    code, doc, bad = fabric(f)
    assert code == 1
    assert [(x["check"], x["subject"], x["value"]) for x in bad] == [
        ("fabric.oversubscription", "leaf-r1-1", 2.0)
    ]
    # 8 x 200 = 1600 Gb/s down over 4 x 200 = 800 Gb/s up.
    assert "leaf leaf-r1-1 is 2:1 where its peers are 1:1" in bad[0]["message"]
    assert (
        "1600 Gb/s down over 800 Gb/s up in 4 uplink(s) where its peers have 8" in bad[0]["message"]
    )


def test_a_2to1_fabric_by_design_is_ok_when_the_expectation_says_so(sim, tmp_path):
    f = sim(rail_fat_tree(oversubscription=2))
    cfg = tmp_path / "ibdiag.toml"
    cfg.write_text("[fabric]\nexpect_oversubscription = 2\n")
    code, doc, bad = fabric(f, "--config", str(cfg))
    assert code == 0 and bad == []
    # Bisection: each half's two leaves have 4 x 200 = 800 Gb/s of uplinks: 1600 Gb/s.
    assert "bisection 1600 Gb/s of 3200 Gb/s" in ok(doc, "fabric.tiers")[0]
    code, doc, bad = fabric(f)
    assert [(x["check"], x["severity"], x["subject"]) for x in bad] == [
        ("fabric.oversubscription", "warn", "fabric")
    ]
    assert (
        "the leaves are 2:1 (the median leaf) where [fabric] expect_oversubscription says 1:1"
        in (bad[0]["message"])
    )


def test_an_isl_unplugged_changes_its_leafs_ratio_and_is_named(sim):
    t = rail_fat_tree()
    f = sim(t)
    leaf, lport, _, _ = t.isl("leaf-r2-1", 0)
    f.console(f'Unlink "{leaf.node_id}"[{lport}]')
    f.settle()
    code, doc, bad = settled(f)
    assert [(x["check"], x["subject"]) for x in bad] == [("fabric.oversubscription", "leaf-r2-1")]
    # 1600 Gb/s over 7 x 200 = 1400 Gb/s: 1.14:1.
    assert bad[0]["value"] == pytest.approx(1600 / 1400, abs=1e-4)
    assert "is 1.14:1 where its peers are 1:1" in bad[0]["message"]


def test_two_hosts_rail_cables_swapped_are_both_named_with_their_rails(sim):
    t = rail_fat_tree()
    f = sim(t)
    a, b = t.ca("gpu03", 1), t.ca("gpu05", 2)
    sw_a, port_a = t.host_cable("gpu03", 1)
    sw_b, port_b = t.host_cable("gpu05", 2)
    f.console(f'Unlink "{a.node_id}"[1]', f'Unlink "{b.node_id}"[1]')
    f.settle()  # opensm sweeps the cables out before they come back elsewhere
    f.console(
        f'Link "{a.node_id}"[1] "{sw_b.node_id}"[{port_b}]',
        f'Link "{b.node_id}"[1] "{sw_a.node_id}"[{port_a}]',
    )
    f.settle()
    code, doc, bad = settled(f)
    assert code == 1
    assert sorted((x["check"], x["subject"], x["value"]) for x in bad) == [
        ("fabric.rails", "gpu03/mlx5_1", 1),
        ("fabric.rails", "gpu05/mlx5_2", 2),
    ]
    msg = {x["subject"]: x["message"] for x in bad}
    assert msg["gpu03/mlx5_1"] == (
        f"gpu03 mlx5_1 (rail 1) is cabled to leaf-r2-1 port {port_b}, a leaf of rail 2; "
        f"rail 1 of its scalable unit is on leaf-r1-1; "
        f"swapped with gpu05 mlx5_2 (rail 2), cabled to leaf-r1-1 port {port_a}"
    )
    assert "swapped with gpu03 mlx5_1 (rail 1)" in msg["gpu05/mlx5_2"]


def test_a_three_tier_tree_has_leaves_spines_and_cores(sim):
    f = sim(three_tier())
    code, doc, bad = fabric(f)
    assert code == 0 and bad == []
    assert ok(doc, "fabric.tiers")[0].startswith("three-tier fat tree: 4 leaves, 4 spines, 2 cores")
    assert "every leaf 1:1; every spine 1:1" in ok(doc, "fabric.oversubscription")[0]
    tiers = doc["shape"]["tiers"]
    assert sorted(tiers.values()).count("core") == 2
    # One adapter per host: rails are not judged, and said nothing about.
    assert ok(doc, "fabric.rails") == [] and doc["rails"]["rail_optimised"] is None


def test_a_spine_uplink_down_in_a_three_tier_tree_names_the_spine(sim):
    t = three_tier()
    sp = t.switch("spine-p2-1")
    core_port = max(sp.peers)  # its last port goes to a core
    f = sim(t)
    f.console(f'Unlink "{sp.node_id}"[{core_port}]')
    f.settle()
    code, doc, bad = settled(f)
    assert [(x["check"], x["subject"]) for x in bad] == [("fabric.oversubscription", "spine-p2-1")]
    # 4 links down from its two leaves over 3 links up to the cores.
    assert "spine spine-p2-1 is 1.33:1" in bad[0]["message"]


def test_a_single_switch_is_said_to_be_one(sim):
    f = sim(single_switch())
    code, doc, bad = fabric(f)
    assert code == 0 and bad == []
    assert ok(doc, "fabric.tiers") == ["a single switch (switch-1): no tiers, no oversubscription"]
    assert ok(doc, "fabric.oversubscription") == []
    assert ok(doc, "fabric.rails")[0].startswith(
        "not rail-optimised: 4 host(s) put two or more adapters on one leaf; rails not judged"
    )


def test_leaves_cabled_to_each_other_are_not_a_tree_of_tiers(sim):
    t = rail_fat_tree(switch_ports=20)
    a, b = t.switch("leaf-r0-1"), t.switch("leaf-r1-1")
    a.peers[20] = (b.node_id, 20, "4xHDR")
    b.peers[20] = (a.node_id, 20, "4xHDR")
    f = sim(t)
    code, doc, bad = fabric(f)
    assert [(x["check"], x["severity"]) for x in bad] == [("fabric.tiers", "warn")]
    assert "1 ISL(s) join switches of the same tier (leaf-r0-1 — leaf-r1-1)" in bad[0]["message"]
    assert doc["shape"]["kind"] == "mesh"


def test_a_server_on_a_spine_does_not_make_the_spine_a_leaf(sim):
    t = rail_fat_tree(switch_ports=20)  # spines use 16 of 20 ports
    spine = t.switch("spine-1")
    sm = CaNode(CA_BASE + 0xF000, "sm01 mlx5_0", "sm01", 0)
    sm.peer = (spine.node_id, 20, "4xHDR")
    spine.peers[20] = (sm.node_id, 1, "4xHDR")
    t.cas.append(sm)
    f = sim(t)
    code, doc, bad = fabric(f)
    assert code == 0 and bad == []
    assert ok(doc, "fabric.tiers")[0].startswith(
        "two-tier fat tree: 4 leaves, 2 spines; spine-1 (spine) also has 1 host link(s)"
    )
    assert doc["shape"]["tiers"][f"0x{spine.guid:016x}"] == "spine"
