"""``fabric.routing``: what the subnet manager's routes do with the host ports, judged from the
forwarding tables opensm wrote on a real simulated subnet (ibsim, tests/support/ibsim.py).

The fat tree is tests/support/fabric_topology.py's 12 hosts x 2 rails, 3 leaves per rail (hosts on
ports 1-4, uplinks 5-8 to spine-1 and spine-2): 24 host ports, so each leaf has 20 remote
destinations over 4 uplinks. The unbalanced and unreachable cases are test-made variants of the
``ibroute.out`` opensm's routes gave (entries rewritten or deleted in the saved text), named as such.
"""

from __future__ import annotations

import json
import re
import shutil
from math import ceil

import pytest

from ibdiag.counters.config import CountersConfig
from ibdiag.errors import InputError
from ibdiag.fabric import dump
from ibdiag.fabric.build import build_fabric
from ibdiag.fabric.config import FabricConfig
from ibdiag.fabric.judge import judge
from ibdiag.fabric.model import CA, PortRef
from tests.support.cli import run_cli
from tests.support.fabric_topology import rail_fat_tree
from tests.support.ibsim import SimFabric, need_simulator

_HEADER = re.compile(r"^Unicast lids .* guid (0x[0-9a-f]+) \((.*)\):$")
_ENTRY = re.compile(r"^0x([0-9a-f]{4}) (\d{3})")
TOPO = rail_fat_tree(hosts=12, rails=2, leaves_per_rail=3)


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    need_simulator()
    work = tmp_path_factory.mktemp("routing")
    f = SimFabric(TOPO.text(), work / "sim")
    try:
        saved = work / "dump"
        r = run_cli("fabric", "--routes", "--save", str(saved), env=f.env())
        assert r.exit_code == 0, r.stderr
        plain = work / "plain"
        r = run_cli("fabric", "--save", str(plain), env=f.env())
        assert r.exit_code == 0, r.stderr
        # then leaf-r0-1's first uplink unplugged: opensm routes around it (read with --routes too)
        leaf, lport, spine, sport = TOPO.isl("leaf-r0-1", 0)
        f.console(f'Unlink "{leaf.node_id}"[{lport}]')
        f.settle(1.0)
        down = work / "down"
        r = run_cli("fabric", "--routes", "--save", str(down), env=f.env())
        assert r.exit_code in (0, 1), r.stderr
        yield saved, plain, (down, lport, spine.desc, sport)
    finally:
        f.close()


def tables(text: str) -> dict[str, dict[int, int]]:
    """Switch description -> {LID: port}, read with this test's own patterns."""
    out: dict[str, dict[int, int]] = {}
    cur: dict[int, int] = {}
    for line in text.splitlines():
        if m := _HEADER.match(line):
            cur = out[m.group(2)] = {}
        elif m := _ENTRY.match(line):
            cur[int(m.group(1), 16)] = int(m.group(2))
    return out


def variant(saved, tmp_path, edits: dict[str, dict[int, int | None]]):
    """A copy of the saved dump whose ibroute.out has, in the table of each switch named, each LID's
    entry sent out of another port (None: the entry deleted)."""
    out = tmp_path / "variant"
    shutil.copytree(saved, out)
    lines, sw = [], None
    for line in (saved / "ibroute.out").read_text().splitlines():
        if m := _HEADER.match(line):
            sw = m.group(2)
        elif (m := _ENTRY.match(line)) and int(m.group(1), 16) in edits.get(sw or "", {}):
            port = edits[sw or ""][int(m.group(1), 16)]
            if port is None:
                continue
            line = f"0x{m.group(1)} {port:03d} "
        lines.append(line)
    (out / "ibroute.out").write_text("\n".join(lines) + "\n")
    return out


def routing_findings(path, *args):
    r = run_cli("fabric", "--from", str(path), "-o", "json", *args)
    doc = json.loads(r.stdout)
    return r.exit_code, [f for f in doc["findings"] if f["check"] == "fabric.routing"], doc


def host_lids(saved) -> dict[str, int]:
    """``gpu05 mlx5_0`` -> its port's LID."""
    fab = build_fabric(dump.load(saved))
    return {n.desc: fab.port(PortRef(n.guid, 1)).lid for n in fab.nodes if n.kind == CA}


