"""fixtures/sysfs/rxe-guest: the first fixture captured from a real kernel (Soft-RoCE in the RDMA
test bed's guest, after traffic), read back through the same code as /sys.

What it must show is what the real kernel wrote, not what the project's generator would: rxe0 has
no ``counters/`` directory and no readable ``fw_ver``, its rate is rxe's fixed ``10 Gb/sec (1X
FDR10)``, and the hw_counters carry the retries and duplicate requests a clean emulated run had.
"""

from __future__ import annotations

import json

from ibdiag.bench.p2p.rdma.device import choose_device, choose_gid
from ibdiag.counters.read import discover_layout, read_port_counters
from ibdiag.node.discover import discover, read_port
from ibdiag.node.sysfs import SysfsRoot
from tests.support.env import SYSFS_FIXTURES

ROOT = SYSFS_FIXTURES / "rxe-guest"


def test_snapshot_manifest_names_the_real_kernel():
    manifest = json.loads((ROOT / "ibdiag-snapshot.json").read_text())
    assert manifest["schema"] == "ibdiag.snapshot/1"
    assert manifest["kernel"] == "6.1.0-57-amd64"
    assert "devices/virtual/infiniband/rxe0/fw_ver" in manifest["unreadable"]
    assert "kernel 6.1.0-57-amd64" in (ROOT / "README.md").read_text()


def test_topo_sees_one_software_roce_adapter_on_veth0():
    topo = discover(SysfsRoot(ROOT).check())
    assert [a.name for a in topo.adapters] == ["rxe0"] and topo.gpus == ()
    (adapter,) = topo.adapters
    (port,) = adapter.ports
    assert (port.state, port.phys_state, port.link_layer, port.netdev) == (
        "ACTIVE",
        "LinkUp",
        "Ethernet",
        "veth0",
    )
    # rxe's rate file always says "10 Gb/sec (1X FDR10)"; a software device's rate is its netdev's speed
    assert port.software and port.rate_gbps == 10.0 and port.lanes is None
    assert port.rate_source == "netdev veth0 speed 10000 Mb/s (software device rxe0)"
    assert (
        adapter.pci is None and adapter.fw_ver is None
    )  # a virtual device: no PCI function, no firmware
    assert adapter.node_guid == "d43f:44ff:fe19:4bef"  # rxe derives it from veth0's MAC


def test_gid_choice_matches_what_the_guest_run_logged():
    """The server in the guest logged "GID index 1 (auto: RoCE v2 IPv4-mapped)" on this tree."""
    port = read_port(SysfsRoot(ROOT), "rxe0", 1)
    assert choose_device([port], None).adapter == "rxe0"
    gid = choose_gid(port)
    assert (gid.index, gid.gid, gid.type) == (
        1,
        "0000:0000:0000:0000:0000:ffff:0a4d:0001",
        "RoCE v2",
    )  # 10.77.0.1
    assert gid.reason == "auto: RoCE v2 IPv4-mapped"


def test_counters_read_rxe_hw_counters_and_no_pma_counters():
    sysfs = SysfsRoot(ROOT)
    (layout,) = [lay for lay in discover_layout(sysfs) if lay.port == 1]
    pc = read_port_counters(sysfs, layout)
    assert pc.counters is None  # rxe has no counters/ (no PMA)
    hw = pc.hw_counters
    assert hw is not None
    assert hw["sent_pkts"] == hw["rcvd_pkts"] == 387721  # loopback: every packet sent is received
    assert (hw["duplicate_request"], hw["completer_retry_err"], hw["retry_exceeded_err"]) == (
        6183,
        181,
        0,
    )
    assert pc.hw_lifespan_ms == 12


def test_cli_findings_on_the_real_tree(cli):
    topo = json.loads(cli("topo", "--root", ROOT, "-o", "json").stdout)
    assert topo["status"] == "ok"
    assert {(f["check"], f["subject"], f["severity"]) for f in topo["findings"]} >= {
        ("port.state", "rxe0:1", "ok"),
        ("port.rate", "rxe0:1", "ok"),
    }
    r = cli("counters", "--root", ROOT, "-o", "json")
    assert r.exit_code in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    by_id = {f["check"]: f for f in doc["findings"]}
    assert by_id["port.state"]["severity"] == "ok"
    # no counters/ directory is normal for a software device: said, and its hw_counters judged by meaning
    assert (
        by_id["counters.unavailable"]["subject"] == "rxe0:1"
        and by_id["counters.unavailable"]["severity"] == "ok"
    )
    roce = by_id["counters.roce_errors"]
    assert (
        roce["subject"] == "rxe0:1"
        and roce["severity"] == "warn"
        and "duplicate_request 6183" in roce["message"]
    )
    assert doc["status"] != "ok"
