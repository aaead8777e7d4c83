"""Edge cases built in tmp_path with the fixture builder and read through the real code path."""

import os

import pytest

from ibdiag.findings.model import Severity
from ibdiag.node.discover import discover
from ibdiag.node.model import PathClass
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.topo.checks import check_topology
from tests.sysfsgen.builder import Link, Tree, zero_counters

NVIDIA, MELLANOX = 0x10DE, 0x15B3


def node(
    tmp_path,
    *,
    gpu_numa=0,
    nic_numa=0,
    same_switch=True,
    nic_state="4: ACTIVE",
    gpu_link=Link(),
    rate="400 Gb/sec (4X NDR)",
    peermem=True,
):
    t = Tree(tmp_path)
    t.numa(0, "0-3")
    t.numa(1, "4-7")
    t.module("nvidia", "550.1")
    if peermem:
        t.module("nvidia_peermem")
    hb = t.host_bridge("0000:10")
    hb.numa, hb.cpulist = gpu_numa, "0-7"
    usp = hb.bridge("0000:10:01.0").bridge("0000:11:00.0")
    usp.bridge("0000:12:00.0").add(
        "0000:13:00.0", vendor=NVIDIA, device=0x2330, cls=0x030200, link=gpu_link
    )
    if same_switch:
        parent = usp.bridge("0000:12:01.0")
        addr = "0000:14:00.0"
    else:
        hb2 = t.host_bridge("0000:80")
        hb2.numa, hb2.cpulist = nic_numa, "0-7"
        parent = hb2.bridge("0000:80:01.0")
        addr = "0000:81:00.0"
    dev = parent.add(addr, vendor=MELLANOX, device=0x1021, cls=0x020700)
    ib = dev.rdma(
        "mlx5_0", fw_ver="1", board_id="b", hca_type="MT4129", node_guid="0000:0000:0000:0001"
    )
    dev.netdev("ib0")
    ib.port(
        1,
        state=nic_state,
        phys_state="5: LinkUp" if nic_state.startswith("4") else "2: Polling",
        rate=rate,
        counters=zero_counters(),
    )
    return t


def run(tmp_path):
    topo = discover(SysfsRoot(tmp_path))
    return topo, check_topology(topo)


def problems(findings):
    return sorted(
        (f.severity.value, f.check, f.subject) for f in findings if f.severity is not Severity.OK
    )


def test_nearest_adapter_across_sockets_fails(tmp_path):
    node(tmp_path, same_switch=False, nic_numa=1)
    topo, out = run(tmp_path)
    assert topo.pairings[0].path is PathClass.SYS
    assert problems(out) == [("fail", "topo.gpu_nic_path", "GPU0/mlx5_0")]


def test_same_numa_other_host_bridge_warns(tmp_path):
    node(tmp_path, same_switch=False, nic_numa=0)
    topo, out = run(tmp_path)
    assert topo.pairings[0].path is PathClass.NODE and not topo.pairings[0].gdr
    assert problems(out) == [("warn", "topo.gpu_nic_path", "GPU0/mlx5_0")]


def test_unknown_numa_across_host_bridges_is_sys(tmp_path):
    node(tmp_path, same_switch=False, gpu_numa=-1, nic_numa=-1)
    topo, out = run(tmp_path)
    assert topo.gpus[0].pci.numa_node is None and topo.pairings[0].path is PathClass.SYS


def test_no_active_adapter(tmp_path):
    node(tmp_path, nic_state="1: DOWN")
    topo, out = run(tmp_path)
    assert topo.pairings[0].nearest == () and topo.nccl_ib_hca is None
    assert problems(out) == [
        ("fail", "port.state", "mlx5_0:1"),
        ("warn", "topo.gpu_nic_path", "GPU0"),
    ]


