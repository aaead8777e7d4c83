"""Counters judged by meaning for every driver (mlx5, rxe, bnxt_re, irdma, efa), and software devices
(rxe, siw): their rate from the netdev, an empty fw_ver, no counters/ — on fixture trees read from disk."""

from __future__ import annotations

import shutil

import pytest

from ibdiag.bench.p2p.linerate import judged_line_rate, rdma_line_rate
from ibdiag.counters.config import CountersConfig
from ibdiag.counters.hw_spec import HW_COUNTERS, HW_JUDGED, MEANINGS, HwGroup, Meaning
from ibdiag.counters.reading import reading_findings
from ibdiag.errors import InputError
from ibdiag.findings.model import Severity
from ibdiag.node.discover import discover
from ibdiag.node.driver import rdma_driver
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.ports.config import PortsConfig
from ibdiag.ports.rates import ExpectedRates
from ibdiag.topo.checks import check_topology
from tests.counters.test_checks import one, problems, span_after
from tests.support.env import SYSFS_FIXTURES
from tests.sysfsgen.builder import Tree

RXE = SYSFS_FIXTURES / "rxe-node"


def _profile(name):
    """A fixture profile module of tests/sysfsgen/profiles, by name."""
    import importlib

    return importlib.import_module(f"tests.sysfsgen.profiles.{name}")


BNXT = SYSFS_FIXTURES / "bnxt-roce"


# --- the meaning table ---------------------------------------------------------------------------------


def test_every_meaning_has_a_group_and_every_counter_a_known_driver():
    assert set(MEANINGS) == set(Meaning)
    for name, spec in HW_COUNTERS.items():
        assert (
            spec.name == name
            and spec.drivers
            and set(spec.drivers) <= {"mlx5", "rxe", "bnxt_re", "irdma", "efa"}
        )
        assert spec.desc and spec.label
    # Packet counts are the denominators, never judged; every other meaning is.
    assert {h.meaning for h in HW_JUDGED.values()} == set(Meaning) - {
        Meaning.TX_PACKETS,
        Meaning.RX_PACKETS,
    }


@pytest.mark.parametrize(
    ("name", "meaning"),
    [
        ("local_ack_timeout_err", Meaning.RETRANSMIT),  # mlx5
        ("completer_retry_err", Meaning.RETRANSMIT),  # rxe
        ("to_retransmits", Meaning.RETRANSMIT),  # bnxt_re
        ("tcpRetransSegs", Meaning.RETRANSMIT),  # irdma
        ("retrans_timeout_events", Meaning.RETRANSMIT),  # efa
        ("packet_seq_err", Meaning.SEQUENCE),
        ("rcvd_seq_err", Meaning.SEQUENCE),
        ("seq_err_naks_rcvd", Meaning.SEQUENCE),
        ("rcvd_rnr_err", Meaning.RNR),
        ("rnr_naks_rcvd", Meaning.RNR),
        ("out_of_buffer", Meaning.OUT_OF_BUFFER),
        ("rx_out_of_buffer", Meaning.OUT_OF_BUFFER),
        ("np_ecn_marked_roce_packets", Meaning.ECN),
        ("rx_ecn_marked_pkts", Meaning.ECN),
        ("RxECNMrkd", Meaning.ECN),
        ("cnpSent", Meaning.CNP),
        ("sent_pkts", Meaning.TX_PACKETS),
        ("duplicate_request", Meaning.DUPLICATE),
    ],
)
def test_each_driver_name_maps_to_its_meaning(name, meaning):
    assert HW_COUNTERS[name].meaning is meaning


def test_the_rxe_error_and_packet_counters_of_the_kernel_list_all_have_a_meaning():
    # rxe_hw_counters.c: every counter but the informational ones (ack_deferred, send_err, rdma_*) is known.
    RXE_HW_COUNTERS = _profile("rxe_node").RXE_HW_COUNTERS
    BNXT_HW_COUNTERS = _profile("bnxt_roce").BNXT_HW_COUNTERS
    informational = {"ack_deferred", "send_err", "rdma_sends", "rdma_recvs"}
    assert set(RXE_HW_COUNTERS) - informational <= set(HW_COUNTERS)
    assert all("rxe" in HW_COUNTERS[n].drivers for n in set(RXE_HW_COUNTERS) - informational)
    assert {
        "to_retransmits",
        "seq_err_naks_rcvd",
        "rx_out_of_buffer",
        "rx_ecn_marked_pkts",
        "tx_pkts",
    } <= set(BNXT_HW_COUNTERS) & set(HW_COUNTERS)


# --- drivers -------------------------------------------------------------------------------------------


