"""What real fabrics have and plain fat trees do not, read right (issue 35), on dumps the project writes
in those shapes (tests/support/fabric_shapes.py) and judges as ``ibdiag fabric --from`` does: directors
in ibdiagnet's spelling, SHARP Aggregation Nodes, empty leaves and test loops, servers on spines, slow
ports by design, both rail spellings, unnamed hosts, names operators use, duplicate GUIDs, numbers
checked where they enter. No finding may state a fault a fixture does not have."""

from __future__ import annotations

from pathlib import Path

import pytest

from ibdiag.errors import InputError
from ibdiag.fabric.config import FabricConfig
from ibdiag.fabric.namemap import parse_node_name_map
from ibdiag.fabric.slurm import parse_hosts_map, topology_conf
from ibdiag.findings.model import Severity
from tests.support.fabric_shapes import (
    Builder,
    add_sharp,
    bringup_tree,
    campus,
    director_fabric,
    judged,
    management_pod,
    mixed_speeds,
    two_spellings,
)
from tests.support.fabric_topology import rail_fat_tree


def bad(j) -> list[tuple[str, str, str]]:
    return [
        (f.check, f.severity.value, f.subject) for f in j.findings if f.severity is not Severity.OK
    ]


def said(j, check: str) -> list[str]:
    return [f.message for f in j.findings if f.check == check]


# --- 1. directors, ibdiagnet's spelling -----------------------------------------------------------


def test_a_director_in_ibdiagnets_spelling_keeps_every_chip_and_says_its_tiers(tmp_path):
    t = director_fabric()
    j = judged(t.text("ibdiagnet"), tmp_path)
    plain = judged(t.text(), tmp_path)
    # every chip keyed by its own node GUID, not its chassis's system image GUID
    switches = [n for n in j.fabric.nodes if n.kind == "switch"]
    assert len(switches) == 2 * (4 + 2) + 6 == len({n.guid for n in switches})
    assert {(n.guid, n.sysimg_guid) for n in j.fabric.nodes} == {
        (n.guid, n.sysimg_guid) for n in plain.fabric.nodes
    }
    assert len(j.fabric.links()) == len(plain.fabric.links()) == 2 * 4 * 2 + 6 * 4 + 6 * 8 + 18
    assert j.shape is not None and j.shape.text == plain.shape.text == (
        "three-tier fat tree: 6 leaves, 8 spines, 4 cores; "
        "director dir1 (MCS8500, 6 chips): line chips are spines, spine chips are cores; "
        "director dir2 (MCS8500, 6 chips): line chips are spines, spine chips are cores"
    )
    assert [c.name for c in j.shape.boxes] == ["dir1", "dir2"]
    assert j.names.node(next(n.guid for n in switches if n.desc.endswith("/L03/U1"))) == "dir1/L03"
    assert bad(j) == []


# --- 2. SHARP ---------------------------------------------------------------------------------------


def test_sharp_aggregation_nodes_are_not_hosts_and_are_said_as_such(tmp_path):
    t = rail_fat_tree()
    add_sharp(t)
    j = judged(t.text(), tmp_path)
    assert bad(j) == []
    assert said(j, "fabric.sharp") == [
        "SHARP Aggregation Nodes on 6 of 6 switches (in-network reduction for NCCL's SHARP plugin where "
        "the SHARP manager runs; they are the switches' own engines, not hosts)"
    ]
    assert j.shape is not None and j.shape.text == "two-tier fat tree: 4 leaves, 2 spines"
    assert {x.ratio for x in j.shape.loads if x.tier == 0} == {1.0}  # 8 hosts over 8 uplinks, not 9
    assert j.rails is not None and j.rails.optimised and len(j.rails.ends) == 32
    t.cas = [
        c
        for c in t.cas
        if not (c.desc.startswith("Mellanox") and c.peer and c.peer[0] == t.switches[0].node_id)
    ]
    t.switches[0].peers.pop(t.switches[0].nports)
    j = judged(t.text(), tmp_path)
    assert said(j, "fabric.sharp")[0].endswith("; none on leaf-r0-1")


# --- 3. tiers from the structure -------------------------------------------------------------------


