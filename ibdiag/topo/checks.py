"""Topology -> findings: is every GPU next to a usable adapter, are links and ports at full width and rate?

Check ids are stable (CI and dashboards key on them):

* ``topo.gpu_nic_path``   GPU without an active adapter at the GDR level (PXB) or closer: warn; SYS: fail
* ``topo.pcie_width``     device trained narrower than it and its upstream port support: fail
* ``topo.pcie_speed``     device trained slower than it and its upstream port support: warn
* ``topo.port_state``     RDMA port not ACTIVE / LinkUp: fail
* ``topo.port_rate``      active port slower than expected: fail
* ``topo.gdr_module``     GPUs and adapters but no peer-memory module: warn
* ``topo.adapters``       RDMA adapter count (no adapter is OK unless the config expects some)
* ``topo.gpus``           GPU count against the config's expectation
* ``topo.sysfs_value``    an attribute that mattered could not be read or parsed: warn
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from ibdiag.config import bounded
from ibdiag.errors import InputError
from ibdiag.parse import MAX_IB_RATE_GBPS, pcie_gen
from ibdiag.report.model import Finding, Severity
from ibdiag.topo.model import PathClass, PciDevice, Port, Topology
from ibdiag.topo.paths import parse_gdr_level


@dataclass(frozen=True)
class TopoConfig:
    """``[topo]`` settings."""

    expected_rate_gbps: float | None = bounded(None, low=0, low_open=True, high=MAX_IB_RATE_GBPS)
    """Rate every active port must reach. Default: the highest rate among this node's active ports of
    the same link layer (a node is normally cabled uniformly, so a slower port is the odd one out)."""
    expect_adapters: int | None = None
    """RDMA adapters this node must have; None: no expectation (no adapter at all is then OK)."""
    expect_gpus: int | None = None
    """GPUs this node must have; None: no expectation."""
    gdr_level: str = "PXB"
    """Farthest path class at which NCCL uses GPUDirect RDMA: NCCL_NET_GDR_LEVEL's default is PXB (NCCL docs)."""
    require_peermem: bool = True
    """Warn when GPUs and adapters are present but no peer-memory module is loaded (NVIDIA GPUDirect RDMA docs)."""
    ignore_adapters: tuple[str, ...] = ()
    """Adapter names (shell patterns, ``mlx5_1*``) whose ports are not judged: spares, unused storage ports."""

    def __post_init__(self) -> None:
        try:
            parse_gdr_level(self.gdr_level)
        except ValueError as e:
            raise InputError(f"config [topo] gdr_level: {e}", hint="use PIX, PXB, PHB, NODE or SYS") from None
        if self.expected_rate_gbps is not None and self.expected_rate_gbps <= 0:
            raise InputError("config [topo] expected_rate_gbps must be positive", hint="e.g. expected_rate_gbps = 400")

    @property
    def gdr_path_class(self) -> PathClass:
        return parse_gdr_level(self.gdr_level)

    def ignored(self, adapter: str) -> bool:
        return any(fnmatch.fnmatchcase(adapter, pat) for pat in self.ignore_adapters)


# --- ports (shared with `ibdiag counters`) ---------------------------------------------------------


def expected_rates(ports: list[Port] | tuple[Port, ...], config_rate: float | None) -> dict[str | None, float]:
    """Expected rate per link layer: the configured rate, else the best rate seen among active ports."""
    out: dict[str | None, float] = {}
    for p in ports:
        if not p.active or p.rate_gbps is None:
            continue
        if config_rate is not None:
            out[p.link_layer] = config_rate
        else:
            out[p.link_layer] = max(out.get(p.link_layer, 0.0), p.rate_gbps)
    return out


