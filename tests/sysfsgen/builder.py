"""A small writer of sysfs-shaped trees. Values are written exactly as the kernel prints them."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

#: IB port counters (``ports/N/counters``; kernel drivers/infiniband/core/sysfs.c) with zero defaults.
IB_COUNTERS = (
    "VL15_dropped",
    "excessive_buffer_overrun_errors",
    "link_downed",
    "link_error_recovery",
    "local_link_integrity_errors",
    "multicast_rcv_packets",
    "multicast_xmit_packets",
    "port_rcv_constraint_errors",
    "port_rcv_data",
    "port_rcv_errors",
    "port_rcv_packets",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "port_xmit_constraint_errors",
    "port_xmit_data",
    "port_xmit_discards",
    "port_xmit_packets",
    "port_xmit_wait",
    "symbol_error",
    "unicast_rcv_packets",
    "unicast_xmit_packets",
)

#: mlx5 per-port ``hw_counters`` (drivers/infiniband/hw/mlx5/counters.c), zero defaults.
MLX5_HW_COUNTERS = (
    "duplicate_request",
    "implied_nak_seq_err",
    "local_ack_timeout_err",
    "np_cnp_sent",
    "np_ecn_marked_roce_packets",
    "out_of_buffer",
    "out_of_sequence",
    "packet_seq_err",
    "req_cqe_error",
    "req_cqe_flush_error",
    "req_remote_access_errors",
    "req_remote_invalid_request",
    "resp_cqe_error",
    "resp_cqe_flush_error",
    "resp_local_length_error",
    "resp_remote_access_errors",
    "rnr_nak_retry_err",
    "roce_adp_retrans",
    "roce_adp_retrans_to",
    "roce_slow_restart",
    "roce_slow_restart_cnps",
    "roce_slow_restart_trans",
    "rp_cnp_handled",
    "rp_cnp_ignored",
    "rx_atomic_requests",
    "rx_icrc_encapsulated",
    "rx_read_requests",
    "rx_write_requests",
)


@dataclass
class Tree:
    """Writes ``<root>/sys/...`` (and ``<root>/proc/...`` for the few facts only procfs has)."""

    root: Path

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        (self.root / "sys").mkdir(parents=True, exist_ok=True)

    def p(self, rel: str) -> Path:
        return self.root / "sys" / rel

    def file(self, rel: str, value: object) -> None:
        path = self.p(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{value}\n")

    def blob(self, rel: str, data: bytes) -> None:
        """A binary attribute (a PCI function's ``config``), byte for byte."""
        path = self.p(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    def iommu_group(self, device_rel: str, group: int, kind: str) -> None:
        """``<device>/iommu_group -> kernel/iommu_groups/<group>`` and the group's ``type``
        (``identity``, ``DMA``, ``DMA-FQ``: drivers/iommu/iommu.c iommu_group_show_type)."""
        self.file(f"kernel/iommu_groups/{group}/type", kind)
        self.link(f"{device_rel}/iommu_group", f"kernel/iommu_groups/{group}")
        self.link(
            f"kernel/iommu_groups/{group}/devices/{device_rel.rsplit('/', 1)[-1]}", device_rel
        )

    def link(self, rel: str, target_rel: str) -> None:
        """Relative symlink ``sys/rel`` -> ``sys/target_rel``, as the kernel makes them."""
        path = self.p(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        target = os.path.relpath(self.p(target_rel), path.parent)
        if path.is_symlink():
            path.unlink()
        os.symlink(target, path)

    def numa(self, node: int, cpulist: str) -> None:
        self.file(f"devices/system/node/node{node}/cpulist", cpulist)

    def proc(self, rel: str, value: object) -> None:
        """``<root>/proc/rel`` beside sys/ (``sys/kernel/osrelease``), as procfs prints it."""
        path = self.root / "proc" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{value}\n")

    def dcb(
        self, netdev: str, *, pfc: Iterable[int] = (), dscp_prio: Iterable[tuple[int, int]] = ()
    ) -> None:
        """``dcb/<netdev>/pfc.json`` and ``app.json`` beside sys/: what iproute2's ``dcb -j pfc show dev``
        and ``dcb -j app show dev`` print (dcb/dcb_pfc.c, dcb/dcb_app.c), PFC on the priorities ``pfc``."""
        on = set(pfc)
        base = self.root / "dcb" / netdev
        base.mkdir(parents=True, exist_ok=True)
        doc = {
            "pfc_cap": 8,
            "macsec_bypass": False,
            "delay": 0,
            "prio_pfc": [i in on for i in range(8)],
        }
        (base / "pfc.json").write_text(json.dumps(doc, separators=(",", ":")) + "\n")
        entries = [[d, p] for d, p in dscp_prio]
        app = {"dscp_prio": entries} if entries else {}
        (base / "app.json").write_text(json.dumps(app, separators=(",", ":")) + "\n")

    def kernel(self, release: str) -> None:
        """``proc/sys/kernel/osrelease``: what ``uname -r`` prints."""
        self.proc("sys/kernel/osrelease", release)

    def module(self, name: str, version: str | None = None, srcversion: str | None = None) -> None:
        """``module/<name>``: ``version`` is MODULE_VERSION (out-of-tree drivers, a few in-tree ones);
        ``srcversion`` exists for a loadable module with a version or on a CONFIG_MODULE_SRCVERSION_ALL kernel."""
        self.file(f"module/{name}/initstate", "live")
        if version:
            self.file(f"module/{name}/version", version)
        if srcversion:
            self.file(f"module/{name}/srcversion", srcversion)

    def host_bridge(self, domain_bus: str) -> PciNode:
        """``domain_bus`` like ``0000:15`` -> ``devices/pci0000:15``."""
        rel = f"devices/pci{domain_bus}"
        self.p(rel).mkdir(parents=True, exist_ok=True)
        return PciNode(self, rel, None)

    def manifest(self, host: str, note: str) -> None:
        """``ibdiag-snapshot.json`` beside ``sys/``: what ``ibdiag snapshot`` writes, so the host is known."""
        doc = {"schema": "ibdiag.snapshot/1", "host": host, "note": note}
        (self.root / "ibdiag-snapshot.json").write_text(json.dumps(doc, indent=2) + "\n")

    def check_no_empty_dirs(self) -> None:
        # git does not keep empty directories: a fixture must not depend on one.
        for dirpath, dirnames, filenames in [
            *os.walk(self.root / "sys"),
            *os.walk(self.root / "proc"),
        ]:
            if not dirnames and not filenames:
                raise AssertionError(f"empty directory in fixture: {dirpath}")


@dataclass(frozen=True)
class Link:
    """PCIe link attributes: GT/s text as sysfs prints it and lane counts."""

    speed: str = "32.0 GT/s PCIe"
    width: int = 16
    max_speed: str = "32.0 GT/s PCIe"
    max_width: int = 16


@dataclass
class PciNode:
    tree: Tree
    rel: str
    address: str | None
    numa: int = -1
    cpulist: str = ""

    def add(
        self,
        address: str,
        *,
        vendor: int,
        device: int,
        cls: int,
        numa: int | None = None,
        cpulist: str | None = None,
        link: Link | None = Link(),
        subsystem: tuple[int, int] | None = None,
        extra: Mapping[str, object] | None = None,
        config: bytes | None = None,
        aer: Mapping[str, Mapping[str, int]] | None = None,
    ) -> PciNode:
        numa = self.numa if numa is None else numa
        cpulist = self.cpulist if cpulist is None else cpulist
        rel = f"{self.rel}/{address}"
        t = self.tree
        t.file(f"{rel}/vendor", f"0x{vendor:04x}")
        t.file(f"{rel}/device", f"0x{device:04x}")
        t.file(f"{rel}/class", f"0x{cls:06x}")
        t.file(f"{rel}/numa_node", numa)
        t.file(f"{rel}/local_cpulist", cpulist)
        if subsystem:
            t.file(f"{rel}/subsystem_vendor", f"0x{subsystem[0]:04x}")
            t.file(f"{rel}/subsystem_device", f"0x{subsystem[1]:04x}")
        if link is not None:
            t.file(f"{rel}/current_link_speed", link.speed)
            t.file(f"{rel}/current_link_width", link.width)
            t.file(f"{rel}/max_link_speed", link.max_speed)
            t.file(f"{rel}/max_link_width", link.max_width)
        for k, v in (extra or {}).items():
            t.file(f"{rel}/{k}", v)
        if config is not None:
            t.blob(f"{rel}/config", config)
        if aer is not None:
            for name, text in aer_files(**aer).items():
                t.file(f"{rel}/{name}", text)
        t.link(f"bus/pci/devices/{address}", rel)
        return PciNode(t, rel, address, numa, cpulist)

    def bridge(
        self,
        address: str,
        *,
        vendor: int = 0x8086,
        device: int = 0x352A,
        link: Link | None = Link(),
        **kw: object,
    ) -> PciNode:
        return self.add(address, vendor=vendor, device=device, cls=0x060400, link=link, **kw)  # type: ignore[arg-type]

    def rdma(
        self,
        name: str,
        *,
        fw_ver: str,
        board_id: str,
        hca_type: str,
        node_guid: str,
        node_type: str = "1: CA",
        hw_counters: Mapping[str, int] | None = None,
    ) -> IbDev:
        t = self.tree
        rel = f"{self.rel}/infiniband/{name}"
        t.file(f"{rel}/fw_ver", fw_ver)
        t.file(f"{rel}/board_id", board_id)
        t.file(f"{rel}/hca_type", hca_type)
        t.file(f"{rel}/node_guid", node_guid)
        t.file(f"{rel}/sys_image_guid", node_guid)
        t.file(f"{rel}/node_type", node_type)
        t.link(f"{rel}/device", self.rel)
        t.link(f"class/infiniband/{name}", rel)
        if hw_counters is not None:
            for k, v in hw_counters.items():
                t.file(f"{rel}/hw_counters/{k}", v)
        return IbDev(t, rel, name, self)

    def netdev(
        self,
        name: str,
        *,
        dev_port: int = 0,
        operstate: str = "up",
        mtu: int = 1500,
        address: str = "00:00:00:00:00:00",
        speed: int | None = None,
    ) -> str:
        t = self.tree
        rel = f"{self.rel}/net/{name}"
        t.file(f"{rel}/dev_port", dev_port)
        t.file(f"{rel}/dev_id", f"0x{dev_port:x}")
        t.file(f"{rel}/operstate", operstate)
        t.file(f"{rel}/mtu", mtu)
        t.file(f"{rel}/address", address)
        if speed is not None:
            t.file(f"{rel}/speed", speed)
        t.link(f"class/net/{name}", rel)
        return name


@dataclass
class IbDev:
    tree: Tree
    rel: str
    name: str
    pci: PciNode
    ports: list[int] = field(default_factory=list)

    def port(
        self,
        n: int,
        *,
        state: str = "4: ACTIVE",
        phys_state: str = "5: LinkUp",
        rate: str = "400 Gb/sec (4X NDR)",
        link_layer: str = "InfiniBand",
        lid: str = "0x1",
        sm_lid: str = "0x1",
        gids: Iterable[tuple[str, str, str | None]] = (),
        counters: Mapping[str, int | str] | None = None,
        hw_counters: Mapping[str, int | str] | None = None,
    ) -> None:
        t = self.tree
        rel = f"{self.rel}/ports/{n}"
        t.file(f"{rel}/state", state)
        t.file(f"{rel}/phys_state", phys_state)
        t.file(f"{rel}/rate", rate)
        t.file(f"{rel}/link_layer", link_layer)
        t.file(f"{rel}/lid", lid)
        t.file(f"{rel}/sm_lid", sm_lid)
        t.file(f"{rel}/lid_mask_count", 0)
        t.file(f"{rel}/sm_sl", 0)
        t.file(f"{rel}/pkeys/0", "0xffff")
        gids = list(gids)
        for i, (gid, gtype, ndev) in enumerate(gids):
            t.file(f"{rel}/gids/{i}", gid)
            t.file(f"{rel}/gid_attrs/types/{i}", gtype)
            if ndev is not None:
                t.file(f"{rel}/gid_attrs/ndevs/{i}", ndev)
        # Unused table entries read as zeros (their gid_attrs are EINVAL on a live node; absent here).
        for i in range(len(gids), len(gids) + 2):
            t.file(f"{rel}/gids/{i}", "0000:0000:0000:0000:0000:0000:0000:0000")
        if counters is not None:
            for k, v in counters.items():
                t.file(f"{rel}/counters/{k}", v)
        if hw_counters is not None:
            for k, v in hw_counters.items():
                t.file(f"{rel}/hw_counters/{k}", v)
        self.ports.append(n)


def zero_counters(**overrides: int | str) -> dict[str, int | str]:
    values: dict[str, int | str] = {name: 0 for name in IB_COUNTERS}
    values.update(overrides)
    return values


def zero_hw_counters(**overrides: int | str) -> dict[str, int | str]:
    values: dict[str, int | str] = {name: 0 for name in MLX5_HW_COUNTERS}
    values["lifespan"] = 12  # ms cache interval of mlx5 hw_counters, not a counter
    values.update(overrides)
    return values


def ib_gid(guid: str) -> str:
    """Port GID 0 of an IB port: the link-local prefix fe80::/64 and the port GUID."""
    g = guid.replace(":", "")
    return f"fe80:0000:0000:0000:{g[0:4]}:{g[4:8]}:{g[8:12]}:{g[12:16]}"


def roce_gids(mac_eui: str, ipv4: str, netdev: str) -> list[tuple[str, str, str | None]]:
    """The four GIDs mlx5 fills for a RoCE port with one IPv4 address: link-local v1/v2, IPv4-mapped v1/v2."""
    a, b, c, d = (int(x) for x in ipv4.split("."))
    mapped = f"0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}"
    ll = f"fe80:0000:0000:0000:{mac_eui}"
    return [
        (ll, "IB/RoCE v1", netdev),
        (ll, "RoCE v2", netdev),
        (mapped, "IB/RoCE v1", netdev),
        (mapped, "RoCE v2", netdev),
    ]


#: The bit names of drivers/pci/pcie/aer.c (aer_correctable_error_string, aer_uncorrectable_error_string),
#: in bit order, as aer_dev_* print them: one "<name> <count>" line each, then "TOTAL_ERR_<KIND> <sum>".
AER_CORRECTABLE = (
    "RxErr",
    "BadTLP",
    "BadDLLP",
    "Rollover",
    "Timeout",
    "NonFatalErr",
    "CorrIntErr",
    "HeaderOF",
)
AER_UNCORRECTABLE = (
    "Undefined", "DLP", "SDES", "TLP", "FCP", "CmpltTO", "CmpltAbrt", "UnxCmplt", "RxOF", "MalfTLP",
    "ECRC", "UnsupReq", "ACSViol", "UncorrIntErr", "BlockedTLP", "AtomicOpBlocked", "TLPBlockedErr",
    "PoisonTLPBlocked",
)  # fmt: skip


def aer_files(
    correctable: Mapping[str, int] | None = None,
    nonfatal: Mapping[str, int] | None = None,
    fatal: Mapping[str, int] | None = None,
) -> dict[str, str]:
    """``aer_dev_correctable``/``_nonfatal``/``_fatal`` texts with the given bits set (others 0)."""
    out = {}
    for name, bits, counts, total in (
        ("aer_dev_correctable", AER_CORRECTABLE, correctable, "COR"),
        ("aer_dev_nonfatal", AER_UNCORRECTABLE, nonfatal, "NONFATAL"),
        ("aer_dev_fatal", AER_UNCORRECTABLE, fatal, "FATAL"),
    ):
        counts = counts or {}
        unknown = set(counts) - set(bits)
        if unknown:
            raise ValueError(f"not an AER bit name: {sorted(unknown)}")
        lines = [f"{b} {counts.get(b, 0)}" for b in bits]
        lines.append(f"TOTAL_ERR_{total} {sum(counts.values())}")
        out[name] = "\n".join(lines)  # Tree.file adds the last newline
    return out