def test_empty_leaves_stay_leaves_and_test_loops_are_named(tmp_path):
    j = judged(bringup_tree().text(), tmp_path)
    assert j.shape is not None and j.shape.kind == "tree"
    assert (
        j.shape.text == "two-tier fat tree: 8 leaves, 4 spines (6 of the leaves have no host yet)"
    )
    assert bad(j) == [("fabric.loopback", "warn", f"leaf-0{k}") for k in (3, 4, 5)]
    assert said(j, "fabric.loopback")[0] == (
        "leaf-03 is cabled to itself: port 19 to port 20 (not an ISL: it carries no traffic between switches)"
    )


def test_a_ring_of_switches_with_hosts_on_each_is_no_tree_and_no_tier_is_invented(tmp_path):
    # A vendor lab's shape: four switches cabled in a ring, hosts on every one, SHARP on each.
    b = Builder()
    sw = [b.switch(f"MF0;IB_switch_{k}:MSB7800/U1", nports=37, devid=0xCF08) for k in (1, 2, 3, 4)]
    for k in range(4):
        b.isl(sw[k], sw[(k + 1) % 4], "4xEDR")
    for k, s in enumerate(sw):
        b.host_link(s, b.ca(f"lab{k + 1} mlx5_0", f"lab{k + 1}", devid=0x1017), "4xEDR")
    t = b.topology()
    add_sharp(t)
    j = judged(t.text(), tmp_path)
    assert bad(j) == [("fabric.tiers", "warn", "fabric")]
    assert j.shape is not None and j.shape.kind == "mesh"
    assert said(j, "fabric.tiers")[0].startswith(
        "not a tree of tiers: 4 ISL(s) join switches of the same tier (IB_switch_1 — IB_switch_2;"
    )
    # Every switch has a host: each is a leaf, none a spine, and the JSON says no other tier.
    assert set(j.shape.to_json()["tiers"].values()) == {"leaf"}
    assert said(j, "fabric.sharp") == [
        "SHARP Aggregation Nodes on 4 of 4 switches (in-network reduction for NCCL's SHARP plugin "
        "where the SHARP manager runs; they are the switches' own engines, not hosts)"
    ]
    # Two rings joined by a switch without hosts: its tier is unknown, never a guessed "spine".
    b2 = Builder()
    ring = [b2.switch(f"sw{k}", nports=8) for k in range(3)]
    for k in range(3):
        b2.isl(ring[k], ring[(k + 1) % 3])
        b2.host_link(ring[k], b2.ca(f"h{k} mlx5_0", f"h{k}"))
    hub = b2.switch("hub", nports=8)
    b2.isl(ring[0], hub)
    j2 = judged(b2.topology().text(), tmp_path)
    assert j2.shape is not None and j2.shape.kind == "mesh"
    tiers = j2.shape.to_json()["tiers"]
    assert tiers[f"0x{hub.guid:016x}"] == "unknown"
    assert sorted(tiers.values()) == ["leaf", "leaf", "leaf", "unknown"]


def test_a_management_leaf_and_a_server_on_a_spine_do_not_break_the_tiers(tmp_path):
    j = judged(management_pod().text(), tmp_path)
    assert j.shape is not None and j.shape.text == (
        "three-tier fat tree: 5 leaves, 4 spines, 2 cores; spine-p2-2 (spine) also has 1 host link(s)"
    )
    assert bad(j) == []
    assert j.rails is not None and j.rails.verdict is None  # one adapter a host: no rails to judge


def test_leaves_with_more_hosts_than_their_peers_are_not_short_of_uplinks(tmp_path):
    t = rail_fat_tree(hosts=8, rails=2)
    leaf = t.switch("leaf-r0-1")
    for k in (7, 8):  # two hosts fewer on leaf-r0-1: 6 hosts over 8 uplinks, its peer 8 over 8
        peer = leaf.peers.pop(k)
        next(c for c in t.cas if c.node_id == peer[0]).peer = None
    j = judged(t.text(), tmp_path)
    assert [c for c, *_ in bad(j)] == []
    t = rail_fat_tree(hosts=8, rails=2)
    peer_id, peer_port, _ = t.switch("leaf-r1-1").peers.pop(
        9
    )  # one uplink gone: 3 to one spine, 4 to the other
    next(s for s in t.switches if s.node_id == peer_id).peers.pop(peer_port)
    j = judged(t.text(), tmp_path)
    assert bad(j) == [("fabric.oversubscription", "fail", "leaf-r1-1")]


