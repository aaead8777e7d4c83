"""``ibdiag report SWEEP --fabric SNAPSHOT`` with the subnet manager's routes: one bad ISL named exactly.

The fabric is real, as in tests/report/test_fabric_sweep.py (its docstring: ibsim + opensm run the
12-host x 2-rail fat tree, 3 leaves per rail, and ``ibdiag fabric --save`` stores it), here saved with
``--routes`` too (each switch's forwarding table as opensm programmed it, read by ibroute). The sweep is
NOT measured (the simulated subnet carries no data): its results are written in the sweep's real format
(``ibdiag.sweep/1``) by that module's ``write_sweep``. The slow pairs are chosen from the saved routes:
exactly the tested pairs whose route, either way, crosses one ISL; the test finds them with its own walk
over the ibroute text and ibnetdiscover's cabling, not with ibdiag's path code.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.report.test_fabric_sweep import HOSTS, culprits, rail0_pairs, report, write_sweep
from tests.support.cli import run_cli
from tests.support.fabric_topology import rail_fat_tree
from tests.support.ibsim import SimFabric, ibroute_tables, need_simulator

_SWITCH = re.compile(r'^Switch\s+\d+\s+"S-([0-9a-f]+)"\s+# "([^"]+)"')
_CA = re.compile(r'^Ca\s+\d+\s+"H-([0-9a-f]+)"\s+# "([^"]+)"')
_PORT = re.compile(
    r'^\[(\d+)\](?:\([0-9a-f]+\))?\s+"[SH]-([0-9a-f]+)"\[(\d+)\](?:\([0-9a-f]+\))?.*?(?:lid (\d+))?'
)


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    need_simulator()
    work = tmp_path_factory.mktemp("routed")
    f = SimFabric(rail_fat_tree(hosts=HOSTS, rails=2, leaves_per_rail=3).text(), work / "sim")
    try:
        routed, plain = work / "routed", work / "plain.tar.gz"
        for argv in (("--routes", "--save", str(routed)), ("--save", str(plain))):
            r = run_cli("fabric", *argv, env=f.env())
            assert r.exit_code in (0, 1), r.stderr
    finally:
        f.close()
    return routed, plain


def _walk_tables(dump: Path):
    """Name -> {lid: port} per switch (ibroute text), cabling (name, port) -> (name, port) and each
    adapter's (switch name, port, its LID) (ibnetdiscover text): by hand."""
    tables = ibroute_tables((dump / "ibroute.out").read_text())
    names: dict[str, str] = {}
    text = (dump / "ibnetdiscover.out").read_text()
    for ln in text.splitlines():
        if m := _SWITCH.match(ln) or _CA.match(ln):
            names[m.group(1)] = m.group(2)
    cable: dict[tuple[str, int], tuple[str, int]] = {}
    host_at: dict[str, tuple[str, int]] = {}
    host_lid: dict[str, int] = {}
    node = ""
    for ln in text.splitlines():
        if m := _SWITCH.match(ln) or _CA.match(ln):
            node = m.group(2)
        elif m := _PORT.match(ln):
            far = names[m.group(2)]
            cable[(node, int(m.group(1)))] = (far, int(m.group(3)))
            if not node.startswith(("leaf", "spine")):  # an adapter: its cable and LID
                host_at[node] = (far, int(m.group(3)))
    for ln in text.splitlines():  # an adapter's LID: "# lid N" on its port line
        if (m := _CA.match(ln)) is not None:
            node = m.group(2)
        elif node and (m := re.search(r'"S-[0-9a-f]+"\[\d+\].*# lid (\d+)', ln)):
            host_lid[node] = int(m.group(1))
            node = ""
    return tables, cable, host_at, host_lid


def _route(src: str, dst: str, walk) -> set[frozenset[tuple[str, int]]]:
    tables, cable, host_at, host_lid = walk
    sw, lid = host_at[src][0], host_lid[dst]
    out: set[frozenset[tuple[str, int]]] = set()
    for _ in range(8):
        port = tables[sw][lid]
        if (sw, port) == host_at[dst]:
            return out
        far = cable[(sw, port)]
        out.add(frozenset({(sw, port), far}))
        sw = far[0]
    raise AssertionError(f"no route from {src} to {dst}")


