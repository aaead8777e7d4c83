"""Rounds kept apart on the fabric: the description (a cabling plan, a saved fabric with and without the
subnet manager's routes), its binding to the sweep's nodes, and the packer's rounds and claims.

The saved fabric with routes is real: ibsim + opensm run a rail-optimised fat tree and ``ibdiag fabric
--routes --save`` stores it (tests/support/ibsim.py); the packer's rounds are then checked against the
route each pair takes, followed by the test from the saved ``ibroute`` text and ``ibnetdiscover``'s
cabling itself."""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from pathlib import Path

import pytest

from ibdiag.errors import InputError
from ibdiag.fabric.plan import parse_csv
from ibdiag.sweep.contention import Packer, ordered_first_pass, pair_flows
from ibdiag.sweep.layout import DESTINATION, HASHED, ROUTES
from ibdiag.sweep.layoutread import from_plan, load_description
from ibdiag.sweep.nodes import FleetNode, Rail, make_fleet
from ibdiag.sweep.schedule import Pattern
from tests.support.cli import run_cli
from tests.support.fabric_topology import host_name, rail_fat_tree
from tests.support.ibsim import SimFabric, ibroute_tables, need_simulator

# Two leaves of four hosts, four spines: the routed test bed's shape (tests/support/routed_fabric.py).
PLAN = """# node,adapter,switch,port
h00,eth0,leaf0,1
h01,eth0,leaf0,2
h02,eth0,leaf0,3
h03,eth0,leaf0,4
h04,eth0,leaf1,1
h05,eth0,leaf1,2
h06,eth0,leaf1,3
h07,eth0,leaf1,4
""" + "".join(f"leaf{leaf},{100 + s},spine{s},{leaf + 1}\n" for leaf in (0, 1) for s in range(4))


def tcp_fleet(hosts: list[str], addresses: list[str] | None = None) -> tuple[FleetNode, ...]:
    return tuple(
        FleetNode(r, h, addresses[r] if addresses else f"10.0.0.{r + 1}", (Rail(0, None),))
        for r, h in enumerate(hosts)
    )


@pytest.fixture
def plan(tmp_path: Path) -> Path:
    p = tmp_path / "fabric.csv"
    p.write_text(PLAN)
    return p


def test_a_cabling_plan_gives_each_hosts_leaf_and_the_leaves_uplinks(plan):
    d = load_description(plan)
    assert d.routing == HASHED and d.two_tier
    assert d.uplinks == {"leaf0": 4, "leaf1": 4}
    assert d.seats[("h05", "eth0")].leaf == "leaf1" and d.seats[("h05", "eth0")].index == 1


def test_nodes_are_placed_by_host_name_short_name_or_address_and_the_rest_are_said(plan):
    d = load_description(plan)
    # ranks interleaved over the leaves; one by FQDN, one known only by its address, one not there
    nodes = tcp_fleet(
        ["h00", "h04.cluster", "vm", "h05", "other"],
        ["10.0.0.1", "10.0.0.2", "h01", "10.0.0.4", "10.0.0.5"],
    )
    layout = d.place(nodes)
    assert [layout.seat(r, 0).leaf if layout.seat(r, 0) else None for r in range(5)] == [
        "leaf0",
        "leaf1",
        "leaf0",
        "leaf1",
        None,
    ]
    assert layout.unplaced == (4,)
    assert layout.leaf_order(range(5)) == [0, 2, 1, 3, 4]


def test_a_plan_that_is_not_one_is_refused_with_its_line(tmp_path):
    bad = tmp_path / "fabric.csv"
    bad.write_text("h00,eth0,leaf0\n")
    with pytest.raises(InputError, match="line 1: 3 fields"):
        load_description(bad)
    empty = tmp_path / "isl.csv"
    empty.write_text("leaf0,100,spine0,1\n")
    with pytest.raises(InputError, match="no host adapter is cabled"):
        load_description(empty)


def _interleaved(plan: Path):
    """Ranks 0..7 alternate between the leaves (rank r is host h0<r//2 + 4 (r%2)>)."""
    hosts = [f"h{(r // 2) + 4 * (r % 2):02d}" for r in range(8)]
    nodes = tcp_fleet(hosts)
    return nodes, load_description(plan).place(nodes)


def _leaf_loads(nodes, layout, rnd):
    """Cross-leaf flows per (leaf, direction) in a round (the measuring, higher rank sends)."""
    out: Counter[tuple[str, str]] = Counter()
    for pair in rnd:
        for _rail, src, dst in pair_flows(pair, nodes):
            s, d = layout.seat(src, 0), layout.seat(dst, 0)
            if s.leaf != d.leaf:
                out[(s.leaf, "up")] += 1
                out[(d.leaf, "down")] += 1
    return out


