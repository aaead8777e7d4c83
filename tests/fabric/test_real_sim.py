"""The shapes of real fabrics (tests/support/fabric_shapes.py) live in the simulator (ibsim + opensm +
infiniband-diags): ``ibdiag fabric`` on the live subnet says what ``--from`` says of the file.

What ibsim cannot express is tested from dumps only (tests/fabric/test_real_shapes.py): a port's
supported speeds (ibsim advertises SDR-QDR and FDR-NDR on every port, ``sim_net.c``, so a DDR-only or
EDR-only adapter "could be" faster in its iblinkinfo) and ibdiagnet's spelling of a dump (ibsim reads
the value before the parenthesis as the node's GUID).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.fabric_shapes import (
    add_sharp,
    bringup_tree,
    campus,
    director_fabric,
    judged,
    management_pod,
    putty_log,
    two_spellings,
    with_prompt,
    with_stderr_line,
)
from tests.support.fabric_topology import Topology, rail_fat_tree
from tests.support.ibsim import SimFabric, need_simulator


@pytest.fixture
def sim(tmp_path: Path):
    need_simulator()
    made: list[SimFabric] = []

    def start(text: str) -> SimFabric:
        f = SimFabric(text, tmp_path / f"sim{len(made)}")
        made.append(f)
        return f

    yield start
    for f in made:
        f.close()


def live(f: SimFabric, *args: str):
    r = run_cli("fabric", "-o", "json", *args, env=f.env())
    assert r.exception is None, r.stderr
    doc = json.loads(r.stdout)
    return (
        r.exit_code,
        doc,
        [
            (x["check"], x["severity"], x["subject"])
            for x in doc["findings"]
            if x["severity"] != "ok"
        ],
    )


def ok(doc, check: str) -> list[str]:
    return [x["message"] for x in doc["findings"] if x["check"] == check and x["severity"] == "ok"]


LIVE_ONLY = (
    "fabric.sm",
    "fabric.errors",
    "fabric.xmit_wait",
)  # a bare topology file has no SM or counters


def same_as_from_file(doc, text: str, tmp_path: Path) -> None:
    """The live subnet judged as the topology file it was built from is judged offline."""
    j = judged(text, tmp_path)
    assert j.shape is not None and doc["shape"]["text"] == j.shape.text
    got = sorted(
        (f["check"], f["severity"]) for f in doc["findings"] if f["check"] not in LIVE_ONLY
    )
    assert got == sorted((f.check, f.severity.value) for f in j.findings)


def test_two_directors_live_are_chips_grouped_by_chassis_in_two_tiers(sim, tmp_path):
    t = director_fabric()
    code, doc, bad = live(sim(t.text()))
    assert code == 0 and bad == []
    assert doc["shape"]["text"].startswith(
        "three-tier fat tree: 6 leaves, 8 spines, 4 cores; director dir1 (MCS8500, 6 chips)"
    )
    assert [c["name"] for c in doc["shape"]["chassis"]] == ["dir1", "dir2"]
    assert doc["sharp"] == {
        "aggregation_nodes": 18,
        "switches_with": 18,
        "switches": 18,
        "missing": [],
    }
    same_as_from_file(doc, t.text(), tmp_path)


def test_sharp_nodes_live_are_not_hosts(sim):
    t = rail_fat_tree()
    add_sharp(t)
    code, doc, bad = live(sim(t.text()))
    assert code == 0 and bad == []
    assert ok(doc, "fabric.sharp")[0].startswith("SHARP Aggregation Nodes on 6 of 6 switches")
    assert {s["oversubscription"] for s in doc["shape"]["switches"] if s["tier"] == "leaf"} == {1.0}
    assert sum(1 for a in doc["adapters"] if a["sharp_aggregation_node"]) == 6


def test_a_fabric_under_bring_up_live_keeps_its_empty_leaves_and_names_the_loops(sim, tmp_path):
    t = bringup_tree()
    code, doc, bad = live(sim(t.text()))
    assert (
        doc["shape"]["text"]
        == "two-tier fat tree: 8 leaves, 4 spines (6 of the leaves have no host yet)"
    )
    assert bad == [("fabric.loopback", "warn", f"leaf-0{k}") for k in (3, 4, 5)]
    assert [(x["name"], x["port"], x["peer_port"]) for x in doc["loopbacks"]] == [
        (f"leaf-0{k}", 19, 20) for k in (3, 4, 5)
    ]


def test_a_management_leaf_and_a_ufm_server_on_a_spine_live(sim):
    code, doc, bad = live(sim(management_pod().text()))
    assert code == 0 and bad == []
    assert (
        doc["shape"]["text"]
        == "three-tier fat tree: 5 leaves, 4 spines, 2 cores; spine-p2-2 (spine) also has 1 host link(s)"
    )


def test_both_rail_spellings_live_and_a_swap_across_them(sim):
    t: Topology = two_spellings()
    f = sim(t.text())
    code, doc, bad = live(f)
    assert code == 0 and bad == []
    assert ok(doc, "fabric.rails") == [
        "rail-optimised: 4 rails on 4 leaves, rail k of every host on a leaf of rail k"
    ]
    a, b = t.ca("gpu02", 1), t.ca("gpu07", 2)
    sa, pa = t.host_cable("gpu02", 1)
    sb, pb = t.host_cable("gpu07", 2)
    f.console(f'Unlink "{a.node_id}"[1]', f'Unlink "{b.node_id}"[1]')
    f.settle()
    f.console(
        f'Link "{a.node_id}"[1] "{sb.node_id}"[{pb}]', f'Link "{b.node_id}"[1] "{sa.node_id}"[{pa}]'
    )
    for _ in range(20):
        code, doc, bad = live(f)
        if not any(c in ("fabric.port_state", "fabric.discovery") for c, _s, _x in bad):
            break
        f.settle(0.5)
    assert bad == [
        ("fabric.rails", "fail", "gpu02/HCA-2"),
        ("fabric.rails", "fail", "gpu07/mlx5_2"),
    ]


def test_unnamed_hosts_live_are_counted_and_a_hosts_map_places_them_in_slurm(sim, tmp_path):
    t, _quoted, node_ids = campus(ddr=False)
    f = sim(t.text())
    code, doc, bad = live(f)
    assert code == 0 and bad == []
    assert ok(doc, "fabric.names")[0].startswith(
        "18 of 18 adapters carry their firmware's default description"
    )
    m = tmp_path / "hosts"
    m.write_text(node_ids)
    conf = tmp_path / "topology.conf"
    r = run_cli("fabric", "--slurm-topology", str(conf), "--hosts", str(m), env=f.env())
    assert r.exit_code == 0, r.stderr
    nodes = [ln.split("Nodes=")[1] for ln in conf.read_text().splitlines() if "Nodes=" in ln]
    assert nodes == ["node[01-06]", "node[07-12]", "node[13-18]"]


@pytest.mark.parametrize("wrap", [with_prompt, with_stderr_line, putty_log])
def test_ibsim_reads_a_dump_as_people_save_it_and_so_does_from(sim, tmp_path, wrap):
    text = wrap(rail_fat_tree().text())
    code, doc, bad = live(sim(text))
    path = tmp_path / "saved.txt"
    path.write_bytes(text.encode())
    r = run_cli("fabric", "--from", str(path), "-o", "json")
    offline = json.loads(r.stdout)
    assert code == 0 and bad == [] and r.exit_code == 0
    assert (
        doc["shape"]["text"] == offline["shape"]["text"] == "two-tier fat tree: 4 leaves, 2 spines"
    )
    assert len(doc["links"]) == len(offline["links"]) == 64
    assert "that are not ibnetdiscover output skipped" in ok(offline, "fabric.discovery")[0]