def check_port(port: Port, expected: dict[str | None, float], prefix: str = "topo") -> list[Finding]:
    """``<prefix>.port_state`` and ``<prefix>.port_rate`` for one port (``ibstat``'s State/Physical state/Rate)."""
    subject = f"{port.adapter}:{port.port}"
    out: list[Finding] = []
    if port.state is None or port.phys_state is None:
        out.append(
            Finding(
                f"{prefix}.port_state",
                Severity.WARN,
                subject,
                "port state could not be read",
                hint=f"check /sys/class/infiniband/{port.adapter}/ports/{port.port}/state and phys_state",
            )
        )
        return out
    if not port.active or not port.link_up:
        if port.phys_state in ("Polling", "Sleep"):
            why = "no link partner: check the cable/transceiver and the switch port"
        elif port.phys_state == "Disabled":
            why = "the port is administratively disabled (ibportstate / mlxlink)"
        elif port.phys_state == "LinkUp" and port.state == "INIT":
            why = "link is up but the subnet manager has not configured it: check that an SM (opensm/UFM) runs and sees this port"
        elif port.phys_state == "LinkUp":
            why = "link is up but the logical state is not ACTIVE: check the subnet manager"
        else:
            why = "check cabling, the switch port and `ibstat`/`mlxlink` for this port"
        out.append(
            Finding(
                f"{prefix}.port_state",
                Severity.FAIL,
                subject,
                f"port is {port.state}/{port.phys_state}, not ACTIVE/LinkUp",
                value=f"{port.state}/{port.phys_state}",
                limit="ACTIVE/LinkUp",
                hint=why,
            )
        )
        return out
    out.append(Finding(f"{prefix}.port_state", Severity.OK, subject, "port is ACTIVE/LinkUp", value="ACTIVE/LinkUp"))
    want = expected.get(port.link_layer)
    if port.rate_gbps is None:
        out.append(Finding(f"{prefix}.port_rate", Severity.WARN, subject, "port rate could not be read", hint=f"check /sys/class/infiniband/{port.adapter}/ports/{port.port}/rate"))
    elif want is not None and port.rate_gbps < want:
        out.append(
            Finding(
                f"{prefix}.port_rate",
                Severity.FAIL,
                subject,
                f"port runs at {port.rate_gbps:g} Gb/s ({port.lanes or '?'}X {port.lane_speed or '?'}), expected {want:g} Gb/s",
                value=port.rate_gbps,
                limit=want,
                unit="Gb/s",
                hint="a port that trained slow or narrow: reseat or replace the cable/transceiver, check the switch port (mlxlink -d <dev> shows lanes and FEC)",
            )
        )
    else:
        out.append(Finding(f"{prefix}.port_rate", Severity.OK, subject, f"port runs at {port.rate_gbps:g} Gb/s", value=port.rate_gbps, limit=want, unit="Gb/s"))
    return out


# --- PCIe --------------------------------------------------------------------------------------------


def _gen(speed: float | None) -> str:
    g = pcie_gen(speed)
    return f"Gen{g}" if g else f"{speed:g} GT/s" if speed else "?"


def check_pcie(subject: str, dev: PciDevice, *, is_gpu: bool) -> list[Finding]:
    link = dev.link
    out: list[Finding] = []
    if link.width is not None and link.capable_width is not None:
        if link.width < link.capable_width:
            out.append(
                Finding(
                    "topo.pcie_width",
                    Severity.FAIL,
                    subject,
                    f"PCIe link trained at x{link.width}, device and slot support x{link.capable_width}",
                    value=link.width,
                    limit=link.capable_width,
                    unit="lanes",
                    hint=f"{dev.address}: reseat the card or riser, check the slot's bifurcation setting in the BIOS; `lspci -vv -s {dev.address}` shows LnkSta",
                )
            )
        else:
            out.append(Finding("topo.pcie_width", Severity.OK, subject, f"PCIe link x{link.width}", value=link.width, limit=link.capable_width, unit="lanes"))
    if link.speed_gts is not None and link.capable_speed_gts is not None:
        if link.speed_gts < link.capable_speed_gts:
            hint = (
                "NVIDIA GPUs lower their PCIe speed when idle: check again under load (nvidia-smi -q shows 'Link Gen Current/Max')"
                if is_gpu
                else f"{dev.address}: check the slot, riser and BIOS PCIe speed setting; `lspci -vv -s {dev.address}` shows LnkSta"
            )
            out.append(
                Finding(
                    "topo.pcie_speed",
                    Severity.WARN,
                    subject,
                    f"PCIe link at {_gen(link.speed_gts)} ({link.speed_gts:g} GT/s), device and slot support {_gen(link.capable_speed_gts)}",
                    value=link.speed_gts,
                    limit=link.capable_speed_gts,
                    unit="GT/s",
                    hint=hint,
                )
            )
        else:
            out.append(Finding("topo.pcie_speed", Severity.OK, subject, f"PCIe link at {_gen(link.speed_gts)}", value=link.speed_gts, limit=link.capable_speed_gts, unit="GT/s"))
    return out


# --- the whole node ----------------------------------------------------------------------------------


