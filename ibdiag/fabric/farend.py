"""The switch port at the other end of this node's cables (``ibdiag counters --far-end``).

Per local InfiniBand port, targeted queries only (never a whole-fabric discovery): ``smpquery -D
nodeinfo 0,1`` and ``nodedesc 0,1`` (directed route one hop out of the port: the far node, and the
port number the cable enters it by), ``smpquery -D portinfo 0,1 0`` (the far switch's LID), then
``perfquery LID PORT`` (its PortCounters). The umad device the tools use is found by node GUID
(``ibstat``), so a local adapter named differently by the tools is still matched. Each tool runs with
a time limit; a far end that cannot be read is said, not skipped.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from ibdiag.counters.model import PortCounters, Sample
from ibdiag.errors import CannotRunError
from ibdiag.fabric.build import port_counters
from ibdiag.fabric.collect import Runner, find_tool, run_tool
from ibdiag.fabric.hosts import guid_from_sysfs
from ibdiag.fabric.model import guid_text
from ibdiag.jsonread import JsonFieldError
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.text import safe_excerpt

_CA = re.compile(r"^CA '([^']{1,64})'", re.M)
_NODE_GUID = re.compile(r"^\s*Node GUID: 0x([0-9a-fA-F]{1,16})", re.M)
_FIELD = re.compile(r"^(\w{1,48}):\.+(.*)$", re.M)


@dataclass(frozen=True)
class FarEnd:
    adapter: str
    """The local adapter (sysfs name) and port whose cable this is."""
    port: int
    guid: str | None = None
    desc: str = ""
    kind: str = ""
    far_port: int | None = None
    lid: int | None = None
    counters: PortCounters | None = None
    problem: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "adapter": self.adapter,
            "port": self.port,
            "guid": self.guid,
            "desc": self.desc,
            "kind": self.kind,
            "far_port": self.far_port,
            "lid": self.lid,
            "counters": None if self.counters is None else dict(self.counters.counters or {}),
            "problem": self.problem,
        }


def fields(text: str) -> dict[str, str]:
    """``Name:.....value`` lines (smpquery, perfquery) -> {Name: value}."""
    return {m.group(1): m.group(2).strip() for m in _FIELD.finditer(text)}


def umad_names(ibstat_text: str) -> dict[str, str]:
    """Node GUID -> the device name the tools use (``ibstat``'s ``CA 'name'`` blocks)."""
    out: dict[str, str] = {}
    blocks = _CA.split(ibstat_text)
    for name, body in zip(blocks[1::2], blocks[2::2], strict=False):
        m = _NODE_GUID.search(body)
        if m:
            out[guid_text(int(m.group(1), 16))] = name
    return out


class FarEndReader:
    def __init__(
        self, env: Mapping[str, str], *, timeout_s: float = 10.0, runner: Runner = run_tool
    ) -> None:
        self.env, self.timeout_s, self.runner = env, timeout_s, runner
        self._names: dict[str, str] | None = None

    def _run(self, *argv: str) -> tuple[str, str, int | None]:
        out, err, rc, _ = self.runner(
            [find_tool(argv[0], self.env), *argv[1:]], self.env, self.timeout_s
        )
        return out, err, rc

    def umad(self, adapter: str, node_guid: str | None) -> str:
        if self._names is None:
            out, _err, _rc = self._run("ibstat")
            self._names = umad_names(out)
        if node_guid is not None and node_guid in self._names:
            return self._names[node_guid]
        return adapter

    def read(self, adapter: str, port: int, node_guid: str | None) -> FarEnd:
        ca = self.umad(adapter, node_guid)
        sel = ("-C", ca, "-P", str(port))
        out, err, rc = self._run("smpquery", *sel, "-D", "nodeinfo", "0,1")
        info = fields(out)
        if rc != 0 or "Guid" not in info:
            return FarEnd(
                adapter,
                port,
                problem=f"no answer one hop out of {ca} port {port}: {safe_excerpt(err.strip() or f'exit {rc}', 120)}",
            )
        try:
            guid = guid_text(int(info["Guid"], 16))
            far_port = int(info["LocalPort"])
        except (KeyError, ValueError):
            return FarEnd(adapter, port, problem="smpquery nodeinfo: unreadable answer")
        kind = info.get("NodeType", "").lower()
        desc_out, _e, _r = self._run("smpquery", *sel, "-D", "nodedesc", "0,1")
        m = re.search(r"Node Description:\.+(.*)$", desc_out, re.M)
        desc = safe_excerpt(m.group(1).strip() if m else "", 96)
        lid_out, _e, _r = self._run(
            "smpquery", *sel, "-D", "portinfo", "0,1", "0" if kind == "switch" else str(far_port)
        )
        try:
            lid = int(fields(lid_out).get("Lid", ""))
        except ValueError:
            return FarEnd(
                adapter,
                port,
                guid,
                desc,
                kind,
                far_port,
                problem="smpquery portinfo: no LID (is the subnet manager up?)",
            )
        pq, pq_err, pq_rc = self._run("perfquery", *sel, str(lid), str(far_port))
        values = fields(pq)
        if pq_rc != 0 or "SymbolErrorCounter" not in values:
            return FarEnd(
                adapter,
                port,
                guid,
                desc,
                kind,
                far_port,
                lid,
                problem=f"perfquery {lid} {far_port}: {safe_excerpt(pq_err.strip() or f'exit {pq_rc}', 120)}",
            )
        numbers = {k: int(v) for k, v in values.items() if v.isdigit() and len(v) <= 20}
        pc = port_counters(desc or guid, far_port, numbers, unlisted=None)
        return FarEnd(adapter, port, guid, desc, kind, far_port, lid, pc)


def ib_ports(sample_ports: tuple[PortCounters, ...]) -> list[tuple[str, int]]:
    """The local ports whose far end can be asked: InfiniBand, Active."""
    out = []
    for p in sample_ports:
        info = p.info
        if (
            p.port is not None
            and info is not None
            and info.link_layer == "InfiniBand"
            and (info.state or "").upper() == "ACTIVE"
        ):
            out.append((p.adapter, p.port))
    return out


def far_ends(sysfs: SysfsRoot, sample: Sample, reader: FarEndReader) -> list[FarEnd]:
    """The far end of each Active InfiniBand port of ``sample`` (the adapter found by the node GUID
    ``sysfs`` gives); a node without one cannot be asked (exit 3)."""
    ports = ib_ports(sample.ports)
    if not ports:
        raise CannotRunError(
            "--far-end: no Active InfiniBand port on this node",
            hint="the far end of a RoCE port is an Ethernet switch: read it with the switch's own tools",
        )
    out = []
    for adapter, port in ports:
        try:
            guid = guid_from_sysfs(sysfs.read(f"class/infiniband/{adapter}/node_guid") or "")
        except JsonFieldError:
            guid = None
        out.append(reader.read(adapter, port, guid))
    return out
