"""Host ports named by node, NIC and GPU: ``gpu03 mlx5_2 (NIC 2, GPU2/GPU3)``.

From ``ibdiag topo -o json`` files of the nodes (``--topo``): each adapter's node GUID, NIC index and
the GPUs that have it nearest. Without them, a channel adapter's node description is read the way
rdma-ndd writes it (``<hostname> <device>``), which names the host and NIC but not the GPUs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ibdiag.errors import InputError
from ibdiag.fabric.devices import is_aggregation_node
from ibdiag.fabric.model import CA, Fabric, FabricNode, FabricPort, PortRef, built
from ibdiag.fabric.namemap import NodeNameMap
from ibdiag.fabric.naming import labels
from ibdiag.infile import RefusedFile, read_regular
from ibdiag.jsonread import Fields, JsonFieldError, loads
from ibdiag.text import safe_path, safe_value

HINT = "give files written by `ibdiag topo -o json` on each node"
MAX_TOPO_BYTES = 16 * 2**20
_DESC = re.compile(r"^(\S{1,64}) (\S{1,32})$")


@dataclass(frozen=True)
class HostEnd:
    host: str
    adapter: str
    nic_index: int | None = None
    gpus: tuple[int, ...] = ()

    @property
    def name(self) -> str:
        """``gpu03 mlx5_2``; ``gpu03`` when the adapter's device is not known (a node-name map)."""
        return f"{self.host} {self.adapter}" if self.adapter else self.host

    @property
    def token(self) -> str:
        return f"{self.host}/{self.adapter}" if self.adapter else self.host

    @property
    def text(self) -> str:
        gpus = f", GPU{'/GPU'.join(str(g) for g in self.gpus)}" if self.gpus else ""
        nic = f"NIC {self.nic_index}" if self.nic_index is not None else ""
        extra = ", ".join(x for x in (nic,) if x) + gpus
        return self.name + (f" ({extra.lstrip(', ')})" if extra else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "adapter": self.adapter,
            "nic_index": self.nic_index,
            "gpus": list(self.gpus),
        }


def guid_from_sysfs(text: str) -> str:
    """``a088:c203:00b1:2c40`` (sysfs node_guid) -> ``0xa088c20300b12c40``."""
    digits = text.replace(":", "")
    if not re.fullmatch(r"[0-9a-fA-F]{16}", digits):
        raise JsonFieldError("node_guid", f"{safe_value(text)} is not a GUID")
    return "0x" + digits.lower()


@dataclass(frozen=True)
class TopoFile:
    """What one ``ibdiag topo -o json`` file says about where its node is."""

    host: str
    ends: dict[str, HostEnd]
    """Node GUID -> host end, for each adapter that has a GUID."""
    gpu_nics: dict[int, tuple[str, ...]]
    """GPU index (``nvidia-smi``'s order, by PCI address) -> its nearest adapters."""
    addresses: tuple[str, ...] = ()
    """IPv4 addresses of the node's RoCE ports (from IPv4-mapped GIDs, ``::ffff:a.b.c.d``)."""


def _ipv4(gid: str) -> str | None:
    """``0000:0000:0000:0000:0000:ffff:0a1e:0001`` -> ``10.30.0.1``; None for any other GID."""
    digits = gid.replace(":", "").lower()
    if len(digits) != 32 or not digits.startswith("0" * 20 + "ffff"):
        return None
    try:
        raw = bytes.fromhex(digits[24:])
    except ValueError:
        return None
    return ".".join(str(b) for b in raw)


def _addresses(f: Fields) -> tuple[str, ...]:
    out: dict[str, None] = {}
    for adapter in f.objects(
        "adapters",
        lambda a: a.objects("ports", lambda p: p.objects("gids", lambda g: g.text("gid")), 64),
        256,
    ):
        for port in adapter:
            for gid in port:
                ip = _ipv4(gid) if gid else None
                if ip:
                    out.setdefault(ip, None)
    return tuple(out)


def read_topo_file(path: Path) -> TopoFile:
    """One ``ibdiag topo -o json`` file: its host, adapters by GUID, GPUs' nearest adapters and RoCE
    IPv4 addresses. Read as untrusted (:mod:`ibdiag.infile`, :mod:`ibdiag.jsonread`): InputError."""
    name = safe_path(path)
    try:
        doc = loads(read_regular(path, MAX_TOPO_BYTES))
    except RefusedFile as e:
        raise InputError(f"{name}: {e.problem}", hint=HINT) from None
    except OSError as e:
        raise InputError(f"{name}: {e.strerror or e}", hint=HINT) from None
    except JsonFieldError as e:
        raise InputError(f"{name}: {e.problem}", hint=HINT) from None
    try:
        f = Fields(doc, "")
        if f.text("schema") != "ibdiag.topo/1":
            raise JsonFieldError("schema", "is not ibdiag.topo/1")
        host = f.text("host", required=True)
        nearest: dict[str, list[int]] = {}
        gpu_nics: dict[int, tuple[str, ...]] = {}
        for gpu, names in f.objects(
            "pairings", lambda p: (p.integer("gpu", 0, 4096), p.texts("nearest", 64))
        ):
            if gpu is not None:
                gpu_nics[gpu] = names
                for adapter in names:
                    nearest.setdefault(adapter, []).append(gpu)
        ends: dict[str, HostEnd] = {}
        for adapter, idx, guid in f.objects(
            "adapters",
            lambda a: (
                a.text("name", required=True),
                a.integer("nic_index", 0, 4096),
                a.text("node_guid"),
            ),
        ):
            if guid:
                ends[guid_from_sysfs(guid)] = HostEnd(
                    host, adapter, idx, tuple(sorted(nearest.get(adapter, [])))
                )
        return TopoFile(host, ends, gpu_nics, _addresses(f))
    except JsonFieldError as e:
        raise InputError(f"{name}: {e}", hint=HINT) from None


