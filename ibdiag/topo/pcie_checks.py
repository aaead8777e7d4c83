"""PCIe settings along every GPU -> nearest-adapter path: ACS redirect, the IOMMU's mode, ATS, MPS, MRRS.

GPUDirect RDMA moves data peer to peer: the adapter reads and writes GPU memory through the PCIe switch
they share. ACS P2P Request/Completion Redirect on a switch port sends those requests up to the root
complex instead (slow, and with a translating IOMMU often failing: the "disable ACS" fix NCCL's
troubleshooting guide gives); an IOMMU in DMA (translated) mode puts every peer-to-peer address through
it unless the adapter's ATS caches translations. Ids: ``topo.pcie_acs``, ``topo.iommu``,
``topo.pcie_mps``, ``topo.pcie_mrrs`` (docs/configuration-checks.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ibdiag.findings.model import Finding, Severity
from ibdiag.node.model import PciDevice, Topology
from ibdiag.node.pcicfg import PcieFunction, bridge_path, read_function
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.topo.checks import CHECKS

#: Smallest Max Read Request an adapter should run with: below it DMA reads (GPUDirect RDMA sends read
#: GPU memory) are cut into many small requests. The PCIe default after reset is 512 bytes.
MIN_MRRS = 512


@dataclass(frozen=True)
class PciePath:
    gpu: int
    adapter: str
    path: str
    gpu_address: str
    adapter_address: str
    between: tuple[str, ...]
    """Switch ports below the GPU's and the adapter's deepest common bridge: where ACS acts."""
    gpu_bridges: tuple[str, ...]
    """The GPU's bridges up to its root port (its payloads must fit each)."""
    adapter_bridges: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "adapter": self.adapter,
            "path": self.path,
            "between": list(self.between),
        }


@dataclass(frozen=True)
class PcieState:
    paths: tuple[PciePath, ...] = ()
    functions: tuple[PcieFunction, ...] = ()

    def function(self, address: str) -> PcieFunction | None:
        return next((f for f in self.functions if f.address == address), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "paths": [p.to_json() for p in self.paths],
            "functions": [f.to_json() for f in self.functions],
        }


def _between(a: PciDevice, b: PciDevice) -> tuple[str, ...]:
    common = 0
    for x, y in zip(a.bridges, b.bridges, strict=False):
        if x != y:
            break
        common += 1
    if common == 0:
        return ()  # different root ports: the traffic turns in the root complex anyway
    return tuple(dict.fromkeys([*a.bridges[common:], *b.bridges[common:]]))


def read_pcie(sysfs: SysfsRoot, topo: Topology) -> PcieState:
    """Every GPU -> nearest adapter path and the configuration of each function on it."""
    paths: list[PciePath] = []
    funcs: dict[str, PcieFunction] = {}

    def read(dev: PciDevice, address: str, role: str) -> None:
        if address not in funcs:
            path = (
                dev.sysfs_path if address == dev.address else bridge_path(dev.sysfs_path, address)
            )
            funcs[address] = read_function(sysfs, path, address, role)

    for pairing in topo.pairings:
        gpu = next(g for g in topo.gpus if g.index == pairing.gpu)
        for name in pairing.nearest:
            adapter = topo.adapter(name)
            if adapter is None or adapter.pci is None or pairing.path is None:
                continue
            nic = adapter.pci
            read(gpu.pci, gpu.pci.address, "gpu")
            read(nic, nic.address, "adapter")
            for dev in (gpu.pci, nic):
                for bridge in dev.bridges:
                    read(dev, bridge, "bridge")
            paths.append(
                PciePath(
                    pairing.gpu,
                    name,
                    pairing.path.value,
                    gpu.pci.address,
                    nic.address,
                    _between(gpu.pci, nic),
                    gpu.pci.bridges,
                    nic.bridges,
                )
            )
    return PcieState(tuple(paths), tuple(funcs.values()))


@CHECKS.check(
    "topo.pcie_acs", "ACS P2P redirect on a switch port between a GPU and its nearest adapter: fail"
)
def pcie_acs(state: PcieState) -> list[Finding]:
    out = []
    for p in state.paths:
        if not p.between:
            continue
        bridges = [state.function(b) for b in p.between]
        known = [f for f in bridges if f and f.config and f.config.extended]
        redirecting = [f for f in known if f.config and f.config.acs_redirect]
        subject = f"GPU{p.gpu}/{p.adapter}"
        if redirecting:
            names = ", ".join(
                f"{f.address} ({','.join(n for n in f.config.acs_names() if n in ('ReqRedir', 'CmpltRedir'))})"
                for f in redirecting
                if f.config
            )
            bdfs = ";".join(f.address for f in redirecting)
            out.append(
                Finding(
                    "topo.pcie_acs",
                    Severity.FAIL,
                    subject,
                    f"ACS redirect is on at switch port(s) {names} between GPU{p.gpu} and {p.adapter} ({p.path}): "
                    "GPUDirect RDMA traffic is sent up to the root complex instead of across the switch — slow, "
                    "and with a translating IOMMU it can fail or hang",
                    value="redirect",
                    limit="off",
                    hint=f"disable ACS in the BIOS, or boot with pci=disable_acs_redir={bdfs} (Linux >= 5.1), or "
                    f"`setpci -s {redirecting[0].address} ECAP_ACS+6.w=0000` (until reboot; not in a VM that needs ACS isolation)",
                )
            )
        elif known and len(known) == len(bridges):
            out.append(
                Finding(
                    "topo.pcie_acs",
                    Severity.OK,
                    subject,
                    f"no ACS redirect on {len(known)} switch port(s)",
                )
            )
    return out