def test_slow_pairs_sharing_one_isl_name_that_isl_only_with_routes(dumps, tmp_path):
    routed, plain = dumps
    walk = _walk_tables(routed)
    tables, cable, host_at, _lids = walk
    assert len(tables) == 8 and len(host_at) == 24
    chosen = frozenset({("leaf-r0-1", 5), cable[("leaf-r0-1", 5)]})
    spine, spine_port = cable[("leaf-r0-1", 5)]

    def crosses(a: str, b: str) -> bool:
        return chosen in _route(a, b, walk) | _route(b, a, walk)

    slow = {
        frozenset(p)
        for p in rail0_pairs()
        if crosses(f"gpu{p[0] + 1:02d} mlx5_0", f"gpu{p[1] + 1:02d} mlx5_0")
    }
    # rail 1 (all healthy in write_sweep) never crosses a rail-0 leaf's ISL
    assert not any(
        crosses(f"gpu{k + 1:02d} mlx5_1", f"gpu{(k + 1) % HOSTS + 1:02d} mlx5_1")
        for k in range(HOSTS)
    )
    assert 2 <= len(slow) < 10, slow  # some, not all, of leaf-r0-1's 10 crossing pairs
    sweep = write_sweep(tmp_path / "sweep.json", slow)
    doc, found = report(sweep, routed)
    want = f"leaf-r0-1:5<>{spine}:{spine_port}"
    assert culprits(found) == [(want, len(slow))]
    (c,) = [x for x in found if x["check"] == "report.fabric_culprit"]
    assert c["message"] == (
        f"likely culprit: leaf-r0-1 port 5 <> {spine} port {spine_port}: {len(slow)} of {len(slow)} "
        "slow pairs cross it (the subnet manager's routes), no healthy pair crosses it"
    )
    assert c["hint"].startswith("check that ISL's cable")
    (placed,) = doc["fabric"]
    assert placed["routes_read"] is True and placed["isls_named"] is True
    (culprit,) = placed["culprits"]
    assert (culprit["kind"], culprit["port"], culprit["far_port"]) == ("isl", 5, spine_port)
    # each slow pair's route is the exact one, and names the ISL's ends
    for p in placed["paths"]:
        assert "any of" not in p["route"] and want in p["hops"]
        assert p["isl_hops"] == 2
        assert re.search(
            r"leaf-r0-\d port \d > spine-\d port \d+ -> spine-\d port \d+ > leaf", p["route"]
        )

    # the table says the routes were read (issue 38: it said "routes not read" whatever the snapshot)
    table = run_cli("report", str(sweep), "--fabric", str(routed), env={"COLUMNS": "200"}).stdout
    assert (
        "(routes read: each pair's ISLs are those of the subnet manager's forwarding tables)"
        in table
    )
    assert "routes not read" not in table and placed["pairs_unrouted"] == 0

    # the same sweep on the same fabric saved without --routes: only leaf-r0-1's uplinks are named
    _doc, found = report(sweep, plain)
    table = run_cli("report", str(sweep), "--fabric", str(plain), env={"COLUMNS": "200"}).stdout
    assert "routes not read: the ISLs are the candidates" in table and "routes read:" not in table
    # (opensm's routes here: the 6 pairs of gpu01 with 5 and 9 and 12, gpu03 with 7 and 11, gpu04
    # with 5.) Without routes no ISL is named, and no one hop explains them all: the uplinks of
    # leaf-r0-1 with healthy pairs beside the slow ones, and a host port some of them share.
    named = culprits(found)
    assert "leaf-r0-1:uplinks" in [s for s, _n in named]
    assert not any("<>" in s for s, _n in named)
    assert all(n < len(slow) for _s, n in named)


