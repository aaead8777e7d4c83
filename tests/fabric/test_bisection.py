"""Bisection (issue 25): the least of the name-order split and the weakest-first split (leaves by their
uplinks; three tiers: pods kept together, by their spines' uplinks to the cores). Worked by hand from
fabrics of tests/support/fabric_topology.py, every link 4x HDR = 200 Gb/s, read as bare ibnetdiscover
files (``--from``)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import run_cli
from tests.support.fabric_topology import Topology, rail_fat_tree, remove_link, three_tier


def shape_of(t: Topology, tmp_path: Path) -> dict:
    net = tmp_path / "f.net"
    net.write_text(t.text())
    r = run_cli("fabric", "--from", str(net), "-o", "json")
    assert r.exit_code in (0, 1), r.stderr
    return json.loads(r.stdout)["shape"]


def test_two_weak_leaves_in_different_name_halves_are_put_together(tmp_path):
    # 2 rails x 2 leaves (leaf-r0-1, leaf-r0-2, leaf-r1-1, leaf-r1-2), 4 host links (800) and 4 uplinks
    # (ports 5-8; 7 and 8 to spine-1 and spine-2 again) each. leaf-r0-1 and leaf-r1-1 lose ports 7, 8:
    # 400 up. Name order {r0-1, r0-2} | {r1-1, r1-2}: 400 + 800 leave each half = 1200. Weakest first
    # {r0-1, r1-1}: 400 + 400 = 800 leave it. Bisection 800.
    t = rail_fat_tree(hosts=8, rails=2, leaves_per_rail=2)
    for leaf in ("leaf-r0-1", "leaf-r1-1"):
        remove_link(t, leaf, 7)
        remove_link(t, leaf, 8)
    sh = shape_of(t, tmp_path)
    assert sh["kind"] == "tree" and sh["host_gbps"] == 3200
    assert sh["bisection_gbps"] == 800


def test_a_healthy_fat_tree_keeps_half_its_host_links(tmp_path):
    sh = shape_of(rail_fat_tree(hosts=8, rails=2, leaves_per_rail=2), tmp_path)
    assert sh["bisection_gbps"] == 1600  # 1:1: half of 3200


def test_three_tiers_split_by_pods_weakest_first(tmp_path):
    # 4 pods x 2 leaves x 4 hosts: a pod has 1600 Gb/s of host links; its 2 spines 800 up each (2 links
    # to each of 2 cores; ports 5, 6 to core-1, 7, 8 to core-2). Pods 1 and 3 lose every spine's ports
    # 7, 8: 800 up per pod. Name order {p1, p2} | {p3, p4}: 800 + 1600 = 2400 leave each half. Weakest
    # first, pods together: {p1, p3}: 800 + 800 = 1600 leave it. Bisection 1600.
    t = three_tier(pods=4)
    for pod in (1, 3):
        for spine in (1, 2):
            remove_link(t, f"spine-p{pod}-{spine}", 7)
            remove_link(t, f"spine-p{pod}-{spine}", 8)
    sh = shape_of(t, tmp_path)
    assert sh["text"].startswith("three-tier fat tree: 8 leaves, 8 spines, 2 cores")
    assert sh["host_gbps"] == 6400 and sh["bisection_gbps"] == 1600