@CHECKS.check(
    "topo.iommu",
    "IOMMU in DMA (translated) mode for a GPU or adapter that does GPUDirect RDMA: warn",
)
def iommu(state: PcieState) -> list[Finding]:
    out = []
    for f in state.functions:
        if f.role == "bridge" or f.iommu_type is None:
            continue
        if f.iommu_type not in ("DMA", "DMA-FQ"):
            out.append(
                Finding(
                    "topo.iommu",
                    Severity.OK,
                    f.address,
                    f"IOMMU group {f.iommu_group}: {f.iommu_type}",
                )
            )
            continue
        ats = f.config.ats_enabled if f.config else None
        ats_text = (
            "ATS is enabled on it (translations cached, translated peer-to-peer possible)"
            if ats
            else "ATS is off"
            if ats is False
            else "it has no ATS capability (or it is not visible)"
        )
        out.append(
            Finding(
                "topo.iommu",
                Severity.WARN,
                f"{f.role} {f.address}",
                f"the IOMMU translates DMA for {f.role} {f.address} (group {f.iommu_group}, type {f.iommu_type}); "
                f"{ats_text}: peer-to-peer addresses go through the IOMMU, which costs GPUDirect RDMA bandwidth or breaks it",
                value=f.iommu_type,
                limit="identity",
                hint="boot with iommu=pt (passthrough: type identity), as NVIDIA's GPUDirect RDMA guide advises on bare metal; "
                "where DMA translation is required (VMs), enable ATS on the adapter and ACS Direct Translated P2P",
            )
        )
    return out


@CHECKS.check(
    "topo.pcie_mps",
    "a GPU or adapter uses a larger Max Payload Size than a bridge on its path: fail",
)
def pcie_mps(state: PcieState) -> list[Finding]:
    out = []
    done: set[str] = set()
    for p in state.paths:
        for address, chain in (
            (p.gpu_address, p.gpu_bridges),
            (p.adapter_address, p.adapter_bridges),
        ):
            dev = state.function(address)
            if address in done or dev is None or dev.config is None or dev.config.mps is None:
                continue
            done.add(address)
            bridges = [state.function(b) for b in chain]
            smaller = [
                b
                for b in bridges
                if b and b.config and b.config.mps and b.config.mps < dev.config.mps
            ]
            if smaller:
                least = min(b.config.mps for b in smaller if b.config and b.config.mps)
                out.append(
                    Finding(
                        "topo.pcie_mps",
                        Severity.FAIL,
                        f"{dev.role} {address}",
                        f"{dev.role} {address} sends {dev.config.mps}-byte payloads but bridge(s) "
                        f"{', '.join(b.address for b in smaller)} accept {least}: its TLPs are malformed there (AER errors, drops)",
                        value=dev.config.mps,
                        limit=least,
                        unit="bytes",
                        hint=f"boot with pci=pcie_bus_safe (one MPS for the hierarchy), or `setpci` the device's MPS to {least}",
                    )
                )
    return out


@CHECKS.check("topo.pcie_mrrs", "an RDMA adapter's Max Read Request Size below 512 bytes: warn")
def pcie_mrrs(state: PcieState) -> list[Finding]:
    out = []
    for f in state.functions:
        if f.role != "adapter" or f.config is None or f.config.mrrs is None:
            continue
        if f.config.mrrs < MIN_MRRS:
            out.append(
                Finding(
                    "topo.pcie_mrrs",
                    Severity.WARN,
                    f"adapter {f.address}",
                    f"adapter {f.address} reads with a Max Read Request Size of {f.config.mrrs} bytes: DMA reads "
                    "(the adapter fetching GPU or host memory to send) are cut into many small requests",
                    value=f.config.mrrs,
                    limit=4096,
                    unit="bytes",
                    hint=f"set MRRS to 4096: `setpci -s {f.address} CAP_EXP+8.w=5000:7000` (until reboot), or the BIOS's PCIe setting",
                )
            )
    return out
