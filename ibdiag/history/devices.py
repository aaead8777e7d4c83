"""topo's GPU/NIC map, as the kernel log and AER name devices: PCI address, netdev or ib device ->
who it is (``mlx5_0:1``, ``GPU3``, ``bridge 0000:20:01.0 above mlx5_0, GPU0``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ibdiag.node.model import Topology


@dataclass(frozen=True)
class Device:
    subject: str
    """What findings name: a port (``mlx5_0:1``), an adapter, ``GPU3`` or ``bridge 0000:20:01.0``."""
    role: str
    """``nic``, ``gpu`` or ``bridge``."""
    pci: str | None
    serves: tuple[str, ...] = ()
    """NIC: the GPUs that use it (topo's pairing); GPU: its NICs; bridge: the NICs and GPUs below it."""

    def said(self) -> str:
        """``mlx5_0 (0000:21:00.0; GPU0, GPU1)``: the subject with its PCI address and what it serves."""
        extra = "; ".join(x for x in (self.pci or "", ", ".join(self.serves)) if x)
        return f"{self.subject} ({extra})" if extra else self.subject


@dataclass(frozen=True)
class DeviceMap:
    by_pci: dict[str, Device] = field(default_factory=dict)
    by_name: dict[str, Device] = field(default_factory=dict)

    def find(self, pci: str | None, name: str | None) -> Device | None:
        """The device a message names: by netdev/ib device first (a port), then by PCI address."""
        if name is not None and name in self.by_name:
            return self.by_name[name]
        if pci is not None:
            return self.by_pci.get(pci)
        return None

    def path_devices(self) -> dict[str, Device]:
        """PCI address -> device for every NIC, GPU and bridge above them (what AER is read from)."""
        return dict(self.by_pci)


def device_map(topo: Topology | None) -> DeviceMap:
    if topo is None:
        return DeviceMap()
    by_pci: dict[str, Device] = {}
    by_name: dict[str, Device] = {}
    gpus_of: dict[str, list[str]] = {}
    nics_of: dict[int, list[str]] = {}
    for pairing in topo.pairings:
        for port in pairing.ports:
            gpus_of.setdefault(port.adapter, []).append(f"GPU{pairing.gpu}")
            nics_of.setdefault(pairing.gpu, []).append(port.adapter)
    below: dict[str, list[str]] = {}
    for a in topo.adapters:
        serves = tuple(dict.fromkeys(gpus_of.get(a.name, [])))
        if a.pci is not None:
            by_pci[a.pci.address] = Device(a.name, "nic", a.pci.address, serves)
            for b in a.pci.bridges:
                below.setdefault(b, []).append(a.name)
        for p in a.ports:
            dev = Device(
                f"{a.name}:{p.port}", "nic", None if a.pci is None else a.pci.address, serves
            )
            if p.netdev:
                by_name.setdefault(p.netdev, dev)
        if a.ports:
            by_name.setdefault(a.name, Device(f"{a.name}:{a.ports[0].port}", "nic", None, serves))
    for g in topo.gpus:
        name = f"GPU{g.index}"
        by_pci[g.pci.address] = Device(
            name, "gpu", g.pci.address, tuple(dict.fromkeys(nics_of.get(g.index, [])))
        )
        for b in g.pci.bridges:
            below.setdefault(b, []).append(name)
    for b, names in below.items():
        if b not in by_pci:
            by_pci[b] = Device(f"bridge {b}", "bridge", b, tuple(dict.fromkeys(names)))
    return DeviceMap(by_pci, by_name)