def test_opensms_routes_on_a_symmetric_fat_tree_are_balanced(sim):
    saved, _plain, _down = sim
    rc, found, doc = routing_findings(saved)
    assert rc == 0
    assert [(f["severity"], f["message"]) for f in found] == [
        (
            "ok",
            "routes balanced: 6 leaves, uplinks carry 5 destinations each; 8 switches route all 24 host ports",
        )
    ]
    routes = doc["routes"]
    assert routes["destinations"] == 24 and routes["unreachable"] == 0
    assert len(routes["balance"]) == 6
    for leaf in routes["balance"]:
        assert leaf["destinations"] == 20 and leaf["even"] == 5 and not leaf["unbalanced"]
        assert [u["port"] for u in leaf["uplinks"]] == [5, 6, 7, 8]
        assert {u["destinations"] for u in leaf["uplinks"]} == {5}


def test_without_routes_there_is_no_routing_finding(sim):
    _saved, plain, _down = sim
    rc, found, doc = routing_findings(plain)
    assert rc == 0 and found == [] and doc["routes"] is None


def test_a_leaf_stacking_destinations_on_one_uplink_warns(sim, tmp_path):
    """Test-made variant: leaf-r0-1's entries that went out of uplink 6 go out of uplink 5."""
    saved, _plain, _down = sim
    hosts = set(host_lids(saved).values())
    leaf = tables((saved / "ibroute.out").read_text())["leaf-r0-1"]
    moved = {lid: 5 for lid, port in leaf.items() if port == 6 and lid in hosts}
    on5 = sum(1 for lid, port in leaf.items() if port == 5 and lid in hosts)
    assert len(moved) == on5 == 5  # opensm's share: 5 each, as the balanced test says
    path = variant(saved, tmp_path, {"leaf-r0-1": moved})
    rc, found, _doc = routing_findings(path)
    assert rc == 0  # a warning (exit 1 under --strict)
    even = ceil(20 / 4)
    assert [(f["severity"], f["subject"], f["message"], f["value"], f["limit"]) for f in found] == [
        (
            "warn",
            "leaf-r0-1",
            f"leaf leaf-r0-1 sends {on5 + len(moved)} of its 20 remote destinations through leaf-r0-1 port 5 "
            f"where an even share is {even} over 4 uplinks (uplinks carry 0–10)",
            10,
            5,
        )
    ]


def test_one_destination_over_the_even_share_is_within_the_tolerance(sim, tmp_path):
    """Test-made variants: one entry moved (6 against 5) is balanced; ten (10 against 5) is not with the
    default tolerance but is with route_balance_tolerance = 1.0 (10 is not more than 5 x 2)."""
    saved, _plain, _down = sim
    hosts = set(host_lids(saved).values())
    leaf = tables((saved / "ibroute.out").read_text())["leaf-r0-1"]
    one = min(lid for lid, port in leaf.items() if port == 6 and lid in hosts)
    rc, found, _doc = routing_findings(variant(saved, tmp_path / "a", {"leaf-r0-1": {one: 5}}))
    assert rc == 0
    assert [f["message"] for f in found] == [
        "routes balanced: 6 leaves, uplinks carry 4–6 destinations each; 8 switches route all 24 host ports"
    ]
    moved = {lid: 5 for lid, port in leaf.items() if port == 6 and lid in hosts}
    fab = build_fabric(dump.load(variant(saved, tmp_path / "b", {"leaf-r0-1": moved})))
    cfg = CountersConfig()
    default = judge(fab, hosts={}, cfg=cfg, fcfg=FabricConfig())
    assert [f.severity.value for f in default.findings if f.check == "fabric.routing"] == ["warn"]
    loose = judge(fab, hosts={}, cfg=cfg, fcfg=FabricConfig(route_balance_tolerance=1.0))
    assert [f.severity.value for f in loose.findings if f.check == "fabric.routing"] == ["ok"]
    with pytest.raises(InputError):
        FabricConfig(route_balance_tolerance=-0.1)


