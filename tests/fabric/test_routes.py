"""``ibdiag fabric --routes``: the subnet manager's forwarding tables, read with ``ibroute`` on a real
simulated subnet (ibsim + opensm, tests/support/ibsim.py), saved, parsed and followed.

The fat tree is tests/support/fabric_topology.py's 12 hosts x 2 rails, 3 leaves per rail (hosts on
ports 1-4, uplinks 5-8 to spine-1 and spine-2). The parser's input is the text ibroute printed on that
subnet (captured in the module fixture), and ``ibtracert`` (infiniband-diags, which asks the switches
hop by hop) is the independent check of a followed route.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from ibdiag.errors import InputError
from ibdiag.fabric import dump
from ibdiag.fabric.build import build_fabric
from ibdiag.fabric.capture import ToolRun
from ibdiag.fabric.hosts import Names
from ibdiag.fabric.model import CA, SWITCH, PortRef
from ibdiag.fabric.netdiscover import parse_netdiscover
from ibdiag.fabric.paths import Router, attachments
from ibdiag.fabric.routes import parse_routes
from ibdiag.fabric.shape import shape
from ibdiag.fabric.toolerr import classify
from tests.support.cli import run_cli
from tests.support.fabric_topology import rail_fat_tree
from tests.support.ibsim import SimFabric, need_simulator

_HOP = re.compile(r"^\[(\d+)\] -> (?:switch|ca) port \{(0x[0-9a-f]+)\}\[(\d+)\]")


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    need_simulator()
    work = tmp_path_factory.mktemp("routes")
    f = SimFabric(rail_fat_tree(hosts=12, rails=2, leaves_per_rail=3).text(), work / "sim")
    try:
        saved = work / "dump"
        r = run_cli("fabric", "--routes", "--save", str(saved), env=f.env())
        assert r.exit_code in (0, 1), r.stderr
        plain = work / "plain.tar.gz"
        r = run_cli("fabric", "--save", str(plain), env=f.env())
        assert r.exit_code in (0, 1), r.stderr
        yield f, saved, plain
    finally:
        f.close()


def test_routes_are_saved_as_one_run_and_only_when_asked(sim):
    _f, saved, plain = sim
    runs = json.loads((saved / "capture.json").read_text())["runs"]
    (route,) = [r for r in runs if r["name"] == "ibroute"]
    assert route["rc"] == 0 and route["command"] == "ibroute -n LID (each of 8 switches)"
    text = (saved / "ibroute.out").read_text()
    assert text.count("Unicast lids [") == 8
    # the default run does not read them; a dump without them has none
    assert dump.load(plain).run("ibroute") is None
    assert build_fabric(dump.load(plain)).routes is None
    doc = json.loads(run_cli("fabric", "--from", str(saved), "-o", "json").stdout)
    routes = doc["routes"]
    assert (routes["switches"], routes["entries"]) == (
        8,
        8 * 32,
    )  # fabric.routing's keys: test_routing.py
    doc = json.loads(run_cli("fabric", "--from", str(plain), "-o", "json").stdout)
    assert doc["routes"] is None


def test_every_host_lid_is_routed_from_every_switch(sim):
    _f, saved, _plain = sim
    tables, lids = parse_routes((saved / "ibroute.out").read_text())
    nodes, ports = parse_netdiscover((saved / "ibnetdiscover.out").read_text())
    switches = {n.guid: n.lid for n in nodes if n.kind == SWITCH}
    assert lids == switches  # each table is the switch the discovery says has that LID
    kinds = {n.guid: n.kind for n in nodes}
    host_lids = {p.lid for p in ports if kinds[p.guid] == CA and p.lid}
    assert len(host_lids) == 24
    by_ref = {(p.guid, p.port): p for p in ports}
    for sw, table in tables.items():
        assert host_lids <= set(table), sw
        assert table[switches[sw]] == 0  # its own LID: the switch itself
        for lid in host_lids:  # every entry leaves by a cabled port
            assert by_ref[(sw, table[lid])].peer is not None


def test_a_followed_route_matches_ibtracert(sim):
    f, saved, _plain = sim
    fab = build_fabric(dump.load(saved))
    assert fab.routes is not None and not fab.partial
    names = Names(fab, {})
    atts = {k[0]: v[0] for k, v in attachments(fab, names).items() if k[1] == "mlx5_0"}
    router = Router(shape(fab), fab)
    src = atts["gpu01"]
    src_lid = fab.port(PortRef(src.ca, src.ca_port)).lid
    checked = 0
    for host in ("gpu02", "gpu05", "gpu08", "gpu09", "gpu12"):
        dst = atts[host]
        dst_lid = fab.port(PortRef(dst.ca, dst.ca_port)).lid
        route = router.route(src, dst)
        assert not isinstance(route, str), route
        out = f.run(["ibtracert", str(src_lid), str(dst_lid)])
        assert out.returncode == 0, out.stderr
        found = [_HOP.match(ln) for ln in out.stdout.splitlines()]
        hops = [(int(m.group(1)), m.group(2), int(m.group(3))) for m in found if m]
        # ibtracert: "[out port] -> node {guid}[in port]" per hop, from the previous node: the first
        # hop is the source's cable, the last the destination's; the ones between are the ISLs.
        isls = [
            (PortRef(hops[k - 1][1], hops[k][0]), PortRef(hops[k][1], hops[k][2]))
            for k in range(1, len(hops) - 1)
        ]
        assert list(route) == isls
        # and it ends at the destination's switch port
        assert hops[-1][0] == dst.port and hops[-2][1] == dst.switch
        checked += len(route)
    assert checked == 2 * 4  # gpu02 shares gpu01's leaf: no ISL; the other 4 cross two


def test_a_route_that_cannot_be_followed_says_why(sim):
    _f, saved, _plain = sim
    fab = build_fabric(dump.load(saved))
    names = Names(fab, {})
    atts = {k[0]: v[0] for k, v in attachments(fab, names).items() if k[1] == "mlx5_0"}
    a, b = atts["gpu01"], atts["gpu05"]
    dlid = fab.port(PortRef(b.ca, b.ca_port)).lid
    leaf = a.switch
    routes = {k: dict(v) for k, v in fab.routes.items()}
    del routes[leaf][dlid]
    why = Router(shape(fab), replace(fab, routes=routes)).route(a, b)
    assert why == f"the forwarding table of {leaf} has no entry for LID {dlid}"
    # a loop: the spine sends it back down to the first leaf, which sends it up again
    routes = {k: dict(v) for k, v in fab.routes.items()}
    first = Router(shape(fab), fab).route(a, b)
    (up, _down) = first
    routes[up[1].guid][dlid] = up[1].port
    why = Router(shape(fab), replace(fab, routes=routes)).route(a, b)
    assert why == f"the route to LID {dlid} loops (back at {leaf})"
    # a host port: no ISL
    routes[leaf][dlid] = 2
    why = Router(shape(fab), replace(fab, routes=routes)).route(a, b)
    assert why == f"{leaf} sends LID {dlid} out of port 2, which is no active ISL"


def test_ibroute_of_an_unknown_lid_is_a_note_not_a_table(sim):
    f, _saved, _plain = sim
    r = f.run(["ibroute", "-n", "9999"])
    assert r.returncode != 0
    run = ToolRun("ibroute", "ibroute -n 9999", r.stdout, r.stderr, r.returncode)
    assert parse_routes(r.stdout) == ({}, {})
    notes = classify(run)
    assert [(n.kind, n.text) for n in notes] == [
        (
            "unreachable",
            "forwarding table of the switch at LID 9999 not read: dump tables: node info failed: valid addr?",
        )
    ]


def test_parser_reads_both_of_ibroutes_formats(sim):
    f, _saved, _plain = sim
    plain = f.run(["ibroute", "-n", "2"]).stdout
    resolved = f.run(["ibroute", "2"]).stdout  # each entry names its destination
    assert "Channel Adapter portguid" in resolved
    assert parse_routes(plain) == parse_routes(resolved)
    tables, lids = parse_routes(plain)
    ((guid, table),) = tables.items()
    assert lids == {guid: 2} and table[2] == 0 and len(table) == 32


@pytest.mark.parametrize(
    ("text", "line", "why"),
    [
        ("0x0001 005 \n", 1, "a forwarding entry before any switch's header"),
        (
            "Unicast lids [0x0-0x2] of switch Lid 2 guid 0x1 (a):\n0xc001 001\n",
            2,
            "not a unicast LID and port",
        ),
        (
            "Unicast lids [0x0-0x2] of switch Lid 2 guid 0x1 (a):\n0x0001 300\n",
            2,
            "not a unicast LID and port",
        ),
        (
            "Unicast lids [0x0-0x2] of switch Lid 2 guid 0x1 (a):\n"
            "Unicast lids [0x0-0x2] of switch Lid 2 guid 0x01 (a):\n",
            2,
            "listed twice",
        ),
        ("Unicast lids [0x0-0x2] of switch Lid 2 guid 0x1 (a):\nbogus\n", 2, "not a line"),
        (
            "Unicast lids [0x0-0x2] of switch Lid 2 guid 0x1 (a):\n"
            "ibroute: iberror: failed: x\n0x0001 001\n",
            3,
            "before any switch's header",
        ),
    ],
)
def test_bad_ibroute_text_is_an_input_error_with_its_line(text, line, why):
    with pytest.raises(InputError) as e:
        parse_routes(text)
    assert f"line {line}: " in str(e.value) and why in str(e.value)


def test_routes_flag_is_refused_with_a_saved_fabric(sim):
    _f, saved, _plain = sim
    r = run_cli("fabric", "--from", str(saved), "--routes")
    assert r.exit_code == 2 and "--routes reads the live fabric" in r.stderr
