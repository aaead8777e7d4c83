"""The node's topology as frozen dataclasses: NUMA nodes, GPUs, RDMA adapters and their ports, paths.

No I/O and no display strings here; a value sysfs did not give is ``None``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from ibdiag.node.driver import is_software
from ibdiag.node.sysfs import ReadProblem
from ibdiag.parse import CpuList, format_cpulist, pcie_gen


class PathClass(str, Enum):
    """How traffic between two PCI devices travels, as ``nvidia-smi topo -m`` names it (closest first)."""

    PIX = "PIX"
    """Through at most one PCIe bridge (one switch, or the same device)."""
    PXB = "PXB"
    """Through several PCIe bridges, without the host bridge."""
    PHB = "PHB"
    """Through a PCIe host bridge (the CPU's root complex)."""
    NODE = "NODE"
    """Across PCIe host bridges within one NUMA node."""
    SYS = "SYS"
    """Between NUMA nodes: PCIe plus the SMP interconnect (nvidia-smi: "Connection traversing PCIe as well
    as the SMP interconnect between NUMA nodes"). That is across sockets (UPI, Infinity Fabric) or, with
    several NUMA nodes per socket (Intel SNC, AMD NPS2/NPS4), between the nodes of one socket; also used
    when NUMA locality is unknown."""

    @property
    def rank(self) -> int:
        return _PATH_RANK[self]

    def __str__(self) -> str:
        return self.value


_PATH_RANK = {
    PathClass.PIX: 0,
    PathClass.PXB: 1,
    PathClass.PHB: 2,
    PathClass.NODE: 3,
    PathClass.SYS: 4,
}


@dataclass(frozen=True)
class PcieLink:
    """PCIe link of a device and what its upstream port supports (GT/s per lane, lanes)."""

    speed_gts: float | None = None
    max_speed_gts: float | None = None
    width: int | None = None
    max_width: int | None = None
    upstream_max_speed_gts: float | None = None
    upstream_max_width: int | None = None

    @property
    def capable_width(self) -> int | None:
        """Widest link both ends support."""
        widths = [w for w in (self.max_width, self.upstream_max_width) if w]
        return min(widths) if widths else None

    @property
    def capable_speed_gts(self) -> float | None:
        speeds = [s for s in (self.max_speed_gts, self.upstream_max_speed_gts) if s]
        return min(speeds) if speeds else None

    def to_json(self) -> dict[str, Any]:
        return {
            "speed_gts": self.speed_gts,
            "max_speed_gts": self.max_speed_gts,
            "width": self.width,
            "max_width": self.max_width,
            "gen": pcie_gen(self.speed_gts),
            "max_gen": pcie_gen(self.max_speed_gts),
            "upstream_max_speed_gts": self.upstream_max_speed_gts,
            "upstream_max_width": self.upstream_max_width,
        }


@dataclass(frozen=True)
class PciDevice:
    address: str
    """``0000:17:00.0``."""
    sysfs_path: str
    """Real path under sys/, ``devices/pci0000:15/0000:15:01.0/.../0000:17:00.0``."""
    host_bridge: str | None
    """``pci0000:15``: the root complex the device hangs from."""
    bridges: tuple[str, ...]
    """PCI bridges from the root port down to the device's parent (addresses)."""
    vendor_id: int | None
    device_id: int | None
    class_code: int | None
    numa_node: int | None
    """None when sysfs says -1 (unknown, typical in VMs)."""
    local_cpus: CpuList
    """``local_cpulist``, as ranges."""
    link: PcieLink

    def to_json(self) -> dict[str, Any]:
        return {
            "address": self.address,
            "vendor": None if self.vendor_id is None else f"0x{self.vendor_id:04x}",
            "device": None if self.device_id is None else f"0x{self.device_id:04x}",
            "class": None if self.class_code is None else f"0x{self.class_code:06x}",
            "numa_node": self.numa_node,
            "host_bridge": self.host_bridge,
            "bridges": list(self.bridges),
        }


@dataclass(frozen=True)
class Gpu:
    index: int
    """0..n-1 in ascending PCI address, NVML's order."""
    pci: PciDevice

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "pci": self.pci.address,
            "numa_node": self.pci.numa_node,
            "cpu_affinity": format_cpulist(self.pci.local_cpus) or None,
            "device_id": None if self.pci.device_id is None else f"0x{self.pci.device_id:04x}",
            "link": self.pci.link.to_json(),
            "bridges": list(self.pci.bridges),
            "host_bridge": self.pci.host_bridge,
        }


