"""Topology -> findings: is every GPU next to a usable adapter, are links and ports at full width and rate?

Check ids are stable (CI and dashboards key on them); each is one function registered in ``CHECKS``:

* ``topo.gpu_nic_path``   GPU without an active adapter at the GDR level (PXB) or closer: warn; SYS
                          (another NUMA node, or NUMA unknown): fail
* ``topo.pcie_width``     device trained narrower than it and its upstream port support: fail
* ``topo.pcie_speed``     device trained slower than it and its upstream port support: warn
* ``topo.gdr_module``     GPUs and adapters but no peer-memory module: warn
* ``topo.adapters``       RDMA adapter count (of ``[topo] expect_on``): fewer than expected fails; GPUs but
                          no usable adapter warns, fails with ``[topo] gpus_need_adapters``
* ``topo.gpus``           GPU count against the config's expectation
* ``topo.sysfs_value``    an attribute that mattered could not be read or parsed: warn

and the ports' ``port.state``/``port.rate`` (:mod:`ibdiag.ports.checks`, shared with counters and verdict).
The configuration checks (NCCL's environment, RoCE lossless settings, PCIe ACS/IOMMU/MPS/MRRS) register
their ids in this ``CHECKS`` from their own modules; :mod:`ibdiag.topo.configuration` is their entry point.
"""

from __future__ import annotations

from dataclasses import dataclass

from ibdiag.errors import InputError
from ibdiag.findings.model import Finding, Severity
from ibdiag.findings.registry import CheckRegistry
from ibdiag.node.model import Adapter, Pairing, PathClass, PciDevice, Topology
from ibdiag.node.paths import parse_gdr_level
from ibdiag.parse import pcie_gen
from ibdiag.ports.checks import check_ports
from ibdiag.ports.config import SET_HINT, AdapterSet, PortsConfig, SetKind, parse_set
from ibdiag.ports.selection import gpu_facing, select_adapters

CHECKS = CheckRegistry("topo")


@dataclass(frozen=True)
class TopoConfig:
    """``[topo]`` settings (the ports' expected rate and ignore list are ``[ports]``: :class:`~ibdiag.ports.config.PortsConfig`)."""

    expect_adapters: int | None = None
    """RDMA adapters this node must have (``--expect-adapters``), counted in ``expect_on``; None: no
    expectation — a node without GPUs may then have none, a GPU node without any warns (fails with
    ``gpus_need_adapters``)."""
    expect_on: str = "all"
    """Which adapters ``expect_adapters`` counts, a SET (:func:`ibdiag.ports.config.parse_set`): ``all``
    (default), ``gpu`` (the GPU-facing adapters), ``infiniband``, ``ethernet`` or adapter patterns
    (``--expect-on``, which sets ``[ports] expect_on`` too)."""
    gpus_need_adapters: bool = False
    """A node with GPUs must have a usable RDMA adapter (a hardware one, not ignored): without one
    ``topo.adapters`` fails instead of warning — the mlx5 driver that did not load on a GPU node. Off
    by default: ibdiag cannot tell the few GPU nodes meant to be alone (contrib/etc/ibdiag.toml sets it)."""
    expect_gpus: int | None = None
    """GPUs this node must have; None: no expectation."""
    gdr_level: str = "PXB"
    """Farthest path class at which NCCL uses GPUDirect RDMA: NCCL_NET_GDR_LEVEL's default is PXB (NCCL docs)."""
    require_peermem: bool = True
    """Warn when GPUs and adapters are present but no peer-memory module is loaded (NVIDIA GPUDirect RDMA docs)."""

    def __post_init__(self) -> None:
        try:
            parse_gdr_level(self.gdr_level)
        except ValueError as e:
            raise InputError(
                f"config [topo] gdr_level: {e}", hint="use PIX, PXB, PHB, NODE or SYS"
            ) from None
        try:
            parse_set(self.expect_on)
        except ValueError as e:
            raise InputError(f"config [topo] expect_on: {e}", hint=SET_HINT) from None

    @property
    def expect_set(self) -> AdapterSet:
        return parse_set(self.expect_on)

    @property
    def gdr_path_class(self) -> PathClass:
        return parse_gdr_level(self.gdr_level)


# --- the node ----------------------------------------------------------------------------------------


def _without_rdma(topo: Topology) -> str:
    """``; 2 Mellanox PCI functions have no RDMA device (0000:19:00.0, 0000:2a:00.0)`` or nothing."""
    funcs = topo.functions_without_rdma
    if not funcs:
        return ""
    shown = ", ".join(funcs[:4]) + (f", +{len(funcs) - 4} more" if len(funcs) > 4 else "")
    return f"; {len(funcs)} Mellanox PCI function(s) have no RDMA device ({shown})"