# --- 4. slow by design -------------------------------------------------------------------------------


def test_ports_slow_by_design_are_not_degraded_and_the_one_degraded_link_is(tmp_path):
    j = judged(mixed_speeds(degraded=False).text(), tmp_path)
    assert bad(j) == []
    assert j.shape is not None and j.shape.text == "two-tier fat tree: 3 leaves, 2 spines"
    j = judged(mixed_speeds().text(), tmp_path)
    assert bad(j) == [("fabric.link_rate", "fail", "leaf-1:2<>gpu02/mlx5_0")]
    assert said(j, "fabric.link_rate") == [
        "host link leaf-1 port 2 (cable to gpu02 mlx5_0) trained at 4xEDR (100 Gb/s): "
        "EDR where both ends support HDR (ConnectX-6 and Quantum)"
    ]


def test_a_device_the_table_does_not_know_is_judged_against_its_class_and_warns_at_most(tmp_path):
    t = rail_fat_tree(hosts=8, rails=1)
    for c in t.cas:
        c.devid = 0x9999  # a device no table knows
    hsw, hport = t.host_cable("gpu03", 0)
    t.set_link(hsw.desc, hport, "4xEDR")
    j = judged(t.text(), tmp_path)
    assert bad(j) == [("fabric.link_rate", "warn", f"{hsw.desc}:{hport}<>gpu03/mlx5_0")]
    assert said(j, "fabric.link_rate")[0].endswith(
        "EDR where its class (the same devices) runs HDR; what its ends support is not in the dump"
    )


# --- 5. rails --------------------------------------------------------------------------------------------


def test_hca_1_and_mlx5_0_are_both_rail_0(tmp_path):
    t = two_spellings()
    j = judged(t.text(), tmp_path)
    assert bad(j) == []
    assert said(j, "fabric.rails") == [
        "rail-optimised: 4 rails on 4 leaves, rail k of every host on a leaf of rail k"
    ]
    # a real swap between an HCA-k host and an mlx5_k host is still found, in each one's spelling
    a, b = t.ca("gpu02", 1), t.ca("gpu07", 2)
    assert a.peer is not None and b.peer is not None
    (sa, pa, _), (sb, pb, _) = a.peer, b.peer
    a.peer, b.peer = (sb, pb, "4xHDR"), (sa, pa, "4xHDR")
    for s in t.switches:
        if s.node_id == sa:
            s.peers[pa] = (b.node_id, 1, "4xHDR")
        if s.node_id == sb:
            s.peers[pb] = (a.node_id, 1, "4xHDR")
    j = judged(t.text(), tmp_path)
    assert bad(j) == [
        ("fabric.rails", "fail", "gpu02/HCA-2"),
        ("fabric.rails", "fail", "gpu07/mlx5_2"),
    ]
    assert "swapped with gpu07 mlx5_2 (rail 2)" in said(j, "fabric.rails")[0]


def test_a_cable_on_another_port_of_its_rails_leaf_is_noticed_by_the_fabrics_pattern(tmp_path):
    t = rail_fat_tree(hosts=8, rails=4, switch_ports=20)
    sw, port = t.host_cable("gpu03", 2)
    ca = t.ca("gpu03", 2)
    sw.peers[19] = sw.peers.pop(port)
    ca.peer = (sw.node_id, 19, "4xHDR")
    j = judged(t.text(), tmp_path)
    assert bad(j) == [("fabric.rails", "warn", "gpu03/mlx5_2")]
    assert said(j, "fabric.rails")[0].startswith(
        f"gpu03 mlx5_2 (rail 2) is cabled to {sw.desc} port 19, where its other adapters use port {port}"
    )