@dataclass(frozen=True)
class Gid:
    index: int
    gid: str
    type: str | None
    """``IB/RoCE v1`` or ``RoCE v2``."""
    netdev: str | None

    @property
    def is_ipv4_mapped(self) -> bool:
        """``0000:0000:0000:0000:0000:ffff:0a00:0105`` carries the IPv4 address 10.0.1.5."""
        return self.gid.lower().replace(":", "").startswith("00000000000000000000ffff")

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "gid": self.gid, "type": self.type, "netdev": self.netdev}


@dataclass(frozen=True)
class Port:
    adapter: str
    port: int
    state: str | None
    """``ACTIVE``, ``DOWN``, ``INIT``, ``ARMED`` ... (``ports/N/state``)."""
    state_code: int | None
    phys_state: str | None
    """``LinkUp``, ``Polling``, ``Disabled`` ... (``ports/N/phys_state``)."""
    phys_state_code: int | None
    rate_gbps: float | None
    lanes: int | None
    lane_speed: str | None
    """``NDR``, ``HDR`` ...; None where the kernel prints no name."""
    link_layer: str | None
    """``InfiniBand`` or ``Ethernet`` (RoCE)."""
    lid: int | None
    sm_lid: int | None
    netdev: str | None
    gids: tuple[Gid, ...] = ()
    """Populated GID table entries (RoCE: the ones NCCL and perftest choose from)."""
    software: bool = False
    """A software device's port (rxe, siw): ``rate_gbps`` is its netdev's speed, or None (unknown)."""
    rate_source: str | None = None
    """Where ``rate_gbps`` comes from when it is not the port's ``rate`` file (software devices)."""

    @property
    def active(self) -> bool:
        return self.state == "ACTIVE"

    @property
    def link_up(self) -> bool:
        return self.phys_state == "LinkUp"

    @property
    def gid_types(self) -> tuple[str, ...]:
        seen: list[str] = []
        for g in self.gids:
            if g.type and g.type not in seen:
                seen.append(g.type)
        return tuple(seen)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "port": self.port,
            "state": self.state,
            "phys_state": self.phys_state,
            "rate_gbps": self.rate_gbps,
            "lanes": self.lanes,
            "lane_speed": self.lane_speed,
            "link_layer": self.link_layer,
            "lid": self.lid,
            "sm_lid": self.sm_lid,
            "netdev": self.netdev,
        }
        if self.software:
            doc["software_device"] = True
            doc["rate_source"] = self.rate_source
        if self.link_layer == "Ethernet":
            doc["gid_types"] = list(self.gid_types)
            doc["gids"] = [g.to_json() for g in self.gids]
        return doc


@dataclass(frozen=True)
class KernelModule:
    """A kernel module as ``/sys/module/<name>`` shows it (``modinfo -F version`` / ``-F srcversion``).

    ``version`` is MODULE_VERSION: out-of-tree drivers (MLNX_OFED/DOCA-OFED's mlx5_core ``24.10-1.1.4``,
    NVIDIA's ``550.90.07``) set one; most in-tree drivers dropped theirs (Linux 5.x), and their
    ``srcversion``, modpost's digest of the module's sources, exists only for a loadable module with a
    version or on a kernel built with CONFIG_MODULE_SRCVERSION_ALL. A built-in module has neither.
    """

    name: str
    """``mlx5_core``, ``bnxt_en``, ``rdma_rxe`` ..."""
    version: str | None = None
    srcversion: str | None = None

    @property
    def version_kind(self) -> str | None:
        """``version`` when the module has one, else ``srcversion``, else None (unknown)."""
        if self.version is not None:
            return "version"
        return "srcversion" if self.srcversion is not None else None

    @property
    def version_text(self) -> str | None:
        """The version, else the srcversion (say which with :attr:`version_kind`)."""
        return self.version if self.version is not None else self.srcversion