def test_a_pair_on_one_leaf_crosses_no_isl_with_routes(dumps, tmp_path):
    routed, _plain = dumps
    doc, _found = report(write_sweep(tmp_path / "sweep.json", {frozenset((1, 2))}), routed)
    (path,) = doc["fabric"][0]["paths"]
    assert path["isl_hops"] == 0
    assert path["route"] == (
        "gpu02 mlx5_0 -> leaf-r0-1 port 2 -> (same switch, no ISL) -> leaf-r0-1 port 3 -> gpu03 mlx5_0"
    )


def test_a_route_missing_from_the_tables_falls_back_to_the_candidates_and_says_so(dumps, tmp_path):
    routed, _plain = dumps
    # the same dump with leaf-r0-1's entry for gpu05 mlx5_0's LID taken out (a table read in part)
    _tables, _cable, _at, lids = _walk_tables(routed)
    broken = tmp_path / "broken"
    broken.mkdir()
    for f in routed.iterdir():
        (broken / f.name).write_bytes(f.read_bytes())
    text = (routed / "ibroute.out").read_text()
    head, sep, rest = text.partition("(leaf-r0-1):\n")
    entry = f"0x{lids['gpu05 mlx5_0']:04x} "
    rest = "\n".join(ln for ln in rest.split("\n") if not ln.startswith(entry))
    (broken / "ibroute.out").write_text(head + sep + rest)
    doc, _found = report(write_sweep(tmp_path / "sweep.json", {frozenset((0, 4))}), broken)
    (path,) = doc["fabric"][0]["paths"]
    assert "any of 4 uplink(s) of leaf-r0-1" in path["route"]
    assert path["notes"] == [
        f"the route there is not followed (the forwarding table of leaf-r0-1 has no entry for LID "
        f"{lids['gpu05 mlx5_0']}): the ISLs are candidates"
    ]
    # counted over every tested pair, slow or healthy: the cut above drops gpu05's entry from
    # leaf-r0-1's table and from every table printed after it (spine-1, leaf-r0-2, ...), so each of
    # the 4 tested pairs with rank 4 (3-4, 4-5, 0-4, 4-8) loses its route to gpu05
    assert doc["fabric"][0]["pairs_unrouted"] == 4
    table = run_cli("report", str(tmp_path / "sweep.json"), "--fabric", str(broken)).stdout
    assert "4 pair(s) whose route could not be followed have the candidates" in table


def test_with_routes_the_isls_of_a_mesh_are_named_too(tmp_path):
    # leaf-r0-1 port 9 cabled to leaf-r0-2 port 9: not a tree of tiers, so without routes no ISL is
    # named (test_fabric_sweep.py); with them opensm's route between the two leaves is that direct ISL.
    need_simulator()
    t = rail_fat_tree(hosts=HOSTS, rails=2, leaves_per_rail=3)
    one, two = t.switch("leaf-r0-1"), t.switch("leaf-r0-2")
    one.nports = two.nports = 9
    one.peers[9] = (two.node_id, 9, "4xHDR")
    two.peers[9] = (one.node_id, 9, "4xHDR")
    f = SimFabric(t.text(), tmp_path / "sim")
    try:
        r = run_cli("fabric", "--routes", "--save", str(tmp_path / "mesh"), env=f.env())
        assert r.exit_code in (0, 1), r.stderr
    finally:
        f.close()
    slow = {frozenset((0, 4)), frozenset((1, 5))}
    doc, found = report(write_sweep(tmp_path / "sweep.json", slow), tmp_path / "mesh")
    (placed,) = doc["fabric"]
    assert placed["routes_read"] is True and placed["isls_named"] is True
    path = next(p for p in placed["paths"] if "gpu05" in p["pair"])
    assert path["isl_hops"] == 1 and path["notes"] == []
    assert path["route"] == (
        "gpu01 mlx5_0 -> leaf-r0-1 port 1 -> leaf-r0-1 port 9 > leaf-r0-2 port 9 -> leaf-r0-2 port 1 -> gpu05 mlx5_0"
    )
    assert not any("not counted" in x["message"] for x in found)
