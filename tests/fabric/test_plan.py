"""``ibdiag fabric --expect PLAN``: the cabling against a plan, on the simulated subnet and offline.

The plan is written by the tests' own generator from the same topology (tests/support/fabric_topology.py).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from ibdiag.errors import InputError
from ibdiag.fabric import dump
from ibdiag.fabric.build import build_fabric
from ibdiag.fabric.hosts import Names
from ibdiag.fabric.plan import cabling, diff, load_plan, parse_csv, parse_toml, resolve
from tests.support.cli import run_cli
from tests.support.fabric_topology import plan_csv, rail_fat_tree
from tests.support.ibsim import SimFabric, need_simulator


@pytest.fixture
def sim(tmp_path: Path):
    need_simulator()
    made: list[SimFabric] = []

    def start(topo) -> SimFabric:
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


def fabric(f: SimFabric | None, *args: str):
    r = run_cli("fabric", "-o", "json", *args, env=f.env() if f else None)
    assert r.exception is None, r.stderr
    doc = json.loads(r.stdout)
    return r.exit_code, doc, [x for x in doc["findings"] if x["severity"] != "ok"]


def test_the_fabric_as_planned_matches_and_a_moved_cable_is_named_by_its_host_end(sim, tmp_path):
    t = rail_fat_tree(switch_ports=20)  # 4 spare ports on every leaf
    plan = tmp_path / "plan.csv"
    plan.write_text(plan_csv(t))
    f = sim(t)
    code, doc, bad = fabric(f, "--expect", str(plan))
    assert code == 0 and bad == []
    assert [x["message"] for x in doc["findings"] if x["check"] == "fabric.plan"] == [
        f"the cabling matches {plan}: 32 host cables, 32 ISLs"
    ]
    # gpu03's and gpu04's rail-1 cables swapped on their leaf: two cables moved, no rail broken
    a, b = t.ca("gpu03", 1), t.ca("gpu04", 1)
    leaf, pa = t.host_cable("gpu03", 1)
    _, pb = t.host_cable("gpu04", 1)
    f.console(f'Unlink "{a.node_id}"[1]', f'Unlink "{b.node_id}"[1]')
    f.settle()  # opensm sweeps the cables out before they come back elsewhere
    f.console(
        f'Link "{a.node_id}"[1] "{leaf.node_id}"[{pb}]',
        f'Link "{b.node_id}"[1] "{leaf.node_id}"[{pa}]',
    )
    f.settle()
    code, doc, bad = settled(f, "--expect", str(plan))
    assert code == 1
    assert [
        (x["check"], x["subject"], x["message"]) for x in bad if x["check"] == "fabric.plan"
    ] == [
        (
            "fabric.plan",
            "gpu03/mlx5_1",
            f"moved: gpu03 mlx5_1: cabled to leaf-r1-1 port {pb}, the plan says leaf-r1-1 port {pa}",
        ),
        (
            "fabric.plan",
            "gpu04/mlx5_1",
            f"moved: gpu04 mlx5_1: cabled to leaf-r1-1 port {pa}, the plan says leaf-r1-1 port {pb}",
        ),
    ]
    # Without the plan the fabric's own pattern (every host on one port of every rail leaf) says so too.
    rails = [(x["severity"], x["subject"]) for x in bad if x["check"] == "fabric.rails"]
    assert rails == [("warn", "gpu03/mlx5_1"), ("warn", "gpu04/mlx5_1")]
    moved = next(
        x["message"] for x in bad if x["check"] == "fabric.rails" and x["subject"] == "gpu03/mlx5_1"
    )
    assert moved.endswith(
        f"(6 of 8 hosts keep one port on every rail); swapped with gpu04 mlx5_1, on port {pa}"
    )
    assert doc["plan"]["changes"][0] == {
        "kind": "moved",
        "end": "gpu03 mlx5_1",
        "planned": f"leaf-r1-1 port {pa}",
        "now": f"leaf-r1-1 port {pb}",
    }


def test_a_saved_fabric_is_a_plan_an_isl_unplugged_since_is_missing(sim, tmp_path):
    t = rail_fat_tree()
    f = sim(t)
    good = tmp_path / "good.tar.gz"
    assert run_cli("fabric", "--save", str(good), env=f.env()).exit_code == 0
    leaf, lport, spine, sport = t.isl("leaf-r0-1", 2)
    f.console(f'Unlink "{leaf.node_id}"[{lport}]')
    f.settle()
    code, doc, bad = settled(f, "--expect", str(good))
    plan = [x for x in bad if x["check"] == "fabric.plan"]
    assert [(x["subject"], x["message"]) for x in plan] == [
        (
            f"{leaf.desc}:{lport}<>{spine.desc}:{sport}",
            f"missing: {leaf.desc} port {lport} — {spine.desc} port {sport}: in the plan, not cabled (or not up)",
        )
    ]
    # and the leaf, one uplink short, is named by the shape check
    assert {x["check"] for x in bad} == {"fabric.plan", "fabric.oversubscription"}


def test_a_plan_in_toml_with_switches_by_guid_and_an_unplanned_cable(tmp_path):
    t = rail_fat_tree(hosts=2, rails=2, spines=2)
    net = tmp_path / "net"
    net.write_text(t.text())
    leaf0 = t.switch("leaf-r0-1")
    rows = [
        f'[[host]]\nnode = "{c.host}"\nadapter = "mlx5_{c.rail}"\nswitch = "'
        + (
            f"0x{leaf0.guid:016x}"
            if c.peer[0] == leaf0.node_id
            else t.switch(f"leaf-r{c.rail}-1").desc
        )
        + f'"\nport = {c.peer[1]}\n'
        for c in t.cas
        if (c.host, c.rail) != ("gpu02", 1)  # the plan forgot this one
    ]
    isls = plan_csv(t).splitlines()[5:]
    for line in isls:
        a, ap, b, bp = line.split(",")
        rows.append(f'[[isl]]\nswitch = "{a}"\nport = {ap}\npeer = "{b}"\npeer_port = {bp}\n')
    plan = tmp_path / "plan.toml"
    plan.write_text("\n".join(rows))
    code, doc, bad = fabric(None, "--from", str(net), "--expect", str(plan))
    assert [(x["check"], x["message"]) for x in bad] == [
        (
            "fabric.plan",
            "unexpected: gpu02 mlx5_1 — leaf-r1-1 port 2: cabled, not in the plan",
        )
    ]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            "gpu01,mlx5_0,leaf,1\ngpu01,mlx5_0,leaf,2\n",
            r"line 2: gpu01 mlx5_0 is planned twice \(line 1 too\)",
        ),
        ("gpu01,mlx5_0,leaf\n", "line 1: 3 fields, not 4"),
        ("leaf,1,spine,999\n", "line 1: port '999' is not a port number"),
        ("# a comment\n\ngpu 01,mlx5_0,leaf,1\n", "line 3: 'gpu 01' is not a node"),
        ("gpu01,mlx5_0,leaf\x1b[31m,1\n", r"line 1: 'leaf\\x1b\[31m' is not a node"),
    ],
)
def test_a_malformed_csv_plan_is_refused_with_its_line(text, said):
    with pytest.raises(InputError, match=said):
        parse_csv(text, "plan.csv")


def test_a_malformed_toml_plan_is_refused():
    with pytest.raises(
        InputError, match=r"\[\[host\]\] 1: needs exactly node, adapter, switch, port"
    ):
        parse_toml('[[host]]\nnode = "gpu01"\n', "plan.toml")
    with pytest.raises(InputError, match="unknown table"):
        parse_toml("[cables]\n", "plan.toml")


def test_swapped_cables_are_two_moves():
    a, b = ("H", "gpu01", "mlx5_0"), ("H", "gpu02", "mlx5_0")
    x, y = ("S", "leaf", "1"), ("S", "leaf", "2")
    got = diff(
        frozenset({frozenset((a, x)), frozenset((b, y))}),
        frozenset({frozenset((a, y)), frozenset((b, x))}),
    )
    assert [(c.kind, c.end, c.planned, c.now) for c in got] == [
        ("moved", a, x, y),
        ("moved", b, y, x),
    ]


def test_a_plan_of_four_thousand_cables_diffs_well_under_a_second(tmp_path):
    # 256 hosts x 8 rails on 32 leaves (8 per rail), 16 spines: 2048 host cables + 2048 ISLs.
    t = rail_fat_tree(hosts=256, rails=8, leaves_per_rail=4, spines=16)
    net = tmp_path / "net"
    net.write_text(t.text())
    text = plan_csv(t).splitlines()
    # move 40 host cables in the plan (swap ports pairwise on one leaf)
    for i in [1 + 16 * blk + k for blk in range(5) for k in range(4)]:
        n1, a1, s1, p1 = text[i].split(",")
        n2, a2, s2, p2 = text[i + 8].split(",")
        text[i], text[i + 8] = f"{n1},{a1},{s1},{p2}", f"{n2},{a2},{s2},{p1}"
    plan_file = tmp_path / "plan.csv"
    plan_file.write_text("\n".join(text) + "\n")
    fab = build_fabric(dump.load(net))
    names = Names(fab, {})
    start = time.perf_counter()
    plan = load_plan(plan_file, {})
    cab = cabling(fab, names)
    changes = diff(resolve(plan, cab.aliases), cab.cables)
    took = time.perf_counter() - start
    assert len(plan.cables) == 4096 and len(cab.cables) == 4096
    assert len(changes) == 40 and {c.kind for c in changes} == {"moved"}
    assert took < 0.6, took  # about 0.15 s on an idle core