def test_gpu_link_width_fails_speed_warns_with_idle_hint(tmp_path):
    node(tmp_path, gpu_link=Link("2.5 GT/s PCIe", 8, "32.0 GT/s PCIe", 16))
    _, out = run(tmp_path)
    assert problems(out) == [
        ("fail", "topo.pcie_width", "GPU0"),
        ("warn", "topo.pcie_speed", "GPU0"),
    ]
    speed = next(f for f in out if f.check == "topo.pcie_speed")
    assert "idle" in speed.hint and speed.value == 2.5 and speed.limit == 32.0


def test_upstream_port_limits_what_is_expected(tmp_path):
    # The switch's downstream port only does x8: a device at x8 is not narrow.
    t = node(tmp_path, gpu_link=Link("32.0 GT/s PCIe", 8, "32.0 GT/s PCIe", 16))
    t.file("devices/pci0000:10/0000:10:01.0/0000:11:00.0/0000:12:00.0/max_link_width", 8)
    _, out = run(tmp_path)
    assert problems(out) == []


def test_malformed_and_unreadable_values(tmp_path):
    t = node(tmp_path)
    port = "devices/pci0000:10/0000:10:01.0/0000:11:00.0/0000:12:01.0/0000:14:00.0/infiniband/mlx5_0/ports/1"
    t.file(f"{port}/rate", "fast")
    t.file(
        "devices/pci0000:10/0000:10:01.0/0000:11:00.0/0000:12:00.0/0000:13:00.0/numa_node", "zero"
    )
    state = t.p(f"{port}/phys_state")
    state.unlink()
    state.mkdir()  # a read that fails (like EINVAL on a live node)
    (state / "x").write_text("")
    topo, out = run(tmp_path)
    port_obj = topo.adapters[0].ports[0]
    assert port_obj.rate_gbps is None and port_obj.phys_state is None
    assert topo.gpus[0].pci.numa_node is None
    assert problems(out) == [
        ("warn", "port.state", "mlx5_0:1"),
        (
            "warn",
            "topo.sysfs_value",
            "/sys/devices/pci0000:10/0000:10:01.0/0000:11:00.0/0000:12:00.0/0000:13:00.0/numa_node",
        ),
    ]


def test_software_rdma_device_without_pci(tmp_path):
    t = node(tmp_path)
    t.file("devices/virtual/infiniband/rxe0/fw_ver", "0.0.0")
    t.file("devices/virtual/infiniband/rxe0/ports/1/state", "4: ACTIVE")
    t.file("devices/virtual/infiniband/rxe0/ports/1/phys_state", "5: LinkUp")
    t.file("devices/virtual/infiniband/rxe0/ports/1/rate", "100 Gb/sec (4X EDR)")
    t.file("devices/virtual/infiniband/rxe0/ports/1/link_layer", "Ethernet")
    t.link("class/infiniband/rxe0", "devices/virtual/infiniband/rxe0")
    topo, out = run(tmp_path)
    rxe = topo.adapter("rxe0")
    assert rxe.pci is None and topo.path(0, "rxe0") is PathClass.SYS
    assert [a.name for a in topo.adapters] == [
        "mlx5_0",
        "rxe0",
    ]  # NIC order: the names' natural order
    assert problems(out) == []


def test_peermem_missing_and_unknown(tmp_path):
    node(tmp_path / "a", peermem=False)
    _, out = run(tmp_path / "a")
    assert problems(out) == [("warn", "topo.gdr_module", "node")]
    node(tmp_path / "b")
    os.system(f"rm -rf {tmp_path / 'b' / 'sys' / 'module'}")
    topo, out = run(tmp_path / "b")
    assert topo.gdr.state == "unknown"
    (f,) = [f for f in out if f.check == "topo.gdr_module"]
    assert f.severity is Severity.WARN and "could not tell" in f.message


@pytest.mark.parametrize("rate, expected", [("2.5 Gb/sec (1X SDR)", 2.5), ("10 Gb/sec (4X)", 10.0)])
def test_old_and_fractional_rates(tmp_path, rate, expected):
    node(tmp_path, rate=rate)
    topo, _ = run(tmp_path)
    assert topo.adapters[0].ports[0].rate_gbps == expected