def test_a_cable_moved_to_another_units_leaf_of_its_rail_fails_and_slurm_keeps_the_units(tmp_path):
    # 16 hosts x 4 rails, 2 leaves a rail: gpu01-08 are unit 1, gpu09-16 unit 2. gpu03's rail-2 cable
    # moves to unit 2's rail-2 leaf (a free port): a leaf of its rail, but not its unit's.
    t = rail_fat_tree(hosts=16, rails=4, leaves_per_rail=2)
    sw, port = t.host_cable("gpu03", 2)
    other = t.switch("leaf-r2-2")
    assert sw.desc == "leaf-r2-1"
    other.nports += 1  # a spare port
    free = other.nports
    ca = t.ca("gpu03", 2)
    other.peers[free] = sw.peers.pop(port)
    ca.peer = (other.node_id, free, "4xHDR")
    j = judged(t.text(), tmp_path)
    assert bad(j) == [("fabric.rails", "fail", "gpu03/mlx5_2")]
    assert said(j, "fabric.rails")[0].startswith(
        f"gpu03 mlx5_2 (rail 2) is cabled to leaf-r2-2 port {free}, a leaf of its rail but another unit's"
    )
    conf = topology_conf(j.fabric, j.names, j.shape)
    nodes = {ln.split()[0]: ln.split("Nodes=")[1] for ln in conf.splitlines() if "Nodes=" in ln}
    # Each host under one unit, the units unchanged: gpu03 stays with its other three adapters ...
    assert sorted(nodes.values()) == ["gpu[01-08]", "gpu[09-16]"]
    # ... and the file says so rather than regrouping silently.
    assert "# gpu03: 1 of its 4 adapters on another unit's leaf (a moved cable?)" in conf


def test_storage_servers_with_both_ports_on_one_leaf_are_not_judged_and_said(tmp_path):
    t = rail_fat_tree(hosts=8, rails=2)
    leaf = t.switch("leaf-r0-1")
    for k in range(2):
        for dev in range(2):  # a storage server: both adapters on leaf-r0-1
            ca = next(c for c in t.cas if c.host == f"gpu0{k + 1}" and c.rail == dev)
            old = ca.peer
            assert old is not None
            next(s for s in t.switches if s.node_id == old[0]).peers.pop(old[1])
            port = 30 + 2 * k + dev
            leaf.nports = max(leaf.nports, port)
            leaf.peers[port] = (ca.node_id, 1, "4xHDR")
            ca.peer = (leaf.node_id, port, "4xHDR")
    j = judged(t.text(), tmp_path)
    assert [c for c, *_ in bad(j) if c == "fabric.rails"] == []
    assert j.rails is not None and dict(j.rails.not_judged) == dict.fromkeys(
        ("gpu01", "gpu02"),
        "all its adapters on one leaf (a server cabled to one switch, not rail by rail)",
    )


# --- 6. unnamed hosts --------------------------------------------------------------------------------


def test_unnamed_adapters_are_counted_named_by_a_node_name_map_and_placed_in_slurm(tmp_path):
    t, quoted, node_ids = campus()
    j = judged(t.text(), tmp_path)
    assert bad(j) == []  # DDR-only ConnectX on a QDR switch: as fast as they go
    assert said(j, "fabric.names")[0].startswith(
        "18 of 18 adapters carry their firmware's default description, no host name"
    )
    with pytest.raises(InputError, match="no host is named"):
        topology_conf(j.fabric, j.names, j.shape)
    for text in (quoted, node_ids):
        m = parse_node_name_map(text, "map")
        j = judged(t.text(), tmp_path, name_map=m)
        assert said(j, "fabric.names") == []
        conf = topology_conf(j.fabric, j.names, j.shape)
        nodes = [ln for ln in conf.splitlines() if ln.startswith("SwitchName=") and "Nodes=" in ln]
        assert [ln.split("Nodes=")[1] for ln in nodes] == [
            "node[01-06]",
            "node[07-12]",
            "node[13-18]",
        ]
    # --hosts reads the same spellings and names an adapter no description names
    rename = parse_hosts_map(node_ids, "--hosts m")
    j = judged(t.text(), tmp_path)
    assert "Nodes=node[01-06]" in topology_conf(j.fabric, j.names, j.shape, rename)