_DRIVER_HINT = (
    "check that the driver is loaded (`lsmod | grep -E 'mlx5_ib|mlx5_core'`, `dmesg | grep mlx5` for probe errors) "
    "and that the cards are seen (`lspci -d 15b3:`); a missing adapter is often a dead card or firmware"
)


@CHECKS.check(
    "topo.adapters",
    "fewer RDMA adapters than expected ([topo] expect_adapters in expect_on, --expect-adapters, --expect-on): fail; "
    "GPUs but no usable adapter: warn, fail with [topo] gpus_need_adapters",
)
def adapters(topo: Topology, config: TopoConfig) -> Finding:
    selection = config.expect_set
    chosen = select_adapters(selection, topo)
    n = len(chosen)
    usable = [a for a in topo.adapters if not a.software]
    if topo.gpus and not usable and config.gpus_need_adapters:
        return Finding(
            "topo.adapters",
            Severity.FAIL,
            "node",
            f"{len(topo.gpus)} GPU(s) but no usable RDMA adapter{_what_there_is(topo)}{_without_rdma(topo)}; "
            "[topo] gpus_need_adapters says this node must reach the fabric",
            value=0,
            limit=config.expect_adapters,
            hint=_DRIVER_HINT,
        )
    if config.expect_adapters is not None and n < config.expect_adapters:
        return Finding(
            "topo.adapters",
            Severity.FAIL,
            "node",
            f"{n} {_kind(selection)}RDMA adapter(s) found, {config.expect_adapters} expected"
            f"{_which(selection, chosen)}{_without_rdma(topo)}",
            value=n,
            limit=config.expect_adapters,
            hint=_DRIVER_HINT,
        )
    if not usable and topo.gpus and config.expect_adapters is None:
        # A GPU node is built to reach the fabric: no adapter there is a failed driver load (mlx5_ib) or dead
        # cards, not a CPU VM. Without an expectation ibdiag cannot tell the few GPU nodes meant to be alone.
        return Finding(
            "topo.adapters",
            Severity.WARN,
            "node",
            f"{len(topo.gpus)} GPU(s) but no RDMA adapter{_what_there_is(topo)}{_without_rdma(topo)}",
            value=0,
            hint=_DRIVER_HINT
            + "; give --expect-adapters N, or set [topo] gpus_need_adapters = true, to make this fail",
        )
    if not topo.adapters:
        return Finding(
            "topo.adapters",
            Severity.OK,
            "node",
            "no RDMA adapter on this node (/sys/class/infiniband is empty or absent)",
            value=0,
            limit=config.expect_adapters,
        )
    return Finding(
        "topo.adapters",
        Severity.OK,
        "node",
        f"{n} {_kind(selection)}RDMA adapter(s){_which(selection, chosen)}",
        value=n,
        limit=config.expect_adapters,
    )


def _kind(selection: AdapterSet) -> str:
    """``GPU-facing `` / ``InfiniBand `` / nothing for every adapter (the word before "RDMA adapter")."""
    if selection.kind is SetKind.NAMES:
        return "named "
    return f"{selection.label} " if selection.label else ""


def _which(selection: AdapterSet, chosen: tuple[Adapter, ...]) -> str:
    """`` (--expect-on gpu: mlx5_0, mlx5_1, ...)``: what was counted; nothing when every adapter was."""
    if selection.is_all:
        return ""
    names = [a.name for a in chosen]
    shown = ", ".join(names[:8]) + (f", +{len(names) - 8} more" if len(names) > 8 else "")
    return f" (expect_on {selection.spec}: {shown or 'none'})"


def _what_there_is(topo: Topology) -> str:
    """`` (/sys/class/infiniband is empty or absent)`` or `` (only software devices: rxe0)``."""
    if not topo.adapters:
        return " (/sys/class/infiniband is empty or absent)"
    return f" (only software devices: {', '.join(a.name for a in topo.adapters)})"


@CHECKS.check("topo.gpus", "GPU count other than [topo] expect_gpus: fail")
def gpus(topo: Topology, config: TopoConfig) -> Finding | None:
    if config.expect_gpus is None:
        return None
    n = len(topo.gpus)
    sev = Severity.FAIL if n != config.expect_gpus else Severity.OK
    return Finding(
        "topo.gpus",
        sev,
        "node",
        f"{n} NVIDIA GPU(s) found, the config expects {config.expect_gpus}",
        value=n,
        limit=config.expect_gpus,
        hint="a GPU that fell off the bus shows in `dmesg` as 'fallen off the bus' / Xid 79"
        if sev is Severity.FAIL
        else None,
    )


