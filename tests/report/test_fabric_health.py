"""``ibdiag report SWEEP --fabric SNAPSHOT``: the saved fabric's own health beside the sweep (issue 38).

The fabric is real, as in tests/report/test_fabric_sweep.py (ibsim + opensm + infiniband-diags run the
12-host x 2-rail fat tree, 3 leaves per rail; ``ibdiag fabric --save`` stores it, with ``--routes`` and
without), here with three planted faults, each written on both ends of its cable in the topology file
ibsim reads: leaf-r0-1's first uplink (port 5) trained at 1xHDR, gpu03 mlx5_0's cable (leaf-r0-1 port
3) at 1xHDR, and gpu07 mlx5_1's (leaf-r1-2 port 3) at 4xEDR. The sweeps are NOT measured (the simulated
subnet carries no data): they are written in the sweep's format by test_fabric_sweep's ``write_sweep``.

The report must judge the snapshot as ``ibdiag fabric --from`` does (the same findings: the test runs
both), list every failing and warning finding, and say which lie on the slow pairs' paths.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.report.test_fabric_routes import _route, _walk_tables
from tests.report.test_fabric_sweep import HOSTS, culprits, rail0_pairs, report, write_sweep
from tests.support.cli import run_cli
from tests.support.fabric_topology import Topology, rail_fat_tree
from tests.support.ibsim import SimFabric, need_simulator

#: gpu03 (rank 2, leaf-r0-1 port 3) slow with each of its 4 partners: 1-2 and 2-3 on its leaf, 2-6
#: (leaf-r0-2) and 10-2 (leaf-r0-3) across leaf-r0-1's uplinks.
PORT_SLOW = {frozenset(p) for p in ((1, 2), (2, 3), (2, 6), (10, 2))}


def faulty() -> tuple[Topology, int, str, int]:
    """The tree with its three faults; (topology, leaf-r0-1's 1x uplink port, its spine, spine port)."""
    t = rail_fat_tree(hosts=HOSTS, rails=2, leaves_per_rail=3)
    _leaf, port, spine, spine_port = t.isl("leaf-r0-1", 0)
    t.set_link("leaf-r0-1", port, "1xHDR")
    sw, p = t.host_cable("gpu03", 0)
    t.set_link(sw.desc, p, "1xHDR")
    sw, p = t.host_cable("gpu07", 1)
    t.set_link(sw.desc, p, "4xEDR")
    return t, port, spine.desc, spine_port


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> tuple[Path, Path, str]:
    """(saved with --routes, saved without, the 1x ISL's subject)."""
    need_simulator()
    work = tmp_path_factory.mktemp("faulty")
    t, port, spine, spine_port = faulty()
    f = SimFabric(t.text(), work / "sim")
    try:
        routed, plain = work / "routed", work / "plain.tar.gz"
        for argv in (("--routes", "--save", str(routed)), ("--save", str(plain))):
            r = run_cli("fabric", *argv, env=f.env())
            assert r.exit_code == 1, r.stderr  # the fabric fails: its 1x and EDR links
    finally:
        f.close()
    return routed, plain, f"leaf-r0-1:{port}<>{spine}:{spine_port}"


def health(found):
    return [
        (x["severity"], x["subject"], x["value"])
        for x in found
        if x["check"] == "report.fabric_health"
    ]


def test_the_report_judges_the_snapshot_as_fabric_does_and_lists_every_fault(dumps, tmp_path):
    _routed, plain, isl = dumps
    sweep = write_sweep(tmp_path / "sweep.json", PORT_SLOW)
    doc, found = report(sweep, plain)
    own = json.loads(run_cli("fabric", "--from", str(plain), "-o", "json").stdout)
    expected = [
        (f["check"], f["severity"], f["subject"], f["message"])
        for sev in ("fail", "warn")
        for f in own["findings"]
        if f["severity"] == sev
    ]
    got = doc["fabric_health"]
    assert [(f["check"], f["severity"], f["subject"], f["message"]) for f in got["findings"]] == (
        expected
    )
    assert got["status"] == "fail" == own["status"]
    assert got["passed"] == sum(1 for f in own["findings"] if f["severity"] == "ok")
    rates = {f["subject"] for f in got["findings"] if f["check"] == "fabric.link_rate"}
    assert rates == {isl, "leaf-r0-1:3<>gpu03/mlx5_0", "leaf-r1-2:3<>gpu07/mlx5_1"}


def test_a_1x_host_cable_under_the_slow_pairs_is_named_on_their_culprit(dumps, tmp_path):
    _routed, plain, isl = dumps
    sweep = write_sweep(tmp_path / "sweep.json", PORT_SLOW)
    doc, found = report(sweep, plain)
    assert culprits(found) == [("leaf-r0-1:3", 4)]
    (c,) = [x for x in found if x["check"] == "report.fabric_culprit"]
    assert (
        "; the saved fabric says of it: host link leaf-r0-1 port 3 (cable to gpu03 mlx5_0) "
        in (c["message"])
    )
    assert "trained at 1xHDR" in c["message"] and "(fabric.link_rate, fail)" in c["message"]
    said = health(found)
    # the host cable, exactly (every one of its 4 slow pairs crosses it); the 1x uplink as one of
    # leaf-r0-1's 4 candidate uplinks two of them cross; the EDR cable of gpu07 mlx5_1 on no path
    assert ("fail", "leaf-r0-1:3<>gpu03/mlx5_0", 4) in said
    assert ("fail", isl, 2) in said
    assert ("warn", "fabric", 1) in said
    (on_port,) = [
        o
        for o in doc["fabric_health"]["on_slow_paths"]
        if o["subject"] == "leaf-r0-1:3<>gpu03/mlx5_0"
    ]
    assert on_port["exact"] is True and on_port["hops"] == ["leaf-r0-1:3"]
    (on_isl,) = [o for o in doc["fabric_health"]["on_slow_paths"] if o["subject"] == isl]
    assert on_isl["exact"] is False and on_isl["hops"] == ["leaf-r0-1:uplinks"]
    assert (
        "without the routes (fabric --routes --save) which uplink each took is not known"
        in (on_isl["text"])
    )
    (off,) = [x for x in found if x["check"] == "report.fabric_health" and x["subject"] == "fabric"]
    assert (
        "on no slow pair's path: fabric.link_rate leaf-r1-2:3<>gpu07/mlx5_1 (fail)"
        in (off["message"])
    )
    # a failing finding of the fabric on the slow pairs' path fails the report
    r = run_cli("report", str(sweep), "--fabric", str(plain), "-o", "line")
    assert r.exit_code == 1
    # the page lists every one, the one on no path too (escaped: the subjects hold "<>")
    page = run_cli("report", str(sweep), "--fabric", str(plain), "-o", "html").stdout
    fabric = page[page.index("<h2>The fabric ") : page.index("<h2>Findings per node</h2>")]
    for subject in ("leaf-r0-1:3&lt;&gt;gpu03/mlx5_0", "leaf-r1-2:3&lt;&gt;gpu07/mlx5_1"):
        assert subject in fabric
    assert "trained at 4xEDR (100 Gb/s)" in fabric
    # the table says the fabric's health, its findings on a path first
    table = run_cli("report", str(sweep), "--fabric", str(plain), env={"COLUMNS": "200"}).stdout
    start = table.index(f"fabric {plain} as `ibdiag fabric --from` judges it: FAIL")
    part = " ".join(table[start:].split())  # the lines as one text (the table wraps them)
    assert part.index("FAIL fabric.link_rate leaf-r0-1:3<>gpu03/mlx5_0: ") < part.index(
        "[on the path of 4 slow pair(s)]"
    )
    # the one on no path comes after those on a path, and says nothing of a path
    off_path = part.index("FAIL fabric.link_rate leaf-r1-2:3<>gpu07/mlx5_1: ")
    assert off_path > part.rindex("[on the path of")


def test_with_routes_the_1x_isl_the_slow_pairs_cross_is_named_exactly(dumps, tmp_path):
    routed, _plain, isl = dumps
    walk = _walk_tables(routed)
    leaf, port = isl.split("<>")[0].split(":")
    _tables, cable, _at, _lids = walk
    chosen = frozenset({(leaf, int(port)), cable[(leaf, int(port))]})
    slow = {
        frozenset(p)
        for p in rail0_pairs()
        if chosen
        in _route(f"gpu{p[0] + 1:02d} mlx5_0", f"gpu{p[1] + 1:02d} mlx5_0", walk)
        | _route(f"gpu{p[1] + 1:02d} mlx5_0", f"gpu{p[0] + 1:02d} mlx5_0", walk)
    }
    assert 2 <= len(slow) < 10
    doc, found = report(write_sweep(tmp_path / "sweep.json", slow), routed)
    assert culprits(found) == [(isl, len(slow))]
    assert ("fail", isl, len(slow)) in health(found)
    (on_isl,) = [o for o in doc["fabric_health"]["on_slow_paths"] if o["subject"] == isl]
    assert on_isl["exact"] is True and on_isl["hops"] == [isl]
    assert on_isl["text"].startswith(
        "the saved fabric's fabric.link_rate (fail): inter-switch link leaf-r0-1 port "
    )
    assert f"— {len(slow)} slow pair(s) of " in on_isl["text"]
    (c,) = doc["fabric"][0]["culprits"]
    assert c["fabric_findings"] and "1x where both ends could do 4x" in c["fabric_findings"][0]


def test_a_healthy_fabric_says_so(tmp_path):
    need_simulator()
    f = SimFabric(rail_fat_tree(hosts=HOSTS, rails=2, leaves_per_rail=3).text(), tmp_path / "sim")
    try:
        r = run_cli("fabric", "--save", str(tmp_path / "ok.tar.gz"), env=f.env())
        assert r.exit_code == 0, r.stderr
    finally:
        f.close()
    doc, found = report(write_sweep(tmp_path / "sweep.json", PORT_SLOW), tmp_path / "ok.tar.gz")
    (ok,) = [x for x in found if x["check"] == "report.fabric_health"]
    assert ok["severity"] == "ok" and ok["message"].startswith("the saved fabric ")
    assert "nothing failing or warning" in ok["message"]
    assert doc["fabric_health"]["findings"] == [] and doc["fabric_health"]["status"] == "ok"
    # without --fabric there is no fabric health at all
    r = run_cli("report", str(tmp_path / "sweep.json"), "-o", "json")
    assert json.loads(r.stdout)["fabric_health"] is None


def test_the_snapshot_is_judged_with_the_config_fabric_would_use(tmp_path):
    """``report --config``: the saved fabric's health under the site's [fabric] thresholds, as
    ``ibdiag fabric --config`` judges it (here 8x links expected of a 4x fabric: every link fails)."""
    topo = rail_fat_tree(hosts=HOSTS, rails=2, leaves_per_rail=3)
    dump = tmp_path / "fabric.net"
    dump.write_text(topo.text())
    sweep = write_sweep(tmp_path / "sweep.json", set())
    doc, _ = report(sweep, dump)
    assert doc["fabric_health"]["status"] == "ok"
    cfg = tmp_path / "ibdiag.toml"
    cfg.write_text("[fabric]\nexpect_width = 8\n")
    doc, _ = report(sweep, dump, "--config", str(cfg))
    own = json.loads(
        run_cli("fabric", "--from", str(dump), "--config", str(cfg), "-o", "json").stdout
    )
    assert doc["fabric_health"]["status"] == "fail" == own["status"]
    assert {f["check"] for f in doc["fabric_health"]["findings"]} == {"fabric.link_rate"}
