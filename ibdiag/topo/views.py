"""Views of ``ibdiag topo``'s result: the ``nvidia-smi topo -m``-style matrix, adapter and pairing tables,
CSV rows and Prometheus metrics (:func:`outputs`). Pure functions of the model; cli/ prints what they return."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from ibdiag.node.model import KernelModule, Pairing, PcieLink, Topology, port_name
from ibdiag.output.outputs import Outputs, TableLayout, added_metrics, added_tables
from ibdiag.output.prom import Metric, PromSample
from ibdiag.parse import format_cpulist, pcie_gen
from ibdiag.topo.command import TopoResult

if TYPE_CHECKING:  # rich only where a table is drawn: `ibdiag topo -o json` does not import it
    from rich.console import RenderableType
    from rich.table import Table


def outputs(result: TopoResult) -> Outputs:
    """The result in every format ``ibdiag topo`` writes."""
    topo = result.topology
    return Outputs(
        result.report,
        result.meta,
        table=partial(table_items, result),
        csv=lambda: (CSV_HEADER, csv_rows(topo)),
        prom=lambda: prom_metrics(topo) + added_metrics(result.additions),
    )


def table_items(result: TopoResult, layout: TableLayout) -> list[RenderableType]:
    """The summary, the matrix and its legend, the pairing and adapter tables, then the findings."""
    from rich.text import Text  # lazy: rich, for the table output only (start-up of -o json)

    from ibdiag.output.table import findings_block  # lazy: rich behind it, as above

    topo, nccl = result.topology, result.nccl
    items: list[RenderableType] = [Text(line, no_wrap=True) for line in summary_lines(topo)]
    if nccl:
        names = ", ".join(k for k, _ in nccl.variables)
        items.append(Text(f"NCCL settings judged ({nccl.source}): {names}", no_wrap=True))
    matrix = matrix_text(topo)
    if matrix:
        items += [Text(""), Text(matrix, no_wrap=True), Text(""), Text(LEGEND, style="dim")]
    if topo.gpus and topo.adapters:
        items.append(pairing_table(topo))
    if topo.adapters:
        items.append(adapters_table(topo))
    items += added_tables(result.additions, layout)
    items += findings_block(result.report, strict=layout.strict, width=layout.width)
    return items


PATH_STYLE = {"PIX": "green", "PXB": "green", "PHB": "yellow", "NODE": "yellow", "SYS": "red"}


def matrix_text(topo: Topology) -> str:
    """GPU rows x NIC columns with CPU and NUMA affinity, then the NIC legend (``nvidia-smi topo -m``).

    Columns are separated by at least two spaces and padded so the block reads as a table.
    """
    if not topo.gpus:
        return ""
    nic_names = [f"NIC{i}" for i in range(len(topo.adapters))]
    header = ["", *nic_names, "CPU Affinity", "NUMA Affinity"]
    rows = [header]
    for gpu in topo.gpus:
        cells = [f"GPU{gpu.index}"]
        for adapter in topo.adapters:
            path = topo.path(gpu.index, adapter.name)
            cells.append(path.value if path else "?")
        cells.append(format_cpulist(gpu.pci.local_cpus) or "N/A")
        cells.append("N/A" if gpu.pci.numa_node is None else str(gpu.pci.numa_node))
        rows.append(cells)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in rows]
    if topo.adapters:
        lines.append("")
        lines.append("NIC Legend:")
        lines.extend(f"  {nic}: {a.name}" for nic, a in zip(nic_names, topo.adapters, strict=False))
    return "\n".join(lines)


LEGEND = (
    "PIX = at most one PCIe bridge; PXB = several PCIe bridges, no host bridge; PHB = through a PCIe host bridge (CPU);\n"
    "NODE = across host bridges within a NUMA node; SYS = PCIe plus the SMP interconnect between NUMA nodes (or NUMA unknown);\n"
    "NICk numbered in the driver's device order (mlx5_0, mlx5_1, ..., mlx5_10), as nvidia-smi topo -m numbers them"
)


def _link(link: PcieLink) -> str:
    """``Gen5 x16``; ``Gen5 x8 of x16`` / ``Gen1 of Gen5 x16`` when below what both ends support."""
    if link.width is None and link.speed_gts is None:
        return "-"

    def gen(speed: float | None) -> str:
        g = pcie_gen(speed)
        return f"Gen{g}" if g else (f"{speed:g}GT/s" if speed else "?")

    cur = f"{gen(link.speed_gts)} x{link.width if link.width is not None else '?'}"
    slow = (
        link.speed_gts is not None
        and link.capable_speed_gts is not None
        and link.speed_gts < link.capable_speed_gts
    )
    narrow = (
        link.width is not None
        and link.capable_width is not None
        and link.width < link.capable_width
    )
    if slow or narrow:
        return f"{cur} of {gen(link.capable_speed_gts)} x{link.capable_width or '?'}"
    return cur


def adapters_table(topo: Topology) -> Table:
    from rich.table import Table
    from rich.text import Text

    t = Table(title="RDMA adapters and ports (ibstat)", title_justify="left")
    roce = any(p.link_layer == "Ethernet" for a in topo.adapters for p in a.ports)
    cols = [
        "adapter",
        "pci",
        "numa",
        "PCIe",
        "fw",
        "port",
        "state",
        "rate",
        "layer",
        "lid",
        "netdev",
    ] + (["RoCE GID types"] if roce else [])
    for col in cols:
        t.add_column(col, no_wrap=True)
    for a in topo.adapters:
        first = True
        for p in a.ports or [None]:
            head = (
                [
                    a.name,
                    a.pci.address if a.pci else "-",
                    _num(a.pci.numa_node if a.pci else None),
                    _link(a.pci.link) if a.pci else "-",
                    a.fw_ver or "-",
                ]
                if first
                else [""] * 5
            )
            first = False
            if p is None:
                t.add_row(*head, "-", "no ports", *[""] * (len(cols) - 7))
                continue
            state = Text(
                f"{p.state or '?'}/{p.phys_state or '?'}",
                style="green" if p.active and p.link_up else "bold red",
            )
            rate = f"{p.rate_gbps:g} Gb/s" if p.rate_gbps is not None else "?"
            if p.lanes:
                rate += f" {p.lanes}X{(' ' + p.lane_speed) if p.lane_speed else ''}"
            layer = {"InfiniBand": "IB", "Ethernet": "RoCE"}.get(
                p.link_layer or "", p.link_layer or "?"
            )
            lid = "-" if p.lid is None or p.link_layer == "Ethernet" else f"0x{p.lid:x}"
            row: list[str | Text] = [*head, str(p.port), state, rate, layer, lid, p.netdev or "-"]
            if roce:
                row.append(", ".join(p.gid_types) if p.link_layer == "Ethernet" else "")
            t.add_row(*row)
    return t


def _num(v: int | None) -> str:
    return "-" if v is None else str(v)


def nearest_text(topo: Topology, pairing: Pairing) -> str:
    """``NIC0 mlx5_0:1, NIC1 mlx5_1:1``: every port tied for nearest, with its matrix column."""
    return ", ".join(f"NIC{topo.nic_index(p.adapter)} {port_name(p)}" for p in pairing.ports) or "-"


def pairing_table(topo: Topology) -> Table:
    from rich.table import Table
    from rich.text import Text

    t = Table(
        title="GPU -> nearest active port(s), all that tie (what NCCL will use)",
        title_justify="left",
    )
    for col in ("gpu", "pci", "numa", "PCIe", "nearest port(s)", "path", "GPUDirect RDMA"):
        t.add_column(col, no_wrap=True)
    for gpu, pairing in zip(topo.gpus, topo.pairings, strict=False):
        path = pairing.path.value if pairing.path else "-"
        if pairing.gdr:
            gdr = Text("yes", style="green")
        elif pairing.gdr_path:
            gdr = Text("no (no peer-memory module)", style="yellow")
        elif pairing.path is None:
            gdr = Text("no (no active adapter)", style="bold red")
        else:
            gdr = Text(f"no (path > {topo.gdr_level.value})", style="yellow")
        t.add_row(
            f"GPU{gpu.index}",
            gpu.pci.address,
            _num(gpu.pci.numa_node),
            _link(gpu.pci.link),
            nearest_text(topo, pairing),
            Text(path, style=PATH_STYLE.get(path, "")),
            gdr,
        )
    return t


def summary_lines(topo: Topology) -> list[str]:
    lines = [
        f"NUMA nodes: {len(topo.numa_nodes)}   GPUs: {len(topo.gpus)}   NVSwitches: {len(topo.nvswitches)}   RDMA adapters: {len(topo.adapters)}"
        f"   GPUDirect RDMA module: {topo.gdr.state}"
        + (f" (NVIDIA driver {topo.gdr.nvidia_driver})" if topo.gdr.nvidia_driver else ""),
    ]
    lines.append(software_line(topo))
    if not topo.adapters:
        lines.append("No RDMA adapter on this node: nothing under /sys/class/infiniband.")
    if not topo.gpus:
        lines.append("No NVIDIA GPU on this node.")
    if topo.nccl_ib_hca:
        lines.append(
            f"NCCL_IB_HCA with every port nearest to a GPU (ties included): {topo.nccl_ib_hca}"
        )
    return lines


def module_text(module: KernelModule | None) -> str:
    """``mlx5_core 24.10-1.1.4``, ``mlx5_core srcversion 0716E17594E7E6D0EC026C5``, ``rdma_rxe, no
    version or srcversion``; ``unknown module`` when none was found."""
    if module is None:
        return "unknown module"
    if module.version_kind == "version":
        return f"{module.name} {module.version}"
    if module.version_kind == "srcversion":
        return f"{module.name} srcversion {module.srcversion}"
    return f"{module.name}, no version or srcversion"


def software_line(topo: Topology) -> str:
    """``Kernel: 6.8.0-45-generic   RDMA driver: mlx5_core 24.10-1.1.4 (8 adapters)``: the software
    versions that make two nodes behave differently (fleet report compares them)."""
    kernel = topo.kernel_release or "unknown"
    if (
        topo.kernel_release
        and topo.kernel_release_source
        and topo.kernel_release_source != "/proc/sys/kernel/osrelease"
    ):
        kernel += f" (from the {topo.kernel_release_source})"
    line = f"Kernel: {kernel}"
    groups: dict[str, list[str]] = {}
    for a in topo.adapters:
        groups.setdefault(module_text(a.module), []).append(a.name)
    if groups:
        parts = []
        for text, names in groups.items():
            who = ", ".join(names) if len(names) <= 3 else f"{len(names)} adapters"
            parts.append(f"{text} ({who})")
        line += "   RDMA driver: " + "; ".join(parts)
    return line


# --- machine formats -----------------------------------------------------------------------------------

CSV_HEADER = (
    "gpu",
    "gpu_pci",
    "gpu_numa_node",
    "adapter",
    "adapter_pci",
    "adapter_numa_node",
    "path",
    "nearest",
    "gdr",
    "nic_index",
)


def csv_rows(topo: Topology) -> list[dict[str, Any]]:
    """One row per GPU x adapter pair (long form); ``nic_index`` (last, so earlier columns keep their
    place) is k of the matrix's ``NICk``."""
    rows = []
    for gpu, pairing in zip(topo.gpus, topo.pairings, strict=False):
        for nic_index, a in enumerate(topo.adapters):
            path = topo.path(gpu.index, a.name)
            nearest = a.name in pairing.nearest
            rows.append(
                {
                    "gpu": gpu.index,
                    "gpu_pci": gpu.pci.address,
                    "gpu_numa_node": gpu.pci.numa_node,
                    "adapter": a.name,
                    "adapter_pci": a.pci.address if a.pci else None,
                    "adapter_numa_node": a.pci.numa_node if a.pci else None,
                    "path": path.value if path else None,
                    "nearest": int(nearest),
                    "gdr": int(nearest and pairing.gdr),
                    "nic_index": nic_index,
                }
            )
    return rows