@CHECKS.check(
    "topo.gpu_nic_path",
    "GPU's nearest active adapter beyond the GDR level: warn; on another NUMA node (SYS): fail",
)
def gpu_nic_path(topo: Topology) -> list[Finding]:
    """GPU <-> adapter placement (``nvidia-smi topo -m``'s matrix, NCCL_NET_GDR_LEVEL)."""
    out: list[Finding] = []
    if not topo.adapters:
        return out
    for pairing in topo.pairings:
        subject = f"GPU{pairing.gpu}"
        if pairing.path is None:
            out.append(
                Finding(
                    "topo.gpu_nic_path",
                    Severity.WARN,
                    subject,
                    "no RDMA adapter with an active port: this GPU cannot reach the fabric",
                    hint="see the port.state findings",
                )
            )
            continue
        names = ",".join(pairing.nearest)
        subj = f"{subject}/{pairing.nearest[0]}"
        if pairing.path is PathClass.SYS:
            out.append(
                Finding(
                    "topo.gpu_nic_path",
                    Severity.FAIL,
                    subj,
                    f"nearest active adapter ({names}) is SYS{_numa_nodes(topo, pairing)}: traffic crosses the SMP interconnect between NUMA nodes, and NCCL will not use GPUDirect RDMA",
                    value=pairing.path.value,
                    limit=topo.gdr_level.value,
                    hint="put an adapter on this GPU's NUMA node (ideally under its PCIe switch) or bind this rank to another GPU",
                )
            )
        elif not pairing.gdr_path:
            out.append(
                Finding(
                    "topo.gpu_nic_path",
                    Severity.WARN,
                    subj,
                    f"nearest active adapter ({names}) is {pairing.path.value}: NCCL will not use GPUDirect RDMA for this GPU by default (NCCL_NET_GDR_LEVEL={topo.gdr_level.value})",
                    value=pairing.path.value,
                    limit=topo.gdr_level.value,
                    hint="data is staged through host memory; move the adapter under the GPU's PCIe switch, or raise NCCL_NET_GDR_LEVEL if the platform's P2P through the root complex is known to be fast",
                )
            )
        else:
            out.append(
                Finding(
                    "topo.gpu_nic_path",
                    Severity.OK,
                    subj,
                    f"nearest active adapter ({names}) is {pairing.path.value}",
                    value=pairing.path.value,
                    limit=topo.gdr_level.value,
                )
            )
    return out


def _numa_nodes(topo: Topology, pairing: Pairing) -> str:
    """`` (GPU on NUMA node 1, adapter on NUMA node 0)``, or `` (NUMA locality unknown)`` when sysfs does not say."""
    gpu = next((g for g in topo.gpus if g.index == pairing.gpu), None)
    nics = sorted(
        {
            a.pci.numa_node
            for a in (topo.adapter(n) for n in pairing.nearest)
            if a and a.pci and a.pci.numa_node is not None
        }
    )
    if gpu is None or gpu.pci.numa_node is None or not nics:
        return " (NUMA locality unknown)"
    return (
        f" (GPU on NUMA node {gpu.pci.numa_node}, adapter on NUMA node {', '.join(map(str, nics))})"
    )


# --- PCIe --------------------------------------------------------------------------------------------


def _gen(speed: float | None) -> str:
    g = pcie_gen(speed)
    return f"Gen{g}" if g else f"{speed:g} GT/s" if speed else "?"


@CHECKS.check(
    "topo.pcie_width", "device trained narrower than it and its upstream port support: fail"
)
def pcie_width(subject: str, dev: PciDevice) -> Finding | None:
    """``lspci -vv``'s LnkSta width against LnkCap of the device and its upstream port."""
    link = dev.link
    if link.width is None or link.capable_width is None:
        return None
    if link.width < link.capable_width:
        return Finding(
            "topo.pcie_width",
            Severity.FAIL,
            subject,
            f"PCIe link trained at x{link.width}, device and slot support x{link.capable_width}",
            value=link.width,
            limit=link.capable_width,
            unit="lanes",
            hint=f"{dev.address}: reseat the card or riser, check the slot's bifurcation setting in the BIOS; `lspci -vv -s {dev.address}` shows LnkSta",
        )
    return Finding(
        "topo.pcie_width",
        Severity.OK,
        subject,
        f"PCIe link x{link.width}",
        value=link.width,
        limit=link.capable_width,
        unit="lanes",
    )


