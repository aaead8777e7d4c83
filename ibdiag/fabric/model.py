"""The subnet as frozen dataclasses: nodes, ports with both ends of each link, subnet managers.

GUIDs are ``0x`` + 16 lower-case hex digits. A port is keyed by its node's GUID and its number
(``(guid, 0)`` is a switch's management port). Strings from outside (node descriptions) are already
escaped and capped by the parsers. Counters are :class:`ibdiag.counters.model.PortCounters` keyed
``(node guid, port)``: the same meanings, saturation and deltas as ``ibdiag counters``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

from ibdiag.counters.model import Sample

SWITCH = "switch"
CA = "ca"
ROUTER = "router"

#: Data rate per lane in Gb/s after encoding, by IBA speed name.
LANE_GBPS: dict[str, float] = {
    "SDR": 2.0,
    "DDR": 4.0,
    "QDR": 8.0,
    "FDR10": 10.0,
    "FDR": 13.64,
    "EDR": 25.0,
    "HDR": 50.0,
    "NDR": 100.0,
    "XDR": 200.0,
}
SPEED_ORDER = tuple(LANE_GBPS)


def guid_text(value: int) -> str:
    return f"0x{value:016x}"


class PortRef(NamedTuple):
    """A port by its node's GUID and number. A named tuple: hashed and compared in C (the model's
    indexes are keyed by it, hundreds of thousands of times on a large fabric)."""

    guid: str
    port: int


@dataclass(frozen=True)
class FabricNode:
    guid: str
    kind: str
    """``switch``, ``ca`` or ``router`` (``unknown``: a node only a counters paste names)."""
    desc: str
    """NodeDescription (``gpu03 mlx5_2``, ``leaf-su1-r2``): set by whoever administers the node."""
    ports: int
    lid: int | None = None
    """A switch's LID (port 0); adapters have one per port."""
    node_id: str = ""
    """The name ibnetdiscover's dump gives the node (``S-<guid>``, ``H-<guid>``)."""
    vendor_id: int | None = None
    device_id: int | None = None
    sysimg_guid: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "guid": self.guid,
            "kind": self.kind,
            "desc": self.desc,
            "ports": self.ports,
            "lid": self.lid,
            "vendor_id": self.vendor_id,
            "device_id": self.device_id,
        }


@dataclass(frozen=True)
class FabricPort:
    guid: str
    """The node's GUID."""
    port: int
    state: str | None = None
    """``Active``, ``Armed``, ``Initialize``, ``Down``; None when the source did not say."""
    phys_state: str | None = None
    """``LinkUp``, ``Polling``, ``Disabled`` ...; None when the source did not say."""
    width: int | None = None
    """Active lanes (1, 2, 4, 8, 12)."""
    speed: str | None = None
    """Active lane speed (``HDR``)."""
    peer: PortRef | None = None
    lid: int | None = None
    port_guid: str | None = None
    could_be: str = ""
    """What iblinkinfo says the link could do (``12X``, ``53.125 Gbps``): both ends support more."""

    @property
    def ref(self) -> PortRef:
        return PortRef(self.guid, self.port)

    @property
    def rate_gbps(self) -> float | None:
        if self.width is None or self.speed not in LANE_GBPS:
            return None
        return self.width * LANE_GBPS[self.speed]

    @property
    def link_text(self) -> str:
        return f"{self.width}x{self.speed}" if self.width and self.speed else "?"

    def to_json(self) -> dict[str, Any]:
        return {
            "guid": self.guid,
            "port": self.port,
            "lid": self.lid,
            "port_guid": self.port_guid,
            "state": self.state,
            "phys_state": self.phys_state,
            "width": self.width,
            "speed": self.speed,
            "rate_gbps": self.rate_gbps,
            "peer": None if self.peer is None else {"guid": self.peer.guid, "port": self.peer.port},
        }


_new = object.__new__
_set = object.__setattr__
_Record = TypeVar("_Record")


def built(cls: type[_Record], fields: dict[str, object]) -> _Record:
    """An instance of the frozen dataclass ``cls`` with ``fields`` (every field, in declaration order)
    set in one go: half the cost of its ``__init__`` (one ``__dict__`` set instead of a guarded
    attribute set per field), for the records a fabric makes by the hundred thousand (ports, ISLs,
    iblinkinfo lines). The same object in every respect (equality, hash, repr, ``replace``); each
    caller's test checks its fields still line up with the class."""
    obj = _new(cls)
    _set(obj, "__dict__", fields)
    return obj