def test_a_host_lid_missing_from_tables_fails_naming_the_host_and_switches(sim, tmp_path):
    """Test-made variant: gpu05 mlx5_0's entry deleted from spine-1's and leaf-r1-2's tables, and
    spine-2 sending it to port 0 (itself)."""
    saved, _plain, _down = sim
    lid = host_lids(saved)["gpu05 mlx5_0"]
    path = variant(
        saved,
        tmp_path,
        {"spine-1": {lid: None}, "leaf-r1-2": {lid: None}, "spine-2": {lid: 0}},
    )
    rc, found, doc = routing_findings(path)
    assert rc == 1
    fab = build_fabric(dump.load(saved))
    (ca,) = [n for n in fab.nodes if n.desc == "gpu05 mlx5_0"]
    (cable,) = [p for p in fab.ports if p.peer == PortRef(ca.guid, 1)]
    on = f"{fab.node(cable.guid).desc} port {cable.port}"
    assert [(f["severity"], f["subject"], f["message"], f["value"]) for f in found] == [
        (
            "fail",
            "gpu05/mlx5_0",
            f"gpu05 mlx5_0 (LID {lid}, on {on}) cannot be reached from 3 switch(es): "
            f"leaf-r1-2 (no entry for LID {lid}); spine-1 (no entry for LID {lid}); spine-2 (port 0 (the switch itself))",
            3,
        )
    ]
    assert doc["routes"]["unreachable"] == 3


def test_the_hosts_own_leaf_sending_it_elsewhere_fails(sim, tmp_path):
    """Test-made variant: gpu02 mlx5_1's leaf sends its LID up uplink 5 instead of down its cable."""
    saved, _plain, _down = sim
    lid = host_lids(saved)["gpu02 mlx5_1"]
    fab = build_fabric(dump.load(saved))
    (ca,) = [n for n in fab.nodes if n.desc == "gpu02 mlx5_1"]
    (cable,) = [p for p in fab.ports if p.peer == PortRef(ca.guid, 1)]
    leaf = fab.node(cable.guid).desc
    rc, found, _doc = routing_findings(variant(saved, tmp_path, {leaf: {lid: 5}}))
    assert rc == 1
    assert [f["message"] for f in found] == [
        f"gpu02 mlx5_1 (LID {lid}, on {leaf} port {cable.port}) cannot be reached from 1 switch(es): "
        f"{leaf} (port 5, not its cable (port {cable.port}))"
    ]


def test_opensm_routes_around_an_unplugged_uplink(sim):
    _saved, _plain, (down, lport, _spine, _sport) = sim
    rc, found, doc = routing_findings(down)
    assert [f["severity"] for f in found] == ["ok"]
    (leaf,) = [
        b
        for b in doc["routes"]["balance"]
        if b["leaf"] == f"0x{TOPO.switch('leaf-r0-1').guid:016x}"
    ]
    # 20 remote destinations over the 3 uplinks left: 7, 7 and 6
    assert lport not in [u["port"] for u in leaf["uplinks"]] and leaf["even"] == 7
    assert sorted(u["destinations"] for u in leaf["uplinks"]) == [6, 7, 7]


def test_routes_from_before_an_uplink_went_down_fail_for_the_hosts_behind_it(sim, tmp_path):
    """Test-made variant: the dump read after leaf-r0-1's uplink was unplugged, with the forwarding
    tables read before (stale routes: what a subnet manager that has not swept since leaves)."""
    saved, _plain, (down, lport, spine, sport) = sim
    stale = tmp_path / "stale"
    shutil.copytree(down, stale)
    shutil.copy(saved / "ibroute.out", stale / "ibroute.out")
    rc, found, _doc = routing_findings(stale)
    assert rc == 1
    fab = build_fabric(dump.load(saved))
    old = tables((saved / "ibroute.out").read_text())
    expected = []
    for n in sorted(
        (n for n in fab.nodes if n.kind == CA), key=lambda n: fab.port(PortRef(n.guid, 1)).lid
    ):
        lid = fab.port(PortRef(n.guid, 1)).lid
        (cable,) = [p for p in fab.ports if p.peer == PortRef(n.guid, 1)]
        on = fab.node(cable.guid).desc
        why = []
        if on != "leaf-r0-1" and old["leaf-r0-1"][lid] == lport:
            why.append(f"leaf-r0-1 (port {lport}, not cabled)")
        if on == "leaf-r0-1" and old[spine][lid] == sport:
            why.append(f"{spine} (port {sport}, not cabled)")
        if why:
            expected.append(
                f"{n.desc} (LID {lid}, on {on} port {cable.port}) cannot be reached from "
                f"{len(why)} switch(es): {'; '.join(why)}"
            )
    # opensm's even share: 5 remote hosts over the lost uplink, 2 of leaf-r0-1's 4 hosts down it
    assert len(expected) == 5 + 2
    assert [(f["severity"], f["message"]) for f in found] == [("fail", m) for m in expected]
