"""sysfs -> :class:`Topology`: the reading half of ``ibdiag topo`` (what ``nvidia-smi topo -m`` and ``ibstat`` read).

Everything is found by following sysfs's own links (``bus/pci/devices/*``, ``class/infiniband/*``,
``.../device``) and reading PCI class and vendor codes, never by guessing from names.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping
from typing import TypeVar

from ibdiag.node.driver import driver_module, is_software, rdma_driver, software_netdev
from ibdiag.node.manifest import MANIFEST, read_manifest
from ibdiag.node.model import (
    Adapter,
    GdrState,
    Gid,
    Gpu,
    GpuNicPath,
    KernelModule,
    NumaNode,
    Pairing,
    PathClass,
    PciDevice,
    Port,
    Topology,
)
from ibdiag.node.paths import classify
from ibdiag.node.pci import (
    CLASS_ETHERNET,
    CLASS_INFINIBAND,
    VENDOR_MELLANOX,
    VENDOR_NVIDIA,
    is_gpu,
    is_nvswitch,
    list_pci_devices,
    read_pci_device,
)
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.parse import (
    MAX_NUMA_NODES,
    CpuList,
    is_pci_address,
    parse_cpulist,
    parse_entry_number,
    parse_enum_state,
    parse_ib_rate,
    parse_kernel_release,
    parse_lid,
    parse_module_version,
    parse_pci_class,
    parse_pci_id,
    parse_srcversion,
    parse_uint,
    pci_sort_key,
)
from ibdiag.text import safe_value

T = TypeVar("T")

_ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
#: Most GID table entries read per port (mlx5 RoCE ports have 255; the populated ones come first).
MAX_GIDS = 256


def natural_key(name: str) -> tuple[str | int, ...]:
    """``mlx5_2`` before ``mlx5_10`` (ASCII digit runs compare as numbers; re.split puts them at odd places)."""
    return tuple(int(t) if i % 2 else t for i, t in enumerate(re.split(r"([0-9]{1,64})", name)))


# --- RDMA ports ------------------------------------------------------------------------------------


def _read_gids(sysfs: SysfsRoot, base: str) -> tuple[Gid, ...]:
    gids: list[Gid] = []
    indices = sorted(_numbered(sysfs, f"{base}/gids"))[:MAX_GIDS]
    for i in indices:
        # Unused entries read as all zeros; their gid_attrs fail with EINVAL (kernel sysfs.c) — not a problem.
        gid = sysfs.read(f"{base}/gids/{i}")
        if gid is None or gid == _ZERO_GID:
            continue
        gtype = _read_quiet(sysfs, f"{base}/gid_attrs/types/{i}")
        ndev = _read_quiet(sysfs, f"{base}/gid_attrs/ndevs/{i}")
        gids.append(Gid(index=i, gid=gid, type=gtype, netdev=ndev))
    return tuple(gids)


def _parse_dev_port(text: str) -> int:
    return parse_uint(text, 0xFFFF, "dev_port")  # u16 (struct net_device.dev_port)


def _numbered(sysfs: SysfsRoot, rel: str) -> list[int]:
    """Entries of ``rel`` named by a number as the kernel prints it (``ports/1``, ``gids/0``); other
    names (``01``, ``²``) are recorded as malformed and skipped."""
    out = []
    for name in sysfs.listdir(rel):
        try:
            out.append(parse_entry_number(name))
        except ValueError as e:
            sysfs.record(f"{rel}/{name}", "malformed", str(e))
    return out


def _read_quiet(sysfs: SysfsRoot, rel: str) -> str | None:
    # gid_attrs of an IB port or an unused GID raise EINVAL by design; do not record that as a problem.
    before = len(sysfs.problems)
    value = sysfs.read(rel)
    del sysfs.problems[before:]
    return value


def _port_netdev(sysfs: SysfsRoot, adapter: str, port: int, gids: tuple[Gid, ...]) -> str | None:
    for g in gids:
        if g.netdev:
            return g.netdev  # RoCE: gid_attrs/ndevs names the port's netdev directly
    nets = sysfs.listdir(f"class/infiniband/{adapter}/device/net")
    if len(nets) == 1:
        return nets[0]
    for net in nets:
        # dev_port is 0-based (Documentation/ABI/testing/sysfs-class-net); IPoIB sets it per port.
        dev_port = sysfs.read_as(
            f"class/infiniband/{adapter}/device/net/{net}/dev_port", _parse_dev_port
        )
        if dev_port is not None and dev_port == port - 1:
            return net
    return None


def read_port(sysfs: SysfsRoot, adapter: str, port: int, *, with_gids: bool = True) -> Port:
    """One port of ``/sys/class/infiniband/<adapter>/ports/<port>`` (``ibstat``'s per-port block)."""
    base = f"class/infiniband/{adapter}/ports/{port}"
    state = sysfs.read_as(f"{base}/state", parse_enum_state)
    phys = sysfs.read_as(f"{base}/phys_state", parse_enum_state)
    rate = sysfs.read_as(f"{base}/rate", parse_ib_rate)
    link_layer = sysfs.read(f"{base}/link_layer")
    gids = _read_gids(sysfs, base) if with_gids else ()
    # A LID means nothing on an Ethernet link layer (RoCE prints 0x0), and the read can fail there:
    # drivers/infiniband/core/device.c iw_query_port returns -ENODEV for an iWARP port without a netdev.
    lid = (
        _read_quiet(sysfs, f"{base}/lid") if link_layer == "Ethernet" else sysfs.read(f"{base}/lid")
    )
    sm_lid = (
        _read_quiet(sysfs, f"{base}/sm_lid")
        if link_layer == "Ethernet"
        else sysfs.read(f"{base}/sm_lid")
    )
    netdev = _port_netdev(sysfs, adapter, port, gids) if with_gids else None
    software = is_software(rdma_driver(sysfs, adapter))
    rate_source = None
    rate_gbps = None if rate is None else rate.rate_gbps
    if software:
        # A software device's port rate is not a link's: rxe maps its netdev's ethtool speed onto an IB
        # width x speed pair (drivers/infiniband/core/verbs.c ib_get_eth_speed, called by rxe_query_port),
        # which rounds (10 Gb/sec (1X FDR10) for a 10G netdev) and says 1X SDR when the speed is unknown.
        # The netdev's own speed is the fact; without one the rate is unknown.
        rate_gbps, rate_source = _software_rate(
            sysfs, adapter, netdev or _software_port_netdev(sysfs, adapter, base)
        )
        rate = None
    return Port(
        adapter=adapter,
        port=port,
        state=None if state is None else state[1],
        state_code=None if state is None else state[0],
        phys_state=None if phys is None else phys[1],
        phys_state_code=None if phys is None else phys[0],
        rate_gbps=rate_gbps,
        lanes=None if rate is None else rate.width,
        lane_speed=None if rate is None else rate.speed,
        link_layer=link_layer,
        lid=_safe(parse_lid, lid),
        sm_lid=_safe(parse_lid, sm_lid),
        netdev=netdev,
        gids=gids,
        software=software,
        rate_source=rate_source,
    )


def _software_port_netdev(sysfs: SysfsRoot, adapter: str, base: str) -> str | None:
    """rxe's ``parent`` attribute, else the netdev of GID 0 (siw and rxe fill it from the netdev)."""
    return software_netdev(sysfs, adapter) or _read_quiet(sysfs, f"{base}/gid_attrs/ndevs/0")


def _software_rate(sysfs: SysfsRoot, adapter: str, netdev: str | None) -> tuple[float | None, str]:
    """(Gb/s or None, where it comes from) for a port of a software device."""
    if netdev is None:
        return None, f"software device {adapter}: no netdev found, rate unknown"
    # class/net/<if>/speed: Mb/s; EINVAL or -1 (SPEED_UNKNOWN) when the driver does not know
    # (net/core/net-sysfs.c speed_show, include/uapi/linux/ethtool.h): virtio and many virtual links.
    before = len(sysfs.problems)
    text = sysfs.read(f"class/net/{netdev}/speed")
    del sysfs.problems[before:]
    try:
        mbps = int(text) if text is not None else None
    except ValueError:
        mbps = None
    if mbps is None or mbps <= 0:
        return None, f"software device {adapter}: netdev {netdev} reports no speed, rate unknown"
    return mbps / 1000.0, f"netdev {netdev} speed {mbps} Mb/s (software device {adapter})"


def _safe(parser: Callable[[str], T], text: str | None) -> T | None:
    if text is None:
        return None
    try:
        return parser(text)
    except ValueError:
        return None


def list_adapters(sysfs: SysfsRoot) -> list[str]:
    """Names under ``/sys/class/infiniband`` in natural order (``mlx5_2`` before ``mlx5_10``).

    An entry that leads outside the root (``mlx5_0 -> /another/tree``) is left out, recorded as refused:
    topo and counters must not read another tree's adapter as this node's."""
    names = [
        n
        for n in sysfs.listdir("class/infiniband")
        if not sysfs.leads_outside(f"class/infiniband/{n}")
    ]
    return sorted(names, key=natural_key)


def list_ports(sysfs: SysfsRoot, adapter: str) -> list[int]:
    return sorted(_numbered(sysfs, f"class/infiniband/{adapter}/ports"))


def read_module(sysfs: SysfsRoot, name: str) -> KernelModule:
    """``/sys/module/<name>``'s ``version`` and ``srcversion`` (``modinfo -F version`` / ``-F srcversion``
    of the loaded module). A missing file is no problem (most in-tree modules have no version, a
    kernel without CONFIG_MODULE_SRCVERSION_ALL no srcversion); a malformed one is recorded and None."""
    return KernelModule(
        name=name,
        version=sysfs.read_as(f"module/{name}/version", parse_module_version),
        srcversion=sysfs.read_as(f"module/{name}/srcversion", parse_srcversion),
    )


def read_adapter(
    sysfs: SysfsRoot,
    name: str,
    *,
    with_gids: bool = True,
    numa_nodes: frozenset[int] | None = None,
    modules: dict[str, KernelModule] | None = None,
) -> Adapter:
    """One RDMA device (``ibstat <name>``, ``ibv_devinfo``); ``modules`` caches :func:`read_module` across
    adapters (eight adapters share one mlx5_core: its files are read, and a bad one recorded, once)."""
    base = f"class/infiniband/{name}"
    real = sysfs.resolve(f"{base}/device")
    pci = None
    if real is not None and is_pci_address(real.rsplit("/", 1)[-1]):
        pci = read_pci_device(sysfs, real, numa_nodes=numa_nodes)
    driver = rdma_driver(sysfs, name)
    module_name = driver_module(sysfs, name, driver)
    module = None
    if module_name is not None:
        modules = {} if modules is None else modules
        if module_name not in modules:
            modules[module_name] = read_module(sysfs, module_name)
        module = modules[module_name]
    return Adapter(
        name=name,
        pci=pci,
        # A software device has no firmware: rxe and siw leave fw_ver empty (no get_dev_fw_str).
        fw_ver=_read_quiet(sysfs, f"{base}/fw_ver")
        if is_software(driver)
        else sysfs.read(f"{base}/fw_ver"),
        board_id=sysfs.read(f"{base}/board_id"),
        hca_type=sysfs.read(f"{base}/hca_type"),
        node_type=sysfs.read(f"{base}/node_type"),
        node_guid=sysfs.read(f"{base}/node_guid"),
        ports=tuple(
            read_port(sysfs, name, p, with_gids=with_gids) for p in list_ports(sysfs, name)
        ),
        driver=driver,
        module=module,
    )


# --- node-level ------------------------------------------------------------------------------------


_NODE_DIR_RE = re.compile(r"node(0|[1-9][0-9]{0,3})")


def numa_node_ids(sysfs: SysfsRoot) -> list[int]:
    """Ids of ``devices/system/node/node<N>`` (has_cpu, online, possible ... live beside them)."""
    ids = []
    for name in sysfs.listdir("devices/system/node"):
        m = _NODE_DIR_RE.fullmatch(name)
        if m and int(m.group(1)) < MAX_NUMA_NODES:
            ids.append(int(m.group(1)))
    return sorted(ids)


def read_numa_nodes(sysfs: SysfsRoot) -> tuple[NumaNode, ...]:
    return tuple(
        NumaNode(
            n, sysfs.read_as(f"devices/system/node/node{n}/cpulist", parse_cpulist) or CpuList()
        )
        for n in numa_node_ids(sysfs)
    )


def read_gdr(sysfs: SysfsRoot) -> GdrState:
    """GPUDirect RDMA peer memory: ``nvidia_peermem`` module, or the legacy ``nv_peer_mem`` (memory_peers/nv_mem*)."""
    driver = sysfs.read_as(
        "module/nvidia/version", parse_module_version
    )  # checked as every module version is
    if sysfs.exists("module/nvidia_peermem"):
        return GdrState("nvidia_peermem", driver)
    if any(n.startswith("nv_mem") for n in sysfs.listdir("kernel/mm/memory_peers")) or sysfs.exists(
        "module/nv_peer_mem"
    ):
        return GdrState("nv_peer_mem", driver)
    if sysfs.listdir("module"):
        return GdrState("absent", driver)
    return GdrState("unknown", driver)


#: Where :func:`read_kernel_release` found the release (``Topology.kernel_release_source``).
KERNEL_FROM_PROC = "/proc/sys/kernel/osrelease"
KERNEL_FROM_MANIFEST = "snapshot manifest"


def read_kernel_release(sysfs: SysfsRoot) -> tuple[str | None, str | None]:
    """(``uname -r`` of the node the tree is from, where it was read), or (None, None) when unknown.

    sysfs does not carry the release (``/sys/kernel`` has no osrelease; ``vmcoreinfo`` holds an address
    and ``notes`` the build's ELF notes, no version string), so it is read beside sys/ under the same
    root: ``ROOT/proc/sys/kernel/osrelease`` (kernel/utsname_sysctl.c; what ``uname -r`` prints) — on a
    live node ``/proc``, and a fixture tree may carry it. A snapshot archive holds only sys/ (readers
    of older versions refuse anything else), so for one the release its manifest recorded at capture
    counts: ``kernel_release``, or the older ``kernel`` when the snapshot was taken from ``/`` (it is the
    capturing machine's release, the node's own only then). Anything malformed is recorded and unknown.
    """
    release = sysfs.read_proc_as("sys/kernel/osrelease", parse_kernel_release)
    if release is not None:
        return release, KERNEL_FROM_PROC
    if any(p.path == "../proc/sys/kernel/osrelease" for p in sysfs.problems):
        return None, None  # a bad osrelease is not papered over with a manifest's word
    if str(sysfs.root) == "/":
        return None, None
    manifest = read_manifest(sysfs.root)
    if not manifest:
        return None, None
    value = manifest.get("kernel_release")
    if value is None and manifest.get("source_root") == "/":
        value = manifest.get("kernel")
    if value is None:
        return None, None
    key = f"../{MANIFEST}"
    if not isinstance(value, str):
        sysfs.record(key, "malformed", f"kernel release {safe_value(value)} is not a string")
        return None, None
    try:
        return parse_kernel_release(value), KERNEL_FROM_MANIFEST
    except ValueError as e:
        sysfs.record(key, "malformed", str(e))
        return None, None


def fabric_link_layer(
    gpus: tuple[Gpu, ...],
    adapters: tuple[Adapter, ...],
    by_pair: Mapping[tuple[int, str], PathClass],
) -> str | None:
    """The link layer of the GPUs' fabric: the most common among the active ports nearest to each GPU
    (first in NIC order on a tie). A storage adapter of the other link layer that happens to tie with the
    compute adapters for one GPU is then not offered to NCCL; None when no port is active."""
    layers: Counter[str | None] = Counter()
    for gpu in gpus:
        layers.update(p.link_layer for p in _nearest_ports(gpu, adapters, by_pair, None)[1])
    return layers.most_common(1)[0][0] if layers else None


def _nearest_ports(
    gpu: Gpu,
    adapters: tuple[Adapter, ...],
    by_pair: Mapping[tuple[int, str], PathClass],
    link_layer: str | None,
) -> tuple[PathClass | None, tuple[Port, ...]]:
    """The best path class from ``gpu`` to an active port (of ``link_layer`` unless None) and every
    active port at that class, in NIC order."""
    candidates = [
        (by_pair[(gpu.index, a.name)], p)
        for a in adapters
        if (gpu.index, a.name) in by_pair
        for p in a.ports
        if p.active and (link_layer is None or p.link_layer == link_layer)
    ]
    if not candidates:
        return None, ()
    best = min(candidates, key=lambda c: c[0].rank)[0]
    return best, tuple(p for cls, p in candidates if cls is best)


def pairings(
    gpus: tuple[Gpu, ...],
    adapters: tuple[Adapter, ...],
    paths: tuple[GpuNicPath, ...],
    gdr: GdrState,
    gdr_level: PathClass,
) -> tuple[Pairing, ...]:
    """For each GPU: every active port of the fabric's link layer at the best path class (ties all
    kept: NCCL uses each of them), and whether GPUDirect RDMA applies."""
    by_pair = {(p.gpu, p.adapter): p.path for p in paths}
    layer = fabric_link_layer(gpus, adapters, by_pair)
    out = []
    for gpu in gpus:
        path, ports = _nearest_ports(gpu, adapters, by_pair, layer)
        gdr_path = path is not None and path.rank <= gdr_level.rank
        out.append(Pairing(gpu.index, ports, path, gdr_path, gdr_path and gdr.loaded))
    return tuple(out)


def discover(sysfs: SysfsRoot, *, gdr_level: PathClass = PathClass.PXB) -> Topology:
    """Read the whole topology under ``sysfs``; broken values become None plus ``problems``."""
    node_ids = frozenset(numa_node_ids(sysfs))
    gpus_pci: list[PciDevice] = []
    nvswitches: list[str] = []
    nic_functions: list[str] = []
    for address, real in list_pci_devices(sysfs):
        vendor = sysfs.read_as(f"{real}/vendor", parse_pci_id)
        if vendor == VENDOR_MELLANOX:
            cls = sysfs.read_as(f"{real}/class", parse_pci_class)
            if cls is not None and cls >> 8 in (CLASS_ETHERNET, CLASS_INFINIBAND):
                nic_functions.append(address)
            continue
        if vendor != VENDOR_NVIDIA:
            continue  # only NVIDIA functions need the full read; adapters are found through class/infiniband
        dev = read_pci_device(sysfs, real, numa_nodes=node_ids)
        if is_gpu(dev):
            gpus_pci.append(dev)
        elif is_nvswitch(dev):
            nvswitches.append(address)
    gpus = tuple(
        Gpu(i, dev) for i, dev in enumerate(sorted(gpus_pci, key=lambda d: pci_sort_key(d.address)))
    )
    # NIC order is the driver's device order, the names' natural order (nvidia-smi topo -m), not PCI order.
    modules: dict[str, KernelModule] = {}
    adapters_t = tuple(
        read_adapter(sysfs, name, numa_nodes=node_ids, modules=modules)
        for name in list_adapters(sysfs)
    )
    with_rdma = {a.pci.address for a in adapters_t if a.pci is not None}
    paths = tuple(
        GpuNicPath(g.index, a.name, classify(g.pci, a.pci) if a.pci is not None else PathClass.SYS)
        for g in gpus
        for a in adapters_t
    )
    gdr = read_gdr(sysfs)
    kernel_release, kernel_source = read_kernel_release(sysfs)
    return Topology(
        numa_nodes=read_numa_nodes(sysfs),
        gpus=gpus,
        adapters=adapters_t,
        nvswitches=tuple(nvswitches),
        gdr=gdr,
        paths=paths,
        pairings=pairings(gpus, adapters_t, paths, gdr, gdr_level),
        gdr_level=gdr_level,
        problems=tuple(sysfs.problems),
        functions_without_rdma=tuple(a for a in nic_functions if a not in with_rdma),
        kernel_release=kernel_release,
        kernel_release_source=kernel_source,
    )