@dataclass(frozen=True)
class Adapter:
    name: str
    """``mlx5_0`` (``/sys/class/infiniband/<name>``)."""
    pci: PciDevice | None
    """None for software devices without a PCI function (rxe, siw)."""
    fw_ver: str | None
    board_id: str | None
    hca_type: str | None
    node_type: str | None
    node_guid: str | None
    ports: tuple[Port, ...]
    driver: str | None = None
    """The RDMA driver (``mlx5``, ``rxe``, ``bnxt_re`` ...: :func:`ibdiag.node.driver.rdma_driver`)."""
    module: KernelModule | None = None
    """The kernel module of the driver bound to the adapter's device (``mlx5_core``, ``bnxt_en``; the
    RDMA module of a software device: ``rdma_rxe``, ``siw``): :func:`ibdiag.node.driver.driver_module`."""

    @property
    def active(self) -> bool:
        return any(p.active for p in self.ports)

    @property
    def software(self) -> bool:
        """rxe or siw: no firmware, no PCI function, a netdev's speed for a rate."""
        return is_software(self.driver)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "pci": None if self.pci is None else self.pci.address,
            "numa_node": None if self.pci is None else self.pci.numa_node,
            "fw_ver": self.fw_ver,
            "board_id": self.board_id,
            "hca_type": self.hca_type,
            "node_type": self.node_type,
            "node_guid": self.node_guid,
            "driver": self.driver,
            "driver_module": None if self.module is None else self.module.name,
            "driver_version": None if self.module is None else self.module.version_text,
            "driver_version_kind": None if self.module is None else self.module.version_kind,
            "link": None if self.pci is None else self.pci.link.to_json(),
            "ports": [p.to_json() for p in self.ports],
        }


@dataclass(frozen=True)
class NumaNode:
    node: int
    cpus: CpuList

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "cpus": format_cpulist(self.cpus)}


@dataclass(frozen=True)
class GdrState:
    """GPUDirect RDMA peer-memory support: which module provides it, if any."""

    state: str
    """``nvidia_peermem``, ``nv_peer_mem`` (legacy Mellanox module), ``absent`` or ``unknown``."""
    nvidia_driver: str | None = None
    """``/sys/module/nvidia/version`` when the NVIDIA driver is loaded."""

    @property
    def loaded(self) -> bool:
        return self.state in ("nvidia_peermem", "nv_peer_mem")

    def to_json(self) -> dict[str, Any]:
        return {"module": self.state, "loaded": self.loaded, "nvidia_driver": self.nvidia_driver}


@dataclass(frozen=True)
class GpuNicPath:
    gpu: int
    adapter: str
    path: PathClass

    def to_json(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "adapter": self.adapter, "path": self.path.value}


@dataclass(frozen=True)
class Pairing:
    """The adapter ports a GPU should use and whether NCCL will do GPUDirect RDMA through them."""

    gpu: int
    ports: tuple[Port, ...]
    """Every ACTIVE port of the fabric's link layer at the best path class from this GPU: all of them
    when several tie (two adapters under the GPU's switch, both functions of a dual-port card, both
    ports of a two-port device), in NIC order."""
    path: PathClass | None
    """Path class to the nearest active adapter; None when no adapter is active."""
    gdr_path: bool
    """Path is at or below the GDR level (NCCL_NET_GDR_LEVEL, default PXB)."""
    gdr: bool
    """gdr_path and a peer-memory module is loaded: NCCL will use GPUDirect RDMA."""

    @property
    def nearest(self) -> tuple[str, ...]:
        """The adapters of :attr:`ports`, each once, in NIC order."""
        return tuple(dict.fromkeys(p.adapter for p in self.ports))

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "nearest": list(self.nearest),
            "ports": [port_name(p) for p in self.ports],
            "path": None if self.path is None else self.path.value,
            "gdr_path": self.gdr_path,
            "gdr": self.gdr,
        }


def port_name(port: Port) -> str:
    """``mlx5_0:1``: how findings, ``NCCL_IB_HCA`` and ``ibstat -p`` name a port."""
    return f"{port.adapter}:{port.port}"


