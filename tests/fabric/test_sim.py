"""``ibdiag fabric`` against a real subnet: ibsim + opensm + infiniband-diags (tests/support/ibsim.py).

Each planted fault gives exactly its finding, naming both ends (and the host, NIC and GPUs where a
host is involved); the healthy fabric is OK. Every fabric here is the 8-host x 4-rail fat tree of
tests/support/fabric_topology.py (4 leaves, 2 spines, 1:1) unless a test says otherwise.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.fabric_topology import Topology, rail_fat_tree
from tests.support.ibsim import SimFabric, need_simulator


@pytest.fixture
def sim(tmp_path: Path):
    need_simulator()
    made: list[SimFabric] = []

    def start(topo: Topology | None = None, **kw) -> tuple[SimFabric, Topology]:
        t = topo or rail_fat_tree()
        f = SimFabric(t.text(), tmp_path / f"sim{len(made)}", **kw)
        made.append(f)
        return f, t

    yield start
    for f in made:
        f.close()


def fabric(f: SimFabric, *args: str):
    r = run_cli("fabric", "-o", "json", *args, env=f.env())
    assert r.exception is None, r.stderr
    doc = json.loads(r.stdout)
    return r.exit_code, doc, [x for x in doc["findings"] if x["severity"] != "ok"]


def test_the_healthy_fat_tree_is_ok(sim):
    f, t = sim()
    code, doc, bad = fabric(f)
    assert code == 0 and bad == [] and doc["status"] == "ok"
    assert len(doc["switches"]) == 6 and len(doc["adapters"]) == 32 and len(doc["links"]) == 64
    assert sum(1 for link in doc["links"] if link["kind"] == "isl") == 32
    (sm,) = doc["subnet_managers"]
    assert sm["state"] == "master" and doc["partial"] is False


def test_symbol_errors_on_the_leaf_side_of_a_host_cable_name_the_host_nic_and_gpus(sim, tmp_path):
    f, t = sim()
    sw, port = t.host_cable("gpu03", 2)
    f.console(f'PerformanceSet "{sw.node_id}"[{port}] PortCounters.SymbolErrorCounter=57')
    topo = tmp_path / "gpu03.json"
    ca = t.ca("gpu03", 2)
    g = f"{ca.guid:016x}"
    topo.write_text(
        json.dumps(
            {
                "schema": "ibdiag.topo/1",
                "host": "gpu03",
                "adapters": [
                    {
                        "name": "mlx5_2",
                        "nic_index": 2,
                        "node_guid": ":".join(g[i : i + 4] for i in range(0, 16, 4)),
                    }
                ],
                "pairings": [{"gpu": 2, "nearest": ["mlx5_2"]}, {"gpu": 3, "nearest": ["mlx5_2"]}],
            }
        )
    )
    code, doc, bad = fabric(f, "--topo", str(topo))
    assert [(x["check"], x["subject"], x["value"]) for x in bad] == [
        ("fabric.errors", f"{sw.desc}:{port}", 57)
    ]
    assert "cable to gpu03 mlx5_2 (NIC 2, GPU2/GPU3)" in bad[0]["message"]
    assert "symbol_error 57" in bad[0]["message"] and "host-facing" in bad[0]["message"]


def _after_first_run_of(tool: str, action, timeout_s: float = 30.0) -> threading.Thread:
    """Run ``action`` once the first process of ``tool`` has come and gone (watched in /proc)."""

    def running() -> bool:
        for pid in os.listdir("/proc"):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if f.read().split(b"\0")[0].endswith(tool.encode()):
                        return True
            except OSError:
                continue
        return False

    def watch() -> None:
        deadline = time.monotonic() + timeout_s
        while not running() and time.monotonic() < deadline:
            time.sleep(0.002)
        while running() and time.monotonic() < deadline:
            time.sleep(0.002)
        action()

    th = threading.Thread(target=watch, daemon=True)
    th.start()
    return th


def test_counters_ramping_between_two_reads_are_rates_and_fail_above_the_threshold(sim):
    f, t = sim()
    sw, port, spine, spine_port = t.isl("leaf-r1-1", 1)
    f.console(f'PerformanceSet "{spine.node_id}"[{spine_port}] PortCounters.SymbolErrorCounter=100')
    watcher = _after_first_run_of(
        "ibqueryerrors",
        lambda: f.console(
            f'PerformanceSet "{spine.node_id}"[{spine_port}] PortCounters.SymbolErrorCounter=400'
        ),
    )
    code, doc, bad = fabric(f, "--interval", "2")
    watcher.join()
    assert code == 1 and doc["interval_s"] == pytest.approx(2, abs=1)
    assert [(x["check"], x["severity"], x["subject"]) for x in bad] == [
        ("fabric.errors", "fail", f"{spine.desc}:{spine_port}")
    ]
    assert (
        "+300" in bad[0]["message"]
        and "inter-switch link" in bad[0]["message"]
        and sw.desc in bad[0]["message"]
    )


def test_since_an_earlier_save_gives_the_deltas_of_a_job(sim, tmp_path):
    f, t = sim()
    sw, port = t.host_cable("gpu06", 3)
    f.console(f'PerformanceSet "{sw.node_id}"[{port}] PortCounters.PortRcvErrors=5')
    assert run_cli("fabric", "--save", str(tmp_path / "before.tar.gz"), env=f.env()).exit_code == 0
    f.console(f'PerformanceSet "{sw.node_id}"[{port}] PortCounters.PortRcvErrors=905')
    code, doc, bad = fabric(f, "--since", str(tmp_path / "before.tar.gz"))
    assert code == 1 and [(x["check"], x["subject"]) for x in bad] == [
        ("fabric.errors", f"{sw.desc}:{port}")
    ]
    assert "+900" in bad[0]["message"] and "gpu06 mlx5_3" in bad[0]["message"]


def test_xmit_wait_concentrated_on_one_spine_port_is_named(sim):
    f, t = sim()
    _, _, spine, spine_port = t.isl("leaf-r0-1", 0)
    f.console(f'PerformanceSet "{spine.node_id}"[{spine_port}] PortCounters.PortXmitWait=900000')
    code, doc, bad = fabric(f)
    assert [(x["check"], x["subject"]) for x in bad] == [
        ("fabric.xmit_wait", f"{spine.desc}:{spine_port}")
    ]
    assert (
        "100% of the fabric's wait" in bad[0]["message"]
        and "inter-switch link" in bad[0]["message"]
    )


def test_a_downtrained_isl_and_a_host_link_at_edr_name_both_ends(sim):
    t = rail_fat_tree()
    leaf, lport, spine, sport = t.isl("leaf-r3-1", 2)
    t.set_link(leaf.desc, lport, "1xHDR")
    hsw, hport = t.host_cable("gpu05", 0)
    t.set_link(hsw.desc, hport, "4xEDR")
    f, _ = sim(t)
    code, doc, bad = fabric(f)
    # The 1x uplink also lowers leaf-r3-1's uplink capacity: fabric.oversubscription names it.
    over = [x for x in bad if x["check"] == "fabric.oversubscription"]
    assert [x["subject"] for x in over] == [leaf.desc]
    assert (
        f"{leaf.desc} port {lport} at 1xHDR" in over[0]["message"] and over[0]["severity"] == "warn"
    )
    got = sorted((x["check"], x["message"]) for x in bad if x not in over)
    assert code == 1 and [c for c, _ in got] == ["fabric.link_rate", "fabric.link_rate"]
    isl = next(m for _, m in got if "inter-switch" in m)
    host = next(m for _, m in got if "host link" in m)
    assert (
        f"{leaf.desc} port {lport}" in isl
        and f"{spine.desc} port {sport}" in isl
        and "1x where both ends could do 4x (iblinkinfo)" in isl
    )
    assert (
        f"{hsw.desc} port {hport} (cable to gpu05 mlx5_0)" in host
        and "EDR where both ends could do HDR (iblinkinfo)" in host
    )


def test_no_subnet_manager_is_said_once_not_as_every_port(sim):
    f, t = sim(sm=False)
    code, doc, bad = fabric(f)
    assert code == 1 and [x["check"] for x in bad] == ["fabric.sm"]
    assert "Initialize" in bad[0]["message"]


def test_a_second_sm_stands_by_and_a_silent_one_fails(sim):
    f, t = sim()
    f.start_sm(t.ca("gpu08", 3).node_id, wait=False)
    f.settle(1.0)
    code, doc, bad = fabric(f)
    states = sorted(s["state"] for s in doc["subnet_managers"])
    masters = states.count("master")
    if masters > 1:
        assert [x["check"] for x in bad] == ["fabric.sm"] and "master subnet managers" in bad[0][
            "message"
        ]
    else:
        assert len(states) == 2 and bad == [], (states, bad)


def test_a_saved_dump_replayed_offline_gives_the_same_findings(sim, tmp_path):
    f, t = sim()
    sw, port = t.host_cable("gpu02", 1)
    f.console(f'PerformanceSet "{sw.node_id}"[{port}] PortCounters.LinkDownedCounter=3')
    live = run_cli("fabric", "-o", "json", "--save", str(tmp_path / "dump.tar.gz"), env=f.env())
    saved = run_cli("fabric", "-o", "json", "--from", str(tmp_path / "dump.tar.gz"))
    a, b = json.loads(live.stdout), json.loads(saved.stdout)
    assert live.exit_code == saved.exit_code
    assert a["findings"] == b["findings"] and a["links"] == b["links"]
    assert any(x["check"] == "fabric.errors" and x["severity"] != "ok" for x in b["findings"])


def test_a_host_cable_and_an_isl_unplugged_since_the_reference_name_both_ends(sim, tmp_path):
    f, t = sim()
    ref = tmp_path / "ref"
    assert run_cli("fabric", "--save", str(ref), env=f.env()).exit_code == 0
    sw, port = t.host_cable("gpu04", 1)
    leaf, lport, spine, sport = t.isl("leaf-r2-1", 3)
    f.console(f'Unlink "{sw.node_id}"[{port}]', f'Unlink "{leaf.node_id}"[{lport}]')
    f.settle()
    code, doc, bad = fabric(f, "--since", str(ref))
    lost = sorted(x["message"] for x in bad if x["check"] == "fabric.link_lost")
    # The lost ISL also leaves its leaf short of an uplink: fabric.oversubscription names the leaf.
    over = [x["subject"] for x in bad if x["check"] == "fabric.oversubscription"]
    assert over == [leaf.desc]
    assert code == 1 and {x["check"] for x in bad} == {
        "fabric.link_lost",
        "fabric.oversubscription",
    }
    assert len(lost) == 2
    assert any(f"{sw.desc} port {port} (cable to gpu04 mlx5_1)" in m for m in lost)
    assert any(f"{leaf.desc} port {lport}" in m and f"{spine.desc} port {sport}" in m for m in lost)


def test_mad_loss_at_one_port_is_partial_discovery_naming_where(sim):
    f, t = sim()
    leaf, lport, spine, sport = t.isl("leaf-r1-1", 0)
    f.console(f'Error "{spine.node_id}"[{sport}] 30')  # 30% of the MADs through that port are lost
    code, doc, bad = fabric(f)
    assert code == 1 and doc["partial"] is True and doc["status"] == "fail"
    (disc,) = [x for x in bad if x["check"] == "fabric.discovery"]
    assert disc["severity"] == "fail" and "not reached: behind " in disc["message"]
    # Every lost directed route leaves through the lossy port: it is named first.
    assert f"{spine.desc} port {sport}" in disc["message"] or f"{leaf.desc} port" in disc["message"]


def test_a_port_that_drops_every_mad_hides_what_lies_behind_it(sim):
    f, t = sim()
    leaf, lport, spine, sport = t.isl("leaf-r1-1", 0)
    f.console(f'Error "{spine.node_id}"[{sport}] 100', f'Error "{leaf.node_id}"[{lport}] 100')
    code, doc, bad = fabric(f)
    (disc,) = [x for x in bad if x["check"] == "fabric.discovery"]
    assert (
        code == 1
        and f"beyond {spine.desc} port {sport} (Active; far end not discovered)" in disc["message"]
    )


def test_counters_far_end_reads_the_switch_port_at_the_other_end_of_the_cable(sim, tmp_path):
    import shutil

    from tests.support.env import SYSFS_FIXTURES

    f, t = sim()
    ca = t.ca("gpu03", 2)
    sw, port = t.host_cable("gpu03", 2)
    f.console(f'PerformanceSet "{sw.node_id}"[{port}] PortCounters.SymbolErrorCounter=57')
    root = tmp_path / "root"
    shutil.copytree(SYSFS_FIXTURES / "dgx-h100", root, symlinks=True)
    g = f"{ca.guid:016x}"
    guid_file = root / "sys/class/infiniband/mlx5_0/node_guid"
    guid_file.resolve().write_text(":".join(g[i : i + 4] for i in range(0, 16, 4)) + "\n")
    r = run_cli(
        "counters",
        "--root",
        str(root),
        "-d",
        "mlx5_0",
        "--far-end",
        "-o",
        "json",
        env=f.env(ca.node_id),
    )
    assert r.exception is None, r.stderr
    doc = json.loads(r.stdout)
    (end,) = doc["far_end"]
    assert (end["desc"], end["far_port"], end["kind"], end["counters"]["symbol_error"]) == (
        sw.desc,
        port,
        "switch",
        57,
    )
    (finding,) = [x for x in doc["findings"] if x["check"] == "fabric.far_end"]
    assert finding["severity"] == "warn" and finding["subject"] == "mlx5_0:1"
    assert (
        f"far end of mlx5_0:1: {sw.desc} port {port}" in finding["message"]
        and "symbol_error 57" in finding["message"]
    )
    table = run_cli(
        "counters",
        "--root",
        str(root),
        "-d",
        "mlx5_0",
        "--far-end",
        env=f.env(ca.node_id),
        columns=200,
    )
    assert f"{sw.desc} port {port}" in table.stdout and "symbol_error 57" in table.stdout


def test_the_far_end_hook_adds_to_a_counters_run_without_the_cli(sim, tmp_path):
    import shutil

    from ibdiag.counters.command import CountersRequest, run
    from ibdiag.counters.views.outputs import table_items
    from ibdiag.fabric.attach import counters_far_end
    from ibdiag.output.outputs import TableLayout
    from tests.support.env import SYSFS_FIXTURES

    f, t = sim()
    ca = t.ca("gpu05", 1)
    sw, port = t.host_cable("gpu05", 1)
    f.console(f'PerformanceSet "{sw.node_id}"[{port}] PortCounters.LinkDownedCounter=3')
    root = tmp_path / "root"
    shutil.copytree(SYSFS_FIXTURES / "dgx-h100", root, symlinks=True)
    g = f"{ca.guid:016x}"
    guid_file = root / "sys/class/infiniband/mlx5_0/node_guid"
    guid_file.resolve().write_text(":".join(g[i : i + 4] for i in range(0, 16, 4)) + "\n")
    hook = counters_far_end(f.env(ca.node_id))
    result = run(CountersRequest(root=root, devices=("mlx5_0",), far_end=hook))
    (end,) = result.report.data["far_end"]
    assert (end["desc"], end["far_port"], end["counters"]["link_downed"]) == (sw.desc, port, 3)
    (finding,) = [x for x in result.report.findings if x.check == "fabric.far_end"]
    assert finding.subject == "mlx5_0:1" and "link_downed 3" in finding.message
    items = table_items(result, TableLayout(strict=False, width=200))
    assert "Far ends" in str(items[1].title)  # above the ports' table, as the CLI prints it