def read_topo(path: Path) -> dict[str, HostEnd]:
    """Node GUID -> host end, from one ``ibdiag topo -o json`` file."""
    return read_topo_file(path).ends


def from_desc(node: FabricNode) -> HostEnd | None:
    """``gpu03 mlx5_2`` -> its host and adapter (by :func:`~ibdiag.fabric.model.built`: one per
    adapter of the fabric)."""
    m = _DESC.match(node.desc)
    if m is None or node.kind != CA:
        return None
    return built(
        HostEnd, {"host": m.group(1), "adapter": m.group(2), "nic_index": None, "gpus": ()}
    )


def from_name(name: str) -> HostEnd:
    """A node-name map's name for an adapter: ``gpu03 mlx5_2`` (host and device) or ``gpu03``."""
    parts = name.split()
    if len(parts) == 2:
        return HostEnd(parts[0], parts[1])
    return HostEnd(name.replace(" ", "_"), "")


@dataclass(frozen=True)
class Names:
    """How to name any port: a switch by the name its operator uses (unique in the fabric), a host
    port by host, NIC and GPUs (``--topo``, a node-name map, or the node description)."""

    fabric: Fabric
    hosts: dict[str, HostEnd]
    name_map: NodeNameMap | None = None
    _shown: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    _tokens: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    _host: dict[str, HostEnd | None] = field(default_factory=dict, compare=False, repr=False)
    _port_names: dict[str, tuple[str, bool]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def __post_init__(self) -> None:
        given = dict(self.name_map.names) if self.name_map is not None else {}
        for guid, h in self.hosts.items():
            given[guid] = f"{h.host} {h.adapter}".strip()
        shown, tokens = labels(self.fabric, given)
        self._shown.update(shown)
        self._tokens.update(tokens)

    def host(self, guid: str) -> HostEnd | None:
        if guid in self._host:
            return self._host[guid]
        found = self._host[guid] = self._find_host(guid)
        return found

    def _find_host(self, guid: str) -> HostEnd | None:
        node = self.fabric.node(guid)
        if node is None or node.kind != CA or is_aggregation_node(node):
            return None
        h = self.hosts.get(guid)
        if h is not None:
            return h
        mapped = self.name_map.get(guid) if self.name_map is not None else None
        return from_name(mapped) if mapped else from_desc(node)

    def node(self, guid: str) -> str:
        node = self.fabric.node(guid)
        if node is None:
            return guid
        if node.kind == CA:
            h = self.host(guid)
            if h is not None:
                return h.text
        return self._shown.get(guid, node.desc or guid)

    def port(self, ref: PortRef) -> str:
        return self.port_at(ref.guid, ref.port)

    def port_at(self, guid: str, port: int) -> str:
        """:meth:`port` of ``PortRef(guid, port)``."""
        base = self._port_names.get(guid)
        if base is None:
            base = self._port_names[guid] = self._port_name(guid)
        name, numbered = base
        return f"{name} port {port}" if numbered else name

    def _port_name(self, guid: str) -> tuple[str, bool]:
        """How a node's ports are named (once per node): the name, and whether the port number follows."""
        node = self.fabric.node(guid)
        if node is not None and node.kind == CA:
            h = self.host(guid)
            if h is not None:
                return h.name, node.ports > 1
        return self.node(guid), True

    def subject(self, ref: PortRef) -> str:
        """A finding's subject, one token and unique: ``leaf-r2-1:3``, ``gpu03/mlx5_2`` (``gpu03/mlx5_2:2``
        on a multi-port adapter), the GUID where the name is not the node's alone."""
        node = self.fabric.node(ref.guid)
        name = self._tokens.get(ref.guid, ref.guid)
        if node is not None and node.kind == CA:
            return name + (f":{ref.port}" if node.ports > 1 else "")
        return f"{name}:{ref.port}"

    def switch_token(self, guid: str) -> str:
        """A switch's subject without a port (``leaf-r2-1``, or its GUID)."""
        return self._tokens.get(guid, guid)

    def link_subject(self, a: FabricPort, b: FabricPort | None) -> str:
        """``leaf-r3-1:11<>spine-1:14``: the switch end first on a host link."""
        first, second = (a, b)
        node = self.fabric.node(a.guid)
        if b is not None and node is not None and node.kind == CA:
            first, second = b, a
        return self.subject(first.ref) + "<>" + (self.subject(second.ref) if second else "?")

    def cable(self, p: FabricPort) -> str:
        """``leaf-r2-1 port 3 (cable to gpu03 mlx5_2 (NIC 2, GPU2/GPU3))``."""
        own = self.port(p.ref)
        if p.peer is None:
            return own
        far = self.fabric.node(p.peer.guid)
        if far is not None and far.kind == CA:
            h = self.host(p.peer.guid)
            return f"{own} (cable to {h.text if h else self.port(p.peer)})"
        return f"{own} (cable to {self.port(p.peer)})"
