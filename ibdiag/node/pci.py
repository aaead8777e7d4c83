"""PCI functions as sysfs shows them: vendor and class codes, the bridge chain to the host bridge, the
link (and its upstream port's caps), the NUMA node; what makes a function a GPU or an NVSwitch."""

from __future__ import annotations

import re

from ibdiag.node.model import PciDevice, PcieLink
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.parse import (
    CpuList,
    is_pci_address,
    parse_cpulist,
    parse_numa_node,
    parse_pci_class,
    parse_pci_id,
    parse_pci_speed,
    parse_pci_width,
    pci_sort_key,
)

VENDOR_NVIDIA = 0x10DE
VENDOR_MELLANOX = 0x15B3
CLASS_DISPLAY = 0x03  # base class: 0x0300xx VGA, 0x0302xx 3D controller (data-centre GPUs)
CLASS_ETHERNET, CLASS_INFINIBAND = (
    0x0200,
    0x0207,
)  # class >> 8 of a ConnectX function in Ethernet / IB mode
CLASS_NVSWITCH = 0x0680  # "other bridge" subclass that NVSwitch reports (0x068000)

_HOST_BRIDGE_RE = re.compile(r"^pci[0-9a-f]{4,8}:[0-9a-f]{2}$")


def _split_pci_path(real: str) -> tuple[str | None, tuple[str, ...], str | None]:
    """``devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:1a:00.0`` -> (host bridge, bridges, address)."""
    parts = real.split("/")
    host = None
    chain: list[str] = []
    for part in parts:
        if _HOST_BRIDGE_RE.match(part):
            # A nested host bridge (Intel VMD exposes one below a root-complex device) restarts the chain.
            host = part
            chain = []
        elif is_pci_address(part):
            chain.append(part)
    if not chain:
        return host, (), None
    return host, tuple(chain[:-1]), chain[-1]


def _numa_node(sysfs: SysfsRoot, real: str, nodes: frozenset[int] | None) -> int | None:
    """``numa_node``, checked against the node's NUMA nodes when they are known: a device cannot sit
    on node 99 of a 2-node machine."""
    rel = f"{real}/numa_node"
    node = sysfs.read_as(rel, parse_numa_node)
    if node is not None and nodes and node not in nodes:
        known = ", ".join(str(n) for n in sorted(nodes))
        sysfs.record(rel, "malformed", f"NUMA node {node}, but this node has NUMA nodes {known}")
        return None
    return node


def read_pci_device(
    sysfs: SysfsRoot, real: str, *, numa_nodes: frozenset[int] | None = None
) -> PciDevice:
    """Read one PCI function at ``real`` (a resolved path under sys/) and its upstream port's caps.

    ``numa_nodes``: the ids of ``devices/system/node/node*``, when known, to check ``numa_node`` against."""
    host, bridges, address = _split_pci_path(real)
    parent = real.rsplit("/", 1)[0]
    parent_is_bridge = bool(bridges) and parent.endswith(bridges[-1])
    link = PcieLink(
        speed_gts=sysfs.read_as(f"{real}/current_link_speed", parse_pci_speed),
        max_speed_gts=sysfs.read_as(f"{real}/max_link_speed", parse_pci_speed),
        width=sysfs.read_as(f"{real}/current_link_width", parse_pci_width),
        max_width=sysfs.read_as(f"{real}/max_link_width", parse_pci_width),
        upstream_max_speed_gts=sysfs.read_as(f"{parent}/max_link_speed", parse_pci_speed)
        if parent_is_bridge
        else None,
        upstream_max_width=sysfs.read_as(f"{parent}/max_link_width", parse_pci_width)
        if parent_is_bridge
        else None,
    )
    return PciDevice(
        address=address or real.rsplit("/", 1)[-1],
        sysfs_path=real,
        host_bridge=host,
        bridges=bridges,
        vendor_id=sysfs.read_as(f"{real}/vendor", parse_pci_id),
        device_id=sysfs.read_as(f"{real}/device", parse_pci_id),
        class_code=sysfs.read_as(f"{real}/class", parse_pci_class),
        numa_node=_numa_node(sysfs, real, numa_nodes),
        local_cpus=sysfs.read_as(f"{real}/local_cpulist", parse_cpulist) or CpuList(),
        link=link,
    )


def list_pci_devices(sysfs: SysfsRoot) -> list[tuple[str, str]]:
    """(address, resolved path) of every PCI function under ``bus/pci/devices``, in address order."""
    out = []
    for name in sysfs.listdir("bus/pci/devices"):
        if not is_pci_address(name):
            continue
        real = sysfs.resolve(f"bus/pci/devices/{name}")
        if real is None:
            continue
        out.append((name, real))
    out.sort(key=lambda t: pci_sort_key(t[0]))
    return out


def is_gpu(dev: PciDevice) -> bool:
    return (
        dev.vendor_id == VENDOR_NVIDIA
        and dev.class_code is not None
        and dev.class_code >> 16 == CLASS_DISPLAY
    )


def is_nvswitch(dev: PciDevice) -> bool:
    return (
        dev.vendor_id == VENDOR_NVIDIA
        and dev.class_code is not None
        and dev.class_code >> 8 == CLASS_NVSWITCH
    )