@dataclass(frozen=True)
class Topology:
    numa_nodes: tuple[NumaNode, ...]
    gpus: tuple[Gpu, ...]
    adapters: tuple[Adapter, ...]
    """RDMA adapters in the driver's device order, the natural order of their names (``mlx5_2`` before
    ``mlx5_10``): position k is ``NICk``, as ``nvidia-smi topo -m`` numbers them (not PCI order: the
    kernel names devices in probe order)."""
    nvswitches: tuple[str, ...]
    """PCI addresses of NVSwitch devices."""
    gdr: GdrState
    paths: tuple[GpuNicPath, ...]
    pairings: tuple[Pairing, ...]
    gdr_level: PathClass
    problems: tuple[ReadProblem, ...] = ()
    functions_without_rdma: tuple[str, ...] = ()
    """PCI addresses of Mellanox network/InfiniBand functions that no RDMA device belongs to: the
    mlx5_core/mlx5_ib driver is not loaded or failed to probe them (``lspci -d 15b3:`` lists them)."""
    kernel_release: str | None = None
    """``uname -r`` of the node: :func:`ibdiag.node.discover.read_kernel_release`; None when unknown."""
    kernel_release_source: str | None = None
    """Where it was read: ``/proc/sys/kernel/osrelease`` (beside sys/ under the root) or ``snapshot
    manifest`` (``ibdiag-snapshot.json`` of a snapshot taken on the node); None when unknown."""

    def path(self, gpu: int, adapter: str) -> PathClass | None:
        for p in self.paths:
            if p.gpu == gpu and p.adapter == adapter:
                return p.path
        return None

    def adapter(self, name: str) -> Adapter | None:
        for a in self.adapters:
            if a.name == name:
                return a
        return None

    def nic_index(self, name: str) -> int | None:
        """k of ``NICk`` (``nvidia-smi topo -m``'s column and legend) for adapter ``name``."""
        for i, a in enumerate(self.adapters):
            if a.name == name:
                return i
        return None

    @property
    def nccl_ports(self) -> tuple[Port, ...]:
        """The ports NCCL should use: every port nearest (or tied nearest) to some GPU, each once, in NIC order."""
        chosen = {(p.adapter, p.port) for pairing in self.pairings for p in pairing.ports}
        return tuple(p for a in self.adapters for p in a.ports if (a.name, p.port) in chosen)

    @property
    def nccl_ib_hca(self) -> str | None:
        """``NCCL_IB_HCA`` that selects exactly :attr:`nccl_ports`: ``=mlx5_0:1,mlx5_1:1,...``.

        NCCL (net_ib.cc) reads a leading ``=`` as "match names exactly" (without it ``mlx5_1`` is a
        prefix that also selects ``mlx5_10`` and ``mlx5_11``) and ``dev:port`` as that port only (a bare
        ``dev`` is every active port of it); the order of the entries does not matter to NCCL, which
        reads at most 32 entries (MAX_IB_DEVS).
        """
        # A renamed device (``rdma dev set``) whose name holds "," or ":" cannot be written in NCCL's
        # list (both split entries): it is left out rather than misread as another device or port.
        names = [port_name(p) for p in self.nccl_ports if not any(c in p.adapter for c in ",:")]
        return "=" + ",".join(names) if names else None

    def to_json(self) -> dict[str, Any]:
        return {
            "numa_nodes": [n.to_json() for n in self.numa_nodes],
            "gpus": [g.to_json() for g in self.gpus],
            "nvswitches": len(self.nvswitches),
            "adapters": [{"nic_index": i, **a.to_json()} for i, a in enumerate(self.adapters)],
            "paths": [p.to_json() for p in self.paths],
            "pairings": [p.to_json() for p in self.pairings],
            "gdr": self.gdr.to_json(),
            "gdr_level": self.gdr_level.value,
            "nccl_ib_hca": self.nccl_ib_hca,
            "functions_without_rdma": list(self.functions_without_rdma),
            "kernel_release": self.kernel_release,
            "kernel_release_source": self.kernel_release_source,
        }