@pytest.mark.parametrize("pattern", [Pattern.RING, Pattern.RANDOM, Pattern.PAIRWISE])
def test_hashed_rounds_hold_one_cross_leaf_test_per_leaf_and_direction(plan, pattern):
    nodes, layout = _interleaved(plan)
    packer = Packer(nodes, layout)
    planned = list(ordered_first_pass(pattern, nodes, layout, seed=5))
    rounds = list(packer.rounds(planned))
    tested = sorted(p for r in rounds for p in r)
    assert tested == sorted(p for r in planned for p in r)  # every pair of the pattern, once
    for rnd in rounds:
        assert len({x for p in rnd for x in p}) == 2 * len(rnd)  # disjoint
        assert max(_leaf_loads(nodes, layout, rnd).values(), default=0) <= 1, rnd
        assert packer.shared(rnd) == set() and packer.load(rnd) in (0, 1)
    if pattern is Pattern.RING:  # in leaf order: each leaf's 4 hosts in a row, two boundary pairs
        assert sum(1 for r in rounds for p in r if _leaf_loads(nodes, layout, (p,))) == 2
    assert len(rounds) >= len(planned)


@pytest.mark.parametrize("seed", range(6))
def test_packing_keeps_every_pair_of_the_pattern_in_the_patterns_order(seed):
    """48 nodes on 6 leaves in shuffled rank order: every pair of 8 random rounds runs once, and no
    round runs a pair of a pattern round more than one round ahead of the oldest one left."""
    hosts = [f"n{i:02d}" for i in range(48)]
    rng = random.Random(seed)
    leaf = [i // 8 for i in range(48)]
    rng.shuffle(leaf)
    plan = "".join(f"{h},eth0,leaf{leaf[i]},{i + 1}\n" for i, h in enumerate(hosts))
    plan += "".join(f"leaf{x},{100 + s},spine{s},{x + 1}\n" for x in range(6) for s in range(8))
    nodes = tcp_fleet(hosts)
    layout = from_plan(parse_csv(plan, "plan")).place(nodes)
    planned = list(ordered_first_pass(Pattern.RANDOM, nodes, layout, seed=seed))
    rounds = list(Packer(nodes, layout).rounds(planned))
    assert Counter(p for r in rounds for p in r) == Counter(p for r in planned for p in r)
    left = [Counter(r) for r in planned]  # what each pattern round still has to run
    for rnd in rounds:
        oldest = next(i for i, c in enumerate(left) if +c)
        for p in rnd:
            # from the oldest pattern round not done, or the one after it (filling up)
            i = next(i for i in (oldest, oldest + 1) if i < len(left) and left[i][p] > 0)
            left[i][p] -= 1


def test_without_a_fabric_every_test_beside_another_is_shared_and_alone_is_not(plan):
    nodes, _ = _interleaved(plan)
    packer = Packer(nodes, None)
    assert packer.shared(((0, 1), (2, 3))) == {(0, 1), (2, 3)}
    assert packer.shared(((0, 1),)) == set()
    assert packer.pack([(0, 1), (2, 3), (4, 5)], alone_unless_proven=True) == [
        ((0, 1),),
        ((2, 3),),
        ((4, 5),),
    ]
    assert packer.load(((0, 1),)) is None


def test_an_unplaced_node_taints_the_cross_leaf_tests_beside_it(plan):
    d = load_description(plan)
    nodes = tcp_fleet(["h00", "h04", "h01", "h02", "nowhere", "h05"])
    layout = d.place(nodes)
    packer = Packer(nodes, layout)
    # (0,1) crosses leaves, (2,3) stays on leaf0, (4,5) has a node the plan does not have
    assert packer.shared(((0, 1), (2, 3), (4, 5))) == {(0, 1), (4, 5)}
    assert packer.shared(((0, 1), (2, 3))) == set()


def test_destination_routing_admits_a_leafs_uplink_groups_in_a_shift_and_proves_nothing(tmp_path):
    # an ibnetdiscover file alone: no routes, so the fat tree's destination routing is assumed
    topo = rail_fat_tree(hosts=8, rails=1, leaves_per_rail=2, spines=4)
    net = tmp_path / "fabric.net"
    net.write_text(topo.text())
    d = load_description(net)
    assert d.routing == DESTINATION and d.two_tier and set(d.uplinks.values()) == {4}
    nodes = make_fleet([host_name(h) for h in range(8)], ["mlx5_0"])
    layout = d.place(nodes)
    assert layout.unplaced == ()
    packer = Packer(nodes, layout)
    # leaf 1 (gpu05..08, ranks 4..7) sends to leaf 0 (ranks 0..3): a shift keeps them apart
    shift = ((0, 4), (1, 5), (2, 6), (3, 7))
    assert packer.pack(list(shift)) == [shift]
    assert packer.shared(shift) == set(shift)  # assumed routes prove nothing
    # two destinations in one uplink group (positions 0 and 4 of 4 groups) cannot share a round
    nodes16 = make_fleet([host_name(h) for h in range(16)], ["mlx5_0"])
    topo16 = rail_fat_tree(hosts=16, rails=1, leaves_per_rail=2, spines=4, oversubscription=2)
    net.write_text(topo16.text())
    lay16 = load_description(net).place(nodes16)
    assert set(load_description(net).uplinks.values()) == {4}
    assert len(Packer(nodes16, lay16).pack([(0, 8), (4, 9)])) == 2


def _routes_by_hand(dump: Path, topo) -> dict[tuple[int, int], list[tuple[str, int]]]:
    """(source host, destination host) -> the (switch, out port) of each ISL of its route, followed by
    the test over the saved ibroute text and the topology's own cabling and LIDs from ibnetdiscover."""
    tables = ibroute_tables((dump / "ibroute.out").read_text())
    lid: dict[str, int] = {}
    adapter = ""
    for ln in (dump / "ibnetdiscover.out").read_text().splitlines():
        if m := re.match(r'^Ca\s+\d+\s+"H-[0-9a-f]+"\s+# "([^"]+)"', ln):
            adapter = m.group(1)
        elif adapter and (m := re.search(r'"S-[0-9a-f]+"\[\d+\].*# lid (\d+)', ln)):
            lid[adapter] = int(m.group(1))
            adapter = ""
    peers = {
        (s.desc, p): (peer_id, peer_port)
        for s in topo.switches
        for p, (peer_id, peer_port, _) in s.peers.items()
    }
    desc = {s.node_id: s.desc for s in topo.switches}
    out = {}
    for a in range(8):
        for b in range(8):
            sw, _ = topo.host_cable(host_name(a), 0)
            dst_lid = lid[f"{host_name(b)} mlx5_0"]
            hops, name = [], sw.desc
            for _ in range(8):
                port = tables[name][dst_lid]
                peer_id, _pp = peers[(name, port)]
                if peer_id not in desc:
                    break
                hops.append((name, port))
                name = desc[peer_id]
            out[(a, b)] = hops
    return out


@pytest.mark.slow
def test_with_the_subnet_managers_routes_no_two_tests_of_a_round_cross_one_isl(tmp_path):
    need_simulator()
    topo = rail_fat_tree(hosts=8, rails=1, leaves_per_rail=2, spines=2)
    sim = SimFabric(topo.text(), tmp_path / "sim")
    try:
        saved = tmp_path / "routed"
        r = run_cli("fabric", "--routes", "--save", str(saved), env=sim.env())
        assert r.exit_code in (0, 1), r.stderr
    finally:
        sim.close()
    d = load_description(saved)
    assert d.routing == ROUTES
    nodes = make_fleet([host_name(h) for h in range(8)], ["mlx5_0"])
    layout = d.place(nodes)
    hand = _routes_by_hand(saved, topo)
    packer = Packer(nodes, layout)
    pairs = [(a, b) for a in range(8) for b in range(a + 1, 8)]
    for a, b in pairs:
        # the measuring (higher) rank sends: its route, as the test walked it, is the claims
        assert len(packer.path((a, b)).claims) == len(hand[(b, a)]) and packer.path((a, b)).proven
    rounds = packer.pack(pairs)
    assert sorted(p for r in rounds for p in r) == pairs
    crossing = 0
    for rnd in rounds:
        used = Counter(hop for a, b in rnd for hop in hand[(b, a)])
        assert max(used.values(), default=0) <= 1, (rnd, used)
        crossing += sum(1 for a, b in rnd if hand[(b, a)])
    assert crossing == 16  # every cross-leaf pair of the 8 hosts ran, none beside one on its ISLs


def test_the_plan_with_a_fabric_shows_the_rounds_kept_apart_and_the_worst_load(plan):
    from ibdiag.sweep.plan import plan_data, plan_lines

    d = load_description(plan)
    data = plan_data("random", 8, rounds=8, seed=2, rails=1, pair_s=2.0, fabric=d)
    c = data["contention"]
    assert c["fabric"] == str(plan) and c["routing"] == HASHED and c["proven"]
    assert c["pattern_rounds"] == 8 and c["rounds"] == data["plan"]["rounds"] > 8
    assert c["max_link_load"] == 1
    assert sum(len(r) for r in data["rounds"]) == 32  # every pair of the pattern, kept apart
    text = "\n".join(plan_lines(data, rails_given=True))
    assert "the pattern's 8 rounds run as" in text and "(proven)" in text
    without = plan_data("random", 8, rounds=8, seed=2, rails=1, pair_s=2.0)
    assert without["contention"]["max_link_load"] is None and without["plan"]["rounds"] == 8


def test_plan_with_fabric_on_the_command_line(plan, cli):
    """``ibdiag sweep --plan --fabric plan.csv``: the nodes counted from the description (no --nodes, no
    launcher), the rounds kept apart and the most tests expected on one link; a bad file is exit 2."""
    res = cli(
        "sweep", "--plan", "--fabric", plan, "--pattern", "random", "--rounds", "8", "-o", "json"
    )
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    c = doc["contention"]
    assert c["proven"] and c["max_link_load"] == 1 and c["rounds"] > c["pattern_rounds"] == 8
    table = cli("sweep", "--plan", "--fabric", plan, "--pattern", "random", "--rounds", "8")
    assert "the pattern's 8 rounds run as" in table.stdout
    bad = plan.parent / "bad.csv"
    bad.write_text("h00,eth0\n")
    res = cli("sweep", "--plan", "--fabric", bad)
    assert res.exit_code == 2 and "hint:" in res.stderr