def test_the_fabric_request_takes_a_node_name_map_and_slurm_gets_the_names(tmp_path):
    """The library entry point ``ibdiag fabric --node-name-map FILE`` maps to (the option is the
    CLI's to add): the map names every finding and view, and Slurm's file, without --hosts."""
    from ibdiag.fabric.command import FabricRequest, run

    t, quoted, _ids = campus()
    dump_path, map_path, conf = tmp_path / "campus.net", tmp_path / "site.map", tmp_path / "t.conf"
    dump_path.write_text(t.text())
    map_path.write_text(quoted)
    res = run(FabricRequest(source=dump_path, node_name_map=map_path, slurm_topology=conf))
    assert [f.check for f in res.report.findings if f.severity is not Severity.OK] == []
    assert not any(f.check == "fabric.names" for f in res.report.findings)
    adapters = res.report.data["adapters"]
    assert sorted(a["host"]["host"] for a in adapters)[:2] == ["node01", "node02"]
    assert "SwitchName=" in conf.read_text() and "node[13-18]" in conf.read_text()
    # A malformed map is refused with its line before anything is read (exit 2, InputError).
    map_path.write_text('0x0002c90300080d28 "a"\nnot-a-guid name\n')
    with pytest.raises(InputError, match=r"--node-name-map .* line 2: not-a-guid name"):
        run(FabricRequest(source=dump_path, node_name_map=map_path))


@pytest.mark.parametrize(
    "text, names",
    [
        ('0x0002c90300080d28 "r510gluster4"\n', {"0x0002c90300080d28": "r510gluster4"}),
        ("0x2c90300080d28 r510gluster4 # a comment\n", {"0x0002c90300080d28": "r510gluster4"}),
        ("H-0002c90300080d28 r510gluster4\n", {"0x0002c90300080d28": "r510gluster4"}),
        (
            '# IB1\n0x0008f104003f125c "IB1 (Rack 11 slot 1   ) ISR9288"\n',
            {"0x0008f104003f125c": "IB1 (Rack 11 slot 1   ) ISR9288"},
        ),
        ("\ufeff12345 node-x\n", {"0x0000000000003039": "node-x"}),
    ],
)
def test_node_name_maps_in_the_spellings_the_tools_and_sites_use(text, names):
    assert parse_node_name_map(text, "map").names == names


@pytest.mark.parametrize(
    "text, why",
    [
        ("gpu01 node-a\n", "not <GUID> <name>"),
        ('0x1 "a"\n0x1 "b"\n', "named twice"),
        ("0x1\n", "1-64 printable"),
        ("0x12345678901234567 x\n", "not <GUID> <name>"),
    ],
)
def test_a_malformed_node_name_map_is_refused_with_its_line(text, why):
    with pytest.raises(InputError, match=why):
        parse_node_name_map(text, "map")


# --- 8. names, duplicates, numbers -------------------------------------------------------------------


def test_switches_that_share_a_description_are_told_apart_by_guid(tmp_path):
    t = rail_fat_tree(hosts=8, rails=2, leaves_per_rail=1, oversubscription=2)
    for s in t.switches:
        s.desc = "Infiniscale-IV Mellanox Technologies"
    leaf = t.switches[0]
    up = max(p for p, peer in leaf.peers.items() if peer[0].startswith("S-"))
    peer_id, peer_port, _ = leaf.peers.pop(up)
    next(s for s in t.switches if s.node_id == peer_id).peers.pop(peer_port)
    j = judged(t.text(), tmp_path, fcfg=FabricConfig(expect_oversubscription=2.0))
    ((check, sev, subject),) = bad(j)
    assert (check, sev, subject) == ("fabric.oversubscription", "fail", f"0x{leaf.guid:016x}")
    assert said(j, "fabric.oversubscription")[0].startswith(
        f"leaf Infiniscale-IV Mellanox Technologies (0x{leaf.guid:016x}) is 2.67:1"
    )