def test_driver_detection_on_fixture_trees(tmp_path):
    assert rdma_driver(SysfsRoot(RXE), "rxe0") == "rxe"
    assert rdma_driver(SysfsRoot(BNXT), "bnxt_re1") == "bnxt_re"
    assert rdma_driver(SysfsRoot(SYSFS_FIXTURES / "dgx-h100"), "mlx5_0") == "mlx5"
    # siw: node description (drivers/infiniband/sw/siw/siw.h), whatever the device is called.
    t = Tree(tmp_path)
    t.file("devices/virtual/infiniband/soft0/node_desc", "Software iWARP stack")
    t.link("class/infiniband/soft0", "devices/virtual/infiniband/soft0")
    assert rdma_driver(SysfsRoot(tmp_path), "soft0") == "siw"
    # A renamed rxe device is still rxe (its parent attribute).
    t.file("devices/virtual/infiniband/roce9/parent", "eth0")
    t.link("class/infiniband/roce9", "devices/virtual/infiniband/roce9")
    assert rdma_driver(SysfsRoot(tmp_path), "roce9") == "rxe"


# --- software devices: topo, ports, bench line rate ----------------------------------------------------


def test_rxe_topology_empty_fw_ver_is_normal_and_rate_is_the_netdevs():
    topo = discover(SysfsRoot(RXE))
    a0, a1 = topo.adapters
    assert (a0.driver, a0.software, a0.fw_ver, a0.pci) == ("rxe", True, None, None)
    p0, p1 = a0.ports[0], a1.ports[0]
    # rxe0's port file says 10 Gb/sec (1X FDR10); its netdev ens1f0 runs at 25000 Mb/s.
    assert (
        p0.software
        and p0.rate_gbps == 25.0
        and p0.lanes is None
        and "ens1f0 speed 25000 Mb/s" in p0.rate_source
    )
    # rxe1 runs over virtio (speed -1): the rate is unknown, not 10 Gb/s.
    assert p1.rate_gbps is None and "reports no speed" in p1.rate_source
    doc = a0.to_json()
    assert (
        doc["driver"] == "rxe"
        and doc["ports"][0]["software_device"] is True
        and doc["ports"][0]["rate_gbps"] == 25.0
    )
    out = check_topology(topo)
    assert problems(out) == []  # no topo.sysfs_value for the empty fw_ver, no port.rate warning
    assert not [f for f in out if f.check == "topo.sysfs_value"]
    r0, r1 = one(out, "port.rate", "rxe0:1"), one(out, "port.rate", "rxe1:1")
    assert r0.value == 25.0 and r0.limit is None and "netdev ens1f0" in r0.message
    assert r1.severity is Severity.OK and r1.value is None and "rate unknown" in r1.message


def test_a_software_port_is_not_judged_against_the_nodes_hardware_ports(tmp_path):
    root = tmp_path / "node"
    shutil.copytree(SYSFS_FIXTURES / "dgx-h100", root, symlinks=True)
    t = Tree(root)
    t.file("devices/virtual/net/veth0/speed", 10000)
    t.link("class/net/veth0", "devices/virtual/net/veth0")
    rxe = _profile("rxe_node")
    rxe.rxe_device(t, "rxe0", "veth0", (2, 0, 0, 0, 0, 1), "10.9.0.1", rxe.rxe_counters())
    topo = discover(SysfsRoot(root))
    out = check_topology(topo)
    rate = one(out, "port.rate", "rxe0:1")
    assert rate.severity is Severity.OK and rate.value == 10.0 and rate.limit is None
    assert (
        one(out, "port.rate", "mlx5_0:1").limit == 400.0
    )  # the hardware ports still compare with each other
    # A node-wide expected rate is about the cabled ports, not the software device.
    cfg = PortsConfig(expected_rate_gbps=400.0)
    (rxe_port,) = [p for a in topo.adapters if a.name == "rxe0" for p in a.ports]
    exp = ExpectedRates.of([p for a in topo.adapters for p in a.ports], cfg).for_port(rxe_port)
    assert exp.rate_gbps is None and "software device" in exp.source
    assert one(check_topology(topo, ports=cfg), "port.rate", "rxe0:1").severity is Severity.OK


def test_bench_line_rate_of_an_rxe_port_is_its_netdevs_speed_or_unknown():
    sysfs = SysfsRoot(RXE)
    local = rdma_line_rate(sysfs, "rxe0", 1)
    assert local.gbps == 25.0 and "ens1f0" in local.source
    unknown = rdma_line_rate(sysfs, "rxe1", 1)
    assert unknown.gbps is None and "no speed" in unknown.source
    # Against an unknown rate nothing is judged (never the port file's 10 Gb/s).
    assert judged_line_rate(unknown, None).gbps is None
    assert judged_line_rate(local, unknown).gbps == 25.0


