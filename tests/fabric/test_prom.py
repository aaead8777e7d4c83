"""``ibdiag fabric -o prom``'s shape series (issue 25): per switch down/up capacity, uplinks,
oversubscription and tier; the fabric's tiers, host-link capacity, bisection and rail-optimised. Read
back by prometheus_client's parser (no duplicate sample) and linted by Debian's real ``promtool check
metrics``."""

from __future__ import annotations

import subprocess
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.support.cli import run_cli
from tests.support.env import need_tool
from tests.support.fabric_topology import rail_fat_tree, three_tier

TWO_TO_ONE = Path(__file__).resolve().parents[2] / "fixtures/fabric/two-to-one.net"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in out, f"duplicate sample {key}"
            out[key] = s.value
    return out


def prom(path: Path) -> str:
    r = run_cli("fabric", "--from", str(path), "-o", "prom")
    assert r.exit_code in (0, 1), r.stderr
    res = subprocess.run(
        [need_tool("promtool"), "check", "metrics"],
        input=r.stdout,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    return r.stdout


def switch_series(parsed, name):
    return {
        dict(labels)["switch"]: (dict(labels)["tier"], v)
        for (n, labels), v in parsed.items()
        if n == f"ibdiag_fabric_switch_{name}"
    }


def test_a_2to1_fabric_exports_each_leafs_ratio_capacities_and_the_bisection():
    # fixtures/fabric/two-to-one.net: 16 hosts x 2 rails, 2 leaves per rail of 8 host links and 4
    # uplinks, all 4x HDR (200 Gb/s): 1600 down, 800 up, 2:1; 32 host links = 6400 Gb/s; the halves
    # (leaf-r0-1, leaf-r0-2 | leaf-r1-1, leaf-r1-2) meet through 8 uplinks each: 1600 Gb/s.
    parsed = samples(prom(TWO_TO_ONE))
    leaves = ("leaf-r0-1", "leaf-r0-2", "leaf-r1-1", "leaf-r1-2")
    assert switch_series(parsed, "down_gbps") == dict.fromkeys(leaves, ("leaf", 1600.0))
    assert switch_series(parsed, "up_gbps") == dict.fromkeys(leaves, ("leaf", 800.0))
    assert switch_series(parsed, "uplinks") == dict.fromkeys(leaves, ("leaf", 4.0))
    assert switch_series(parsed, "oversubscription_ratio") == dict.fromkeys(leaves, ("leaf", 2.0))
    assert parsed[("ibdiag_fabric_bisection_gbps", ())] == 1600.0
    assert parsed[("ibdiag_fabric_host_links_gbps", ())] == 6400.0
    assert parsed[("ibdiag_fabric_tiers", ())] == 2.0
    assert parsed[("ibdiag_fabric_rail_optimised", ())] == 1.0
    # one owner per series: the oversubscription finding stays in ibdiag_check_severity only
    assert any(n == "ibdiag_check_severity" for n, _ in parsed)


def test_a_three_tier_tree_exports_its_spines_with_their_tier(tmp_path):
    # 2 pods x 2 leaves x 4 hosts, 2 spines per pod, 2 cores, all 200 Gb/s, 1:1: a leaf has 4 host
    # links and 2 uplinks to each spine (4); a spine 4 links down (2 leaves x 2) and 2 to each core.
    net = tmp_path / "three.net"
    net.write_text(three_tier().text())
    parsed = samples(prom(net))
    down = switch_series(parsed, "down_gbps")
    assert {s: t for s, (t, _) in down.items()} == {
        **dict.fromkeys(("leaf-p1-1", "leaf-p1-2", "leaf-p2-1", "leaf-p2-2"), "leaf"),
        **dict.fromkeys(("spine-p1-1", "spine-p1-2", "spine-p2-1", "spine-p2-2"), "spine"),
    }  # the cores are the top tier: no uplinks, no series
    assert {v for _, v in down.values()} == {800.0}
    assert {v for _, v in switch_series(parsed, "uplinks").values()} == {4.0}
    assert {v for _, v in switch_series(parsed, "oversubscription_ratio").values()} == {1.0}
    assert parsed[("ibdiag_fabric_tiers", ())] == 3.0
    assert ("ibdiag_fabric_rail_optimised", ()) not in parsed  # one adapter per host: not judged


def test_a_mesh_exports_no_switch_series_and_no_tiers(tmp_path):
    topo = rail_fat_tree(switch_ports=20)
    a, b = topo.switch("leaf-r0-1"), topo.switch("leaf-r1-1")
    a.peers[20] = (b.node_id, 20, "4xHDR")
    b.peers[20] = (a.node_id, 20, "4xHDR")
    net = tmp_path / "mesh.net"
    net.write_text(topo.text())
    parsed = samples(prom(net))
    assert not [n for n, _ in parsed if n.startswith("ibdiag_fabric_switch_")]
    assert ("ibdiag_fabric_tiers", ()) not in parsed
    assert ("ibdiag_fabric_bisection_gbps", ()) not in parsed