@CHECKS.check(
    "topo.pcie_speed", "device trained slower than it and its upstream port support: warn"
)
def pcie_speed(subject: str, dev: PciDevice, *, is_gpu: bool) -> Finding | None:
    """``lspci -vv``'s LnkSta speed against LnkCap (GPUs slow down when idle: the hint says so)."""
    link = dev.link
    if link.speed_gts is None or link.capable_speed_gts is None:
        return None
    if link.speed_gts < link.capable_speed_gts:
        hint = (
            "NVIDIA GPUs lower their PCIe speed when idle: check again under load (nvidia-smi -q shows 'Link Gen Current/Max')"
            if is_gpu
            else f"{dev.address}: check the slot, riser and BIOS PCIe speed setting; `lspci -vv -s {dev.address}` shows LnkSta"
        )
        return Finding(
            "topo.pcie_speed",
            Severity.WARN,
            subject,
            f"PCIe link at {_gen(link.speed_gts)} ({link.speed_gts:g} GT/s), device and slot support {_gen(link.capable_speed_gts)}",
            value=link.speed_gts,
            limit=link.capable_speed_gts,
            unit="GT/s",
            hint=hint,
        )
    return Finding(
        "topo.pcie_speed",
        Severity.OK,
        subject,
        f"PCIe link at {_gen(link.speed_gts)}",
        value=link.speed_gts,
        limit=link.capable_speed_gts,
        unit="GT/s",
    )


# --- GPUDirect RDMA and unreadable values ------------------------------------------------------------


@CHECKS.check("topo.gdr_module", "GPUs and adapters but no peer-memory module: warn")
def gdr_module(topo: Topology, config: TopoConfig) -> Finding | None:
    if not (topo.gpus and any(a.active for a in topo.adapters) and config.require_peermem):
        return None
    if topo.gdr.loaded:
        return Finding(
            "topo.gdr_module",
            Severity.OK,
            "node",
            f"peer memory module {topo.gdr.state} is loaded",
            value=topo.gdr.state,
        )
    what = (
        "could not tell whether a peer-memory module is loaded (no /sys/module in this tree)"
        if topo.gdr.state == "unknown"
        else "no peer-memory module (nvidia_peermem) is loaded"
    )
    return Finding(
        "topo.gdr_module",
        Severity.WARN,
        "node",
        f"{what}: GPUDirect RDMA needs it unless NCCL uses DMA-BUF",
        value=topo.gdr.state,
        limit="nvidia_peermem",
        hint="`modprobe nvidia_peermem` (and add it to /etc/modules-load.d); with the open GPU kernel modules and Linux >= 5.12 NCCL can use DMA-BUF instead",
    )


@CHECKS.check("topo.sysfs_value", "an attribute that mattered could not be read or parsed: warn")
def sysfs_value(topo: Topology) -> list[Finding]:
    """Values that could not be read (port state and rate have ``port.*`` findings of their own)."""
    return [
        Finding(
            "topo.sysfs_value",
            Severity.WARN,
            problem.shown,
            f"{problem.kind} value ({problem.detail}); treated as unknown",
            hint="the driver or a snapshot may be incomplete; compare with a healthy node",
        )
        for problem in topo.problems
        if not (
            "/ports/" in problem.path
            and problem.path.rsplit("/", 1)[-1] in ("state", "phys_state", "rate")
        )
    ]


def check_topology(
    topo: Topology, config: TopoConfig = TopoConfig(), ports: PortsConfig = PortsConfig()
) -> list[Finding]:
    """Every topo check, and the ports' ``port.state``/``port.rate``, in the order they are shown."""
    out = [*adapters(topo, config), *gpus(topo, config), *gpu_nic_path(topo)]
    devices = [(f"GPU{g.index}", g.pci, True) for g in topo.gpus]
    devices += [
        (a.name, a.pci, False)
        for a in topo.adapters
        if a.pci is not None and not ports.ignored(a.name)
    ]
    for subject, dev, is_gpu in devices:
        out += [*pcie_width(subject, dev), *pcie_speed(subject, dev, is_gpu=is_gpu)]
    out += check_ports(
        [p for a in topo.adapters for p in a.ports], ports, gpu_names=gpu_facing(topo)
    )
    out += [*gdr_module(topo, config), *sysfs_value(topo)]
    return out