def new_port(
    guid: str,
    port: int,
    state: str | None,
    phys_state: str | None,
    width: int | None,
    speed: str | None,
    peer: PortRef | None,
    lid: int | None,
    port_guid: str | None,
    could_be: str = "",
) -> FabricPort:
    """``FabricPort(...)`` with every field given, by :func:`built`: the parsers make one per port,
    100k on a large fabric; tests/fabric/test_parsers.py checks the fields still line up."""
    return built(
        FabricPort,
        {
            "guid": guid,
            "port": port,
            "state": state,
            "phys_state": phys_state,
            "width": width,
            "speed": speed,
            "peer": peer,
            "lid": lid,
            "port_guid": port_guid,
            "could_be": could_be,
        },
    )


@dataclass(frozen=True)
class SubnetManager:
    lid: int
    guid: str | None
    priority: int | None
    state: str
    """``master``, ``standby``, ``discovering``, ``not-active``, or ``not answering``."""
    activity: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "lid": self.lid,
            "guid": self.guid,
            "priority": self.priority,
            "state": self.state,
            "activity_count": self.activity,
        }


@dataclass(frozen=True)
class ToolNote:
    """What a tool said on stderr (or how it ended), classified."""

    tool: str
    kind: str
    """``unreachable`` (part of the fabric not discovered or queried), ``timeout`` (the tool ran past its
    limit), ``failed`` (non-zero exit with no result), ``no-sm``, ``noise`` (informational),
    ``skipped`` (lines of a saved output that were not the tool's: a prompt, a banner)."""
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"tool": self.tool, "kind": self.kind, "text": self.text}


@dataclass(frozen=True)
class Fabric:
    source: str
    """``live`` (this node's tools), or the saved dump it was read from."""
    taken_at_s: float | None
    nodes: tuple[FabricNode, ...]
    ports: tuple[FabricPort, ...]
    """Every port the sources name; links appear on both ends."""
    sms: tuple[SubnetManager, ...] = ()
    sm_known: bool = True
    """False when the source holds no subnet-manager query (a bare ibnetdiscover dump)."""
    states_known: bool = True
    """False when the source holds no port states (a bare ibnetdiscover dump: every listed link is up)."""
    counters: Sample | None = None
    """Switch and adapter port counters, keyed ``(guid, port)``; None when not read."""
    notes: tuple[ToolNote, ...] = ()
    routes: dict[str, dict[int, int]] | None = None
    """The subnet manager's routes (``ibdiag fabric --routes``): switch GUID -> {destination LID: out
    port}, each switch's unicast linear forwarding table as ibroute read it; None when not read."""
    duplicates: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """GUIDs the dump gives more than one node: (GUID, the nodes' keys, ``<GUID>`` and ``<GUID>-2`` …)."""
    topology_known: bool = True
    """False for a paste of a counters or SM tool alone (ibqueryerrors, perfquery, sminfo): no links."""
    _index: dict[str, FabricNode] = field(default_factory=dict, compare=False, repr=False)
    _ports: dict[tuple[str, int], FabricPort] = field(
        default_factory=dict, compare=False, repr=False
    )
    _switches: set[str] = field(default_factory=set, compare=False, repr=False)
    _links: list[tuple[FabricPort, FabricPort | None]] = field(
        default_factory=list, compare=False, repr=False
    )
    memo: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """Views derived from the frozen model once and kept (``shape.host_links``)."""

    def __post_init__(self) -> None:
        # The indexes every check looks things up in, built once: nodes by GUID, ports by (GUID,
        # port) (a PortRef, a named tuple, finds its port by the same key), the switches.
        self._index.update({n.guid: n for n in self.nodes})
        self._ports.update({(p.guid, p.port): p for p in self.ports})
        self._switches.update(n.guid for n in self.nodes if n.kind == SWITCH)

    def node(self, guid: str) -> FabricNode | None:
        return self._index.get(guid)

    def port(self, ref: PortRef) -> FabricPort | None:
        return self._ports.get(ref)

    def port_ref(self, guid: str, port: int | None) -> PortRef:
        return PortRef(guid, port or 0)

    def is_switch(self, guid: str) -> bool:
        return guid in self._switches

    @property
    def partial(self) -> bool:
        return any(n.kind in ("unreachable", "timeout") for n in self.notes)

    def links(self) -> list[tuple[FabricPort, FabricPort | None]]:
        """Each link once (the end with the lower (guid, port) first); the far end None when not discovered.
        Computed once (the model is frozen); a copy is returned."""
        if self._links:
            return list(self._links)
        out: list[tuple[FabricPort, FabricPort | None]] = []
        ports = self._ports
        for p in self.ports:
            peer = p.peer
            if peer is None:
                continue
            far = ports.get(peer)
            if far is not None and peer < (p.guid, p.port):  # the peer is (far.guid, far.port)
                continue
            out.append((p, far))
        self._links.extend(out)
        return out

    def is_isl(self, p: FabricPort) -> bool:
        """Both ends switches: an inter-switch link."""
        return p.peer is not None and p.guid in self._switches and p.peer.guid in self._switches