def check_topology(topo: Topology, config: TopoConfig = TopoConfig()) -> list[Finding]:
    out: list[Finding] = []
    judged = [a for a in topo.adapters if not config.ignored(a.name)]

    n_adapters = len(topo.adapters)
    if config.expect_adapters is not None and n_adapters < config.expect_adapters:
        out.append(
            Finding(
                "topo.adapters",
                Severity.FAIL,
                "node",
                f"{n_adapters} RDMA adapter(s) found, the config expects {config.expect_adapters}",
                value=n_adapters,
                limit=config.expect_adapters,
                hint="check `lspci | grep -i mellanox` and that the driver is loaded (mlx5_ib); a missing adapter is often a dead card or firmware",
            )
        )
    elif n_adapters == 0:
        out.append(Finding("topo.adapters", Severity.OK, "node", "no RDMA adapter on this node (/sys/class/infiniband is empty or absent)", value=0))
    else:
        out.append(Finding("topo.adapters", Severity.OK, "node", f"{n_adapters} RDMA adapter(s)", value=n_adapters, limit=config.expect_adapters))

    if config.expect_gpus is not None:
        n = len(topo.gpus)
        sev = Severity.FAIL if n != config.expect_gpus else Severity.OK
        out.append(
            Finding(
                "topo.gpus",
                sev,
                "node",
                f"{n} NVIDIA GPU(s) found, the config expects {config.expect_gpus}",
                value=n,
                limit=config.expect_gpus,
                hint="a GPU that fell off the bus shows in `dmesg` as 'fallen off the bus' / Xid 79" if sev is Severity.FAIL else None,
            )
        )

    # GPU <-> adapter placement.
    active = [a for a in topo.adapters if a.active]
    for pairing in topo.pairings:
        subject = f"GPU{pairing.gpu}"
        if not topo.adapters:
            break
        if pairing.path is None:
            out.append(
                Finding(
                    "topo.gpu_nic_path",
                    Severity.WARN,
                    subject,
                    "no RDMA adapter with an active port: this GPU cannot reach the fabric",
                    hint="see the topo.port_state findings",
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
                    f"nearest active adapter ({names}) is across the inter-socket link (SYS): no GPUDirect RDMA, and traffic crosses sockets",
                    value=pairing.path.value,
                    limit=topo.gdr_level.value,
                    hint="put an adapter on this GPU's socket (ideally under its PCIe switch) or bind this rank to another GPU",
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
            out.append(Finding("topo.gpu_nic_path", Severity.OK, subj, f"nearest active adapter ({names}) is {pairing.path.value}", value=pairing.path.value, limit=topo.gdr_level.value))

    # PCIe links of GPUs and adapters.
    for gpu in topo.gpus:
        out.extend(check_pcie(f"GPU{gpu.index}", gpu.pci, is_gpu=True))
    for adapter in judged:
        if adapter.pci is not None:
            out.extend(check_pcie(adapter.name, adapter.pci, is_gpu=False))

    # Ports.
    ports = [p for a in judged for p in a.ports]
    expected = expected_rates(ports, config.expected_rate_gbps)
    for p in ports:
        out.extend(check_port(p, expected))

    # GPUDirect RDMA module.
    if topo.gpus and active and config.require_peermem:
        if topo.gdr.loaded:
            out.append(Finding("topo.gdr_module", Severity.OK, "node", f"peer memory module {topo.gdr.state} is loaded", value=topo.gdr.state))
        else:
            what = "could not tell whether a peer-memory module is loaded (no /sys/module in this tree)" if topo.gdr.state == "unknown" else "no peer-memory module (nvidia_peermem) is loaded"
            out.append(
                Finding(
                    "topo.gdr_module",
                    Severity.WARN,
                    "node",
                    f"{what}: GPUDirect RDMA needs it unless NCCL uses DMA-BUF",
                    value=topo.gdr.state,
                    limit="nvidia_peermem",
                    hint="`modprobe nvidia_peermem` (and add it to /etc/modules-load.d); with the open GPU kernel modules and Linux >= 5.12 NCCL can use DMA-BUF instead",
                )
            )

    # Values that could not be read (port state and rate already have findings of their own).
    for problem in topo.problems:
        if problem.path.rsplit("/", 1)[-1] in ("state", "phys_state", "rate") and "/ports/" in problem.path:
            continue
        out.append(
            Finding(
                "topo.sysfs_value",
                Severity.WARN,
                f"/sys/{problem.path}",
                f"{problem.kind} value ({problem.detail}); treated as unknown",
                hint="the driver or a snapshot may be incomplete; compare with a healthy node",
            )
        )
    return out
