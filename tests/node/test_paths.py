"""Path classes from the PCI tree (nvidia-smi topo -m semantics), on literal device chains."""

import pytest

from ibdiag.node.model import PathClass, PciDevice, PcieLink
from ibdiag.node.paths import classify, parse_gdr_level


def dev(path: str, numa: int | None = 0) -> PciDevice:
    """``"pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0"`` -> PciDevice."""
    parts = path.split("/")
    return PciDevice(
        parts[-1],
        "devices/" + path,
        parts[0],
        tuple(parts[1:-1]),
        0x10DE,
        0,
        0x030200,
        numa,
        (),
        PcieLink(),
    )


SWITCH = "pci0000:15/0000:15:01.0/0000:16:00.0"


def test_same_switch_is_pix():
    assert (
        classify(
            dev(f"{SWITCH}/0000:17:00.0/0000:18:00.0"), dev(f"{SWITCH}/0000:17:01.0/0000:19:00.0")
        )
        is PathClass.PIX
    )


def test_two_switch_levels_is_pxb():
    gpu = dev(
        "pci0000:40/0000:40:01.1/0000:41:00.0/0000:42:00.0/0000:43:00.0/0000:44:00.0/0000:45:00.0"
    )
    nic = dev("pci0000:40/0000:40:01.1/0000:41:00.0/0000:42:01.0/0000:47:00.0")
    assert classify(gpu, nic) is PathClass.PXB
    assert classify(nic, gpu) is PathClass.PXB


def test_different_root_ports_of_one_host_bridge_is_phb():
    assert (
        classify(
            dev("pci0000:c0/0000:c0:01.1/0000:c1:00.0"), dev("pci0000:c0/0000:c0:05.1/0000:c3:00.0")
        )
        is PathClass.PHB
    )


def test_functions_of_one_device_are_pix():
    assert (
        classify(
            dev("pci0000:c0/0000:c0:05.1/0000:c3:00.0"), dev("pci0000:c0/0000:c0:05.1/0000:c3:00.1")
        )
        is PathClass.PIX
    )


def test_host_bridges_in_one_numa_node_is_node_else_sys():
    a = dev("pci0000:15/0000:15:01.0/0000:18:00.0", numa=0)
    assert classify(a, dev("pci0000:26/0000:26:01.0/0000:29:00.0", numa=0)) is PathClass.NODE
    assert classify(a, dev("pci0000:95/0000:95:01.0/0000:98:00.0", numa=1)) is PathClass.SYS


def test_unknown_numa_is_sys_unless_the_tree_proves_otherwise():
    a = dev("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0", numa=None)
    b = dev("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0", numa=None)
    c = dev("pci0000:80/0000:80:01.0/0000:81:00.0", numa=None)
    assert classify(a, b) is PathClass.PIX  # same switch: proven close without NUMA info
    assert classify(a, c) is PathClass.SYS  # different host bridges, nothing proves one socket


def test_order_and_gdr_level():
    assert [p.rank for p in PathClass] == [0, 1, 2, 3, 4]
    assert parse_gdr_level("pxb") is PathClass.PXB
    with pytest.raises(ValueError):
        parse_gdr_level("LOC")