def test_two_nodes_with_one_guid_are_a_finding_and_never_merged(tmp_path):
    t = rail_fat_tree(hosts=4, rails=2)
    a, b = t.switch("leaf-r0-1"), t.switch("leaf-r1-1")
    hsw, hport = t.host_cable("gpu02", 1)
    assert hsw is b
    t.set_link(b.desc, hport, "1xHDR")
    text = t.text().replace(
        f"switchguid=0x{b.guid:x}({b.guid:x})", f"switchguid=0x{a.guid:x}({a.guid:x})"
    )
    j = judged(text, tmp_path)
    assert [(c, s) for c, s, _ in bad(j)] == [
        ("fabric.duplicate_guid", "fail"),
        ("fabric.link_rate", "warn"),
    ]
    assert said(j, "fabric.duplicate_guid")[0].startswith(
        f"2 nodes say GUID 0x{a.guid:016x}: leaf-r0-1 (S-"
    )
    # the planted 1x link stays on leaf-r1-1 (its own node, kept apart), not on leaf-r0-1
    assert bad(j)[1][2] == f"leaf-r1-1:{hport}<>gpu02/mlx5_1"


@pytest.mark.parametrize(
    "edit, why",
    [
        (("lid 0 4xHDR", "lid 12345678901234567890 4xHDR"), "is not a LID"),
        (
            ("switchguid=0xb8cef60300000001(", "switchguid=0xb8cef603000000012("),
            "not 0x and 1-16 hex digits",
        ),
        (
            (
                '"H-0002c90300000100"[1](2c90300000101)',
                '"H-0002c90300000100"[1](2c9030000010100ab)',
            ),
            "is not a GUID",
        ),
        (("caguid=0x2c90300000100", "caguid=0x2c903000001000000"), "not 0x and 1-16 hex digits"),
    ],
)
def test_ibnetdiscover_numbers_are_checked_where_they_enter(tmp_path, edit, why):
    text = rail_fat_tree(hosts=4, rails=2).text()
    judged(text, tmp_path)
    text = text.replace(*edit, 1)
    assert edit[1] in text
    with pytest.raises(InputError, match=why):
        judged(text, tmp_path)


def test_the_name_inside_mf0_is_the_name_shown(tmp_path):
    t = rail_fat_tree(hosts=4, rails=2)
    for s in t.switches:
        s.desc = f"MF0;{s.desc}:MQM8700/U1"
    j = judged(t.text(), tmp_path)
    assert j.shape is not None and j.shape.text == "two-tier fat tree: 2 leaves, 2 spines"
    hsw, hport = t.host_cable("gpu01", 0)
    assert j.names.port(j.fabric.port_ref(f"0x{hsw.guid:016x}", hport)) == f"leaf-r0-1 port {hport}"


def test_a_plan_names_switches_by_the_name_operators_use(tmp_path: Path):
    from ibdiag.fabric.plan import switch_names

    t = rail_fat_tree(hosts=4, rails=2)
    for s in t.switches:
        s.desc = f"MF0;{s.desc}:MQM8700/U1"
    j = judged(t.text(), tmp_path)
    assert sorted(switch_names(j.fabric).values())[:2] == ["leaf-r0-1", "leaf-r1-1"]


def test_node_name_map_on_the_command_line(tmp_path, cli):
    """``ibdiag fabric --from DUMP --node-name-map FILE --slurm-topology OUT``: a campus fabric whose
    adapters are all unnamed gets the site's names in its findings and in Slurm's file; a malformed map
    is exit 2 naming its line."""
    t, quoted, _ids = campus()
    dump_path, map_path, conf = tmp_path / "campus.net", tmp_path / "site.map", tmp_path / "t.conf"
    dump_path.write_text(t.text())
    map_path.write_text(quoted)
    res = cli("fabric", "--from", dump_path, "--node-name-map", map_path, "--slurm-topology", conf)
    assert res.exit_code == 0, res.stderr
    assert "node[01-06]" in conf.read_text()
    without = cli("fabric", "--from", dump_path, "-o", "json")
    assert '"fabric.names"' in without.stdout and "--node-name-map" in without.stdout
    map_path.write_text('0x0002c90300080d28 "a"\nnot-a-guid name\n')
    res = cli("fabric", "--from", dump_path, "--node-name-map", map_path)
    assert res.exit_code == 2 and "line 2" in res.stderr and "hint:" in res.stderr