# --- counters on the rxe and bnxt_re fixtures ------------------------------------------------------------


def test_rxe_fixture_reading_findings():
    out = reading_findings(SysfsRoot(RXE))
    assert problems(out) == [
        ("warn", "counters.roce_errors", "rxe0:1"),
        ("warn", "counters.roce_errors", "rxe1:1"),
    ]
    f0 = one(out, "counters.roce_errors", "rxe0:1")
    assert (
        "duplicate_request 864 (0.69% of 124904 packets)" in f0.message
        and "completer_retry_err 28" in f0.message
    )
    assert "retry_exceeded_err 3" in one(out, "counters.roce_errors", "rxe1:1").message
    # No counters/ is normal for a software device (no PMA): OK, not a warning.
    assert one(out, "counters.unavailable", "rxe0:1").severity is Severity.OK


def test_bnxt_fixture_reading_findings():
    out = reading_findings(SysfsRoot(BNXT))
    assert problems(out) == [("warn", "counters.roce_errors", "bnxt_re1:1")]
    f = one(out, "counters.roce_errors", "bnxt_re1:1")
    for text in (
        "to_retransmits 4211",
        "seq_err_naks_rcvd 380",
        "oos_drop_count 5120",
        "rx_out_of_buffer 1500",
    ):
        assert text in f.message
    assert one(out, "counters.roce_errors", "bnxt_re0:1").severity is Severity.OK
    assert "rx_ecn_marked_pkts = 120" in one(out, "counters.roce_congestion", "bnxt_re0:1").message


def _bump(root, dev, **deltas):
    def change():
        for name, d in deltas.items():
            p = root / "sys" / "class" / "infiniband" / dev / "ports" / "1" / "hw_counters" / name
            p.write_text(f"{int(p.read_text()) + d}\n")

    return change


def test_rxe_span_retries_of_a_clean_run_warn_by_share_not_fail_by_rate(tmp_path):
    root = tmp_path / "rxe"
    shutil.copytree(RXE, root, symlinks=True)
    # What a clean 2 s ib_write_bw counted in the guest, over 10 s: 86 duplicates/s, far above 10/s.
    span, out = span_after(
        root,
        _bump(
            root,
            "rxe0",
            sent_pkts=62452,
            rcvd_pkts=62452,
            duplicate_request=864,
            completer_retry_err=28,
        ),
    )
    f = one(out, "counters.roce_errors", "rxe0:1")
    assert f.severity is Severity.WARN and "0.69% of 124904 packets" in f.message
    assert one(out, "counters.roce_errors", "rxe1:1").severity is Severity.OK


def test_rxe_span_loss_above_the_share_limit_fails(tmp_path):
    root = tmp_path / "rxe"
    shutil.copytree(RXE, root, symlinks=True)
    span, out = span_after(
        root,
        _bump(
            root,
            "rxe1",
            sent_pkts=1000,
            rcvd_pkts=1000,
            completer_retry_err=150,
            retry_exceeded_err=1,
        ),
    )
    f = one(out, "counters.roce_errors", "rxe1:1")
    assert f.severity is Severity.FAIL and f.unit == "%" and f.value == 7.5 and f.limit == 5.0
    # The limit is a setting.
    _, out = span_after(
        root,
        _bump(root, "rxe1", sent_pkts=1000, rcvd_pkts=1000, completer_retry_err=150),
        cfg=CountersConfig(software_loss_pct=10),
    )
    assert one(out, "counters.roce_errors", "rxe1:1").severity is Severity.WARN


def test_bnxt_span_is_judged_like_mlx5_by_rate(tmp_path):
    root = tmp_path / "bnxt"
    shutil.copytree(BNXT, root, symlinks=True)
    _, out = span_after(
        root, _bump(root, "bnxt_re0", to_retransmits=500, tx_pkts=10**6, rx_pkts=10**6)
    )
    f = one(out, "counters.roce_errors", "bnxt_re0:1")
    assert f.severity is Severity.FAIL and f.unit == "/s" and f.value == 50.0
    _, out = span_after(root, _bump(root, "bnxt_re0", rx_ecn_marked_pkts=5000, tx_cnp_pkts=4000))
    assert one(out, "counters.roce_congestion", "bnxt_re0:1").severity is Severity.WARN


def test_software_loss_pct_is_checked():
    with pytest.raises(InputError):
        CountersConfig(software_loss_pct=0)
    assert HW_JUDGED["retry_exceeded_err"].group is HwGroup.LOSS