def prom_metrics(topo: Topology) -> list[Metric]:
    return [
        *_inventory_metrics(topo),
        *_link_metrics(topo),
        *_gdr_metrics(topo),
        *_info_metrics(topo),
    ]


def _inventory_metrics(topo: Topology) -> list[Metric]:
    """How many GPUs, NVSwitches and RDMA adapters."""
    return [
        Metric(
            "ibdiag_topo_gpus",
            "NVIDIA GPUs found in sysfs.",
            "gauge",
            (PromSample({}, len(topo.gpus)),),
        ),
        Metric(
            "ibdiag_topo_nvswitches",
            "NVSwitch devices found in sysfs.",
            "gauge",
            (PromSample({}, len(topo.nvswitches)),),
        ),
        Metric(
            "ibdiag_topo_rdma_adapters",
            "RDMA adapters under /sys/class/infiniband.",
            "gauge",
            (PromSample({}, len(topo.adapters)),),
        ),
    ]


def _link_metrics(topo: Topology) -> list[Metric]:
    """RDMA ports (active, rate) and the PCIe width of GPUs and adapters."""
    port_labels = [
        ({"device": p.adapter, "port": str(p.port), "link_layer": p.link_layer or ""}, p)
        for a in topo.adapters
        for p in a.ports
    ]
    return [
        Metric(
            "ibdiag_topo_port_active",
            "1 when the RDMA port is ACTIVE and LinkUp.",
            "gauge",
            tuple(
                PromSample(labels, 1 if p.active and p.link_up else 0) for labels, p in port_labels
            ),
        ),
        Metric(
            "ibdiag_topo_port_rate_bytes_per_second",
            "RDMA port rate (sysfs rate), bytes per second.",
            "gauge",
            tuple(
                PromSample(labels, p.rate_gbps * 1e9 / 8)
                for labels, p in port_labels
                if p.rate_gbps is not None
            ),
        ),
        Metric(
            "ibdiag_topo_pcie_width_lanes",
            "Current PCIe link width of GPUs and RDMA adapters.",
            "gauge",
            tuple(
                [
                    PromSample({"device": f"GPU{g.index}", "pci": g.pci.address}, g.pci.link.width)
                    for g in topo.gpus
                    if g.pci.link.width is not None
                ]
                + [
                    PromSample({"device": a.name, "pci": a.pci.address}, a.pci.link.width)
                    for a in topo.adapters
                    if a.pci and a.pci.link.width is not None
                ]
            ),
        ),
    ]


