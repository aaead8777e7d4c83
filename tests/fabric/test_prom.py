"""``ibdiag fabric -o prom``'s shape series (issue 25): per switch down/up capacity, uplinks,
oversubscription and tier; the fabric's tiers, host-link capacity, bisection and rail-optimised. Read
back by prometheus_client's parser (no duplicate sample) and linted by Debian's real ``promtool check
metrics``."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from ibdiag.counters.config import CountersConfig
from ibdiag.fabric.build import build_fabric
from ibdiag.fabric.config import FabricConfig
from ibdiag.fabric.dump import load
from ibdiag.fabric.judge import judge
from ibdiag.fabric.views.prom_metrics import prom_metrics
from tests.support.cli import run_cli
from tests.support.env import need_tool
from tests.support.fabric_topology import rail_fat_tree, three_tier

TWO_TO_ONE = Path(__file__).resolve().parents[2] / "fixtures/fabric/two-to-one.net"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in out, f"duplicate sample {key}"
            out[key] = s.value
    return out


def prom(path: Path) -> str:
    r = run_cli("fabric", "--from", str(path), "-o", "prom")
    assert r.exit_code in (0, 1), r.stderr
    res = subprocess.run(
        [need_tool("promtool"), "check", "metrics"],
        input=r.stdout,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    return r.stdout


def switch_series(parsed, name):
    return {
        dict(labels)["switch"]: (dict(labels)["tier"], v)
        for (n, labels), v in parsed.items()
        if n == f"ibdiag_fabric_switch_{name}"
    }


def test_a_2to1_fabric_exports_each_leafs_ratio_capacities_and_the_bisection():
    # fixtures/fabric/two-to-one.net: 16 hosts x 2 rails, 2 leaves per rail of 8 host links and 4
    # uplinks, all 4x HDR (200 Gb/s): 1600 down, 800 up, 2:1; 32 host links = 6400 Gb/s; the halves
    # (leaf-r0-1, leaf-r0-2 | leaf-r1-1, leaf-r1-2) meet through 8 uplinks each: 1600 Gb/s.
    parsed = samples(prom(TWO_TO_ONE))
    leaves = ("leaf-r0-1", "leaf-r0-2", "leaf-r1-1", "leaf-r1-2")
    assert switch_series(parsed, "down_bytes_per_second") == dict.fromkeys(leaves, ("leaf", 200e9))
    assert switch_series(parsed, "up_bytes_per_second") == dict.fromkeys(leaves, ("leaf", 100e9))
    assert switch_series(parsed, "uplinks") == dict.fromkeys(leaves, ("leaf", 4.0))
    assert switch_series(parsed, "oversubscription_ratio") == dict.fromkeys(leaves, ("leaf", 2.0))
    assert parsed[("ibdiag_fabric_bisection_bytes_per_second", ())] == 1600e9 / 8
    assert parsed[("ibdiag_fabric_host_links_bytes_per_second", ())] == 6400e9 / 8
    assert parsed[("ibdiag_fabric_tiers", ())] == 2.0
    assert parsed[("ibdiag_fabric_rail_optimised", ())] == 1.0
    # one owner per series: the oversubscription finding stays in ibdiag_check_severity only
    assert any(n == "ibdiag_check_severity" for n, _ in parsed)


def test_a_three_tier_tree_exports_its_spines_with_their_tier(tmp_path):
    # 2 pods x 2 leaves x 4 hosts, 2 spines per pod, 2 cores, all 200 Gb/s, 1:1: a leaf has 4 host
    # links and 2 uplinks to each spine (4); a spine 4 links down (2 leaves x 2) and 2 to each core.
    net = tmp_path / "three.net"
    net.write_text(three_tier().text())
    parsed = samples(prom(net))
    down = switch_series(parsed, "down_bytes_per_second")
    assert {s: t for s, (t, _) in down.items()} == {
        **dict.fromkeys(("leaf-p1-1", "leaf-p1-2", "leaf-p2-1", "leaf-p2-2"), "leaf"),
        **dict.fromkeys(("spine-p1-1", "spine-p1-2", "spine-p2-1", "spine-p2-2"), "spine"),
    }  # the cores are the top tier: no uplinks, no series
    assert {v for _, v in down.values()} == {800e9 / 8}
    assert {v for _, v in switch_series(parsed, "uplinks").values()} == {4.0}
    assert {v for _, v in switch_series(parsed, "oversubscription_ratio").values()} == {1.0}
    assert parsed[("ibdiag_fabric_tiers", ())] == 3.0
    assert ("ibdiag_fabric_rail_optimised", ()) not in parsed  # one adapter per host: not judged


def test_a_mesh_exports_no_switch_series_and_no_tiers(tmp_path):
    topo = rail_fat_tree(switch_ports=20)
    a, b = topo.switch("leaf-r0-1"), topo.switch("leaf-r1-1")
    a.peers[20] = (b.node_id, 20, "4xHDR")
    b.peers[20] = (a.node_id, 20, "4xHDR")
    net = tmp_path / "mesh.net"
    net.write_text(topo.text())
    parsed = samples(prom(net))
    shape = [n for n, _ in parsed if n.startswith("ibdiag_fabric_switch_")]
    assert shape and all(n.startswith("ibdiag_fabric_switch_port_") for n in shape)  # ports only
    assert ("ibdiag_fabric_tiers", ()) not in parsed
    assert ("ibdiag_fabric_bisection_bytes_per_second", ()) not in parsed


FAULTY = Path(__file__).resolve().parents[2] / "fixtures/fabric/rail-fat-tree-faulty"
# treydock/infiniband_exporter collectors/switch.go: infiniband_switch_<these>; issue 38 found seven of
# ibdiag's thirteen names stuttering (ibdiag_fabric_port_port_errors_received_total)
TREYDOCK_ERRORS = {
    "port_symbol_error_total",
    "port_link_error_recovery_total",
    "port_link_downed_total",
    "port_receive_errors_total",
    "port_receive_remote_physical_errors_total",
    "port_receive_switch_relay_errors_total",
    "port_transmit_discards_total",
    "port_transmit_constraint_errors_total",
    "port_receive_constraint_errors_total",
    "port_local_link_integrity_errors_total",
    "port_excessive_buffer_overrun_errors_total",
    "port_vl15_dropped_total",
    "port_transmit_wait_total",
}


def test_switch_port_counters_are_named_as_infiniband_exporter_names_them_in_base_units():
    parsed = samples(prom(FAULTY))
    names = {n for n, _ in parsed if n.startswith("ibdiag_fabric_")}
    counters = {n.removeprefix("ibdiag_fabric_switch_") for n in names if n.endswith("_total")}
    assert counters == TREYDOCK_ERRORS
    assert not [n for n in names if "port_port" in n or n.endswith("_gbps")]
    labels = {
        "switch": "leaf-r2-1",
        "guid": "0xb8cef60300000003",
        "port": "3",
        "remote_node": "gpu03 mlx5_2",
        "remote_port": "1",
    }
    key = tuple(sorted(labels.items()))
    assert parsed[("ibdiag_fabric_switch_port_symbol_error_total", key)] == 57
    assert parsed[("ibdiag_fabric_switch_port_rate_bytes_per_second", key)] == 200e9 / 8
    info = {
        k: v
        for (n, k), v in parsed.items()
        if n == "ibdiag_fabric_switch_port_info"
        and dict(k)["port"] == "3"
        and dict(k)["switch"] == "leaf-r2-1"
    }
    ((info_labels, one),) = info.items()
    assert (
        one == 1
        and dict(info_labels)["remote_type"] == "CA"
        and dict(info_labels)["remote_guid"].startswith("0x")
    )


def test_data_and_packet_counters_are_exported_in_bytes_and_packets():
    """What the model holds of PortXmitData/PortRcvData (4-octet words) is exported x 4, the packets
    as they are. (The model from ibqueryerrors --data carries them when the fabric's reader keeps them:
    here they are put in the sample the view reads.)"""
    fab = build_fabric(load(FAULTY))
    assert fab.counters is not None
    words = {
        "port_xmit_data": 1000,
        "port_rcv_data": 2000,
        "port_xmit_packets": 30,
        "port_rcv_packets": 40,
    }
    ports = tuple(
        replace(pc, counters={**(pc.counters or {}), **words})
        if pc.key == ("0xb8cef60300000003", 3)
        else pc
        for pc in fab.counters.ports
    )
    fab = replace(fab, counters=replace(fab.counters, ports=ports))
    judged = judge(fab, hosts={}, cfg=CountersConfig(), fcfg=FabricConfig())
    values = {
        m.name: s.value
        for m in prom_metrics(judged)
        for s in m.samples
        if s.labels.get("guid") == "0xb8cef60300000003" and s.labels.get("port") == "3"
    }
    assert values["ibdiag_fabric_switch_port_transmit_data_bytes_total"] == 4000
    assert values["ibdiag_fabric_switch_port_receive_data_bytes_total"] == 8000
    assert values["ibdiag_fabric_switch_port_transmit_packets_total"] == 30
    assert values["ibdiag_fabric_switch_port_receive_packets_total"] == 40