def _gdr_metrics(topo: Topology) -> list[Metric]:
    """GPUDirect RDMA per GPU, and whether the peer-memory module is loaded."""
    return [
        Metric(
            "ibdiag_topo_gpu_gdr",
            "1 when NCCL will use GPUDirect RDMA for the GPU (path within the GDR level and peer memory loaded).",
            "gauge",
            tuple(PromSample({"gpu": str(p.gpu)}, int(p.gdr)) for p in topo.pairings),
        ),
        # A state is a 0/1 value, never a label value: a series must not change its labels when the state does.
        Metric(
            "ibdiag_topo_peermem_loaded",
            "1 when nvidia_peermem or nv_peer_mem is loaded.",
            "gauge",
            (PromSample({}, int(topo.gdr.loaded)),),
        ),
    ]


def _info_metrics(topo: Topology) -> list[Metric]:
    """Non-numeric facts as labels of value-1 metrics: adapters, kernel release, RDMA drivers."""
    return [
        Metric(
            "node_infiniband_info",
            "Non-numeric data from /sys/class/infiniband/<device>, value is always 1 (node_exporter's infiniband collector).",
            "gauge",
            tuple(
                PromSample(
                    {
                        "board_id": a.board_id or "",
                        "device": a.name,
                        "firmware_version": a.fw_ver or "",
                        "hca_type": a.hca_type or "",
                    },
                    1,
                )
                for a in topo.adapters
            ),
        ),
        # Versions are labels of info metrics (value 1), as node_exporter's node_uname_info and
        # node_infiniband_info carry the release and firmware_version.
        Metric(
            "ibdiag_topo_kernel_info",
            "The node's kernel release (uname -r), value is always 1; no sample when it is unknown.",
            "gauge",
            (PromSample({"release": topo.kernel_release}, 1),) if topo.kernel_release else (),
        ),
        Metric(
            "ibdiag_topo_rdma_driver_info",
            "Kernel module of each RDMA adapter's driver and its version (version_kind: version, srcversion or unknown), value is always 1.",
            "gauge",
            tuple(
                PromSample(
                    {
                        "device": a.name,
                        "module": a.module.name if a.module else "",
                        "version": (a.module.version_text or "") if a.module else "",
                        "version_kind": (a.module.version_kind or "unknown")
                        if a.module
                        else "unknown",
                    },
                    1,
                )
                for a in topo.adapters
            ),
        ),
    ]
