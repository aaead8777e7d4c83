"""``ibnetdiscover`` output (its default format, which ibsim also reads) -> nodes and ports. Pure.

::

    switchguid=0xb8cef603000a0001(b8cef603000a0001)
    Switch  40 "S-b8cef603000a0001"    # "leaf1" enhanced port 0 lid 2 lmc 0
    [3]     "H-0002c90300000301"[1](2c90300000302)     # "gpu03 mlx5_2" lid 5 4xHDR
    caguid=0x2c90300000301
    Ca      1 "H-0002c90300000301"     # "gpu03 mlx5_2"
    [1](2c90300000302)  "S-b8cef603000a0001"[3]     # lid 5 lmc 0 "leaf1" lid 2 4xHDR

Only cabled, discovered ports are listed. A line of another shape is refused with its number (exit 2):
a dump that is not understood is never judged in part. Descriptions are escaped and capped here.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from ibdiag.errors import InputError
from ibdiag.fabric.model import CA, ROUTER, SWITCH, FabricNode, FabricPort, PortRef, guid_text
from ibdiag.text import safe_excerpt

HINT = "give the output of `ibnetdiscover` (its default format), or a directory saved by `ibdiag fabric --save`"
#: NodeDescription is 64 bytes in IBA; more room for escapes.
DESC_LIMIT = 96
MAX_NODES = 65536
MAX_PORTS_PER_NODE = 255

_KINDS = {"Switch": SWITCH, "Ca": CA, "Rt": ROUTER}
_HEADER = re.compile(r'^(Switch|Ca|Rt)\s+(\d{1,3})\s+"([^"]{1,80})"\s*(?:#\s*"(.*)"(.*))?$')
_PORT = re.compile(
    r'^\[(\d{1,3})\](?:\(([0-9a-fA-F]{1,16})\))?\s+"([^"]{1,80})"\[(\d{1,3})\](?:\(([0-9a-fA-F]{1,16})\))?'
    r"\s*(?:#(.*))?$"
)
_PORT_COMMENT = re.compile(
    r'^\s*(?:lid\s+(\d+)\s+lmc\s+\d+\s+)?"(.*)"\s+lid\s+(\d+)\s+(?:(\d+)x([A-Z0-9]+)|(\?+))\s*$'
)
_SW_LID = re.compile(r"\b(?:enhanced|base)\s+port\s+0\s+lid\s+(\d+)")
_GUID_LINE = re.compile(
    r"^(vendid|devid|sysimgguid|switchguid|caguid|routerguid)=0x([0-9a-fA-F]{1,16})"
)


@dataclass
class _Node:
    kind: str
    node_id: str
    nports: int
    desc: str
    lid: int | None
    attrs: dict[str, int]
    ports: list[FabricPort]


def _bad(line_no: int, line: str, why: str) -> InputError:
    return InputError(
        f"ibnetdiscover output, line {line_no}: {why}: {safe_excerpt(line, 80)}", hint=HINT
    )


@functools.lru_cache(maxsize=4)  # a dump parsed while the other tools ran is not parsed twice
def parse_netdiscover(text: str) -> tuple[tuple[FabricNode, ...], tuple[FabricPort, ...]]:
    """Nodes and their cabled ports, with the peer of each (peer GUIDs resolved through the node ids)."""
    nodes: list[_Node] = []
    attrs: dict[str, int] = {}
    cur: _Node | None = None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _GUID_LINE.match(line)
        if m:
            attrs[m.group(1)] = int(m.group(2), 16)
            continue
        m = _HEADER.match(line)
        if m:
            cur = _header(m, attrs, n, line)
            nodes.append(cur)
            attrs = {}
            if len(nodes) > MAX_NODES:
                raise _bad(n, line, f"more than {MAX_NODES} nodes")
            continue
        m = _PORT.match(line)
        if m and cur is not None:
            cur.ports.append(_port(m, cur, n, line))
            if len(cur.ports) > MAX_PORTS_PER_NODE:
                raise _bad(n, line, f"more than {MAX_PORTS_PER_NODE} ports on one node")
            continue
        raise _bad(n, line, "not a line of ibnetdiscover's output")
    if not nodes:
        raise InputError("ibnetdiscover output holds no node (no Switch/Ca line)", hint=HINT)
    return _resolve(nodes)


def _header(m: re.Match[str], attrs: dict[str, int], n: int, line: str) -> _Node:
    kind = _KINDS[m.group(1)]
    nports = int(m.group(2))
    if not 0 < nports <= MAX_PORTS_PER_NODE:
        raise _bad(n, line, f"{nports} ports")
    key = {SWITCH: "switchguid", CA: "caguid", ROUTER: "routerguid"}[kind]
    if key not in attrs:
        raise _bad(n, line, f"no {key}= line before the node")
    rest = m.group(5) or ""
    lid_m = _SW_LID.search(rest)
    desc = safe_excerpt(m.group(4) if m.group(4) is not None else "", DESC_LIMIT)
    return _Node(
        kind,
        m.group(3),
        nports,
        desc,
        (int(lid_m.group(1)) or None) if lid_m else None,
        dict(attrs),
        [],
    )


def _port(m: re.Match[str], cur: _Node, n: int, line: str) -> FabricPort:
    num = int(m.group(1))
    if not 0 < num <= cur.nports:
        raise _bad(n, line, f"port {num} of a {cur.nports}-port node")
    own_pg, peer_id, peer_port, peer_pg = m.group(2), m.group(3), int(m.group(4)), m.group(5)
    lid = width = speed = None
    if m.group(6) is not None:
        c = _PORT_COMMENT.match(m.group(6))
        if c is None:
            raise _bad(n, line, "the comment after # is not '\"desc\" lid N <width>x<speed>'")
        # "?????": ibnetdiscover could not read the port's PortInfo (a lost MAD); width and speed unknown.
        width, speed = (int(c.group(4)), c.group(5)) if c.group(4) else (None, None)
        # An adapter's own LID is in its port line; a switch port's LID is the switch's.
        lid = (int(c.group(1)) or None) if c.group(1) else cur.lid
    pg = own_pg if cur.kind != SWITCH else None
    return FabricPort(
        guid="",  # filled in by _resolve
        port=num,
        state=None,
        width=width,
        speed=speed,
        peer=PortRef(peer_id, peer_port),
        lid=lid,
        port_guid=guid_text(int(pg, 16)) if pg else None,
        could_be="" if peer_pg is None else "",
    )


def _resolve(raw: list[_Node]) -> tuple[tuple[FabricNode, ...], tuple[FabricPort, ...]]:
    key = {SWITCH: "switchguid", CA: "caguid", ROUTER: "routerguid"}
    guid_of = {nd.node_id: guid_text(nd.attrs[key[nd.kind]]) for nd in raw}
    nodes: list[FabricNode] = []
    ports: list[FabricPort] = []
    for nd in raw:
        guid = guid_of[nd.node_id]
        sysimg = nd.attrs.get("sysimgguid")
        nodes.append(
            FabricNode(
                guid,
                nd.kind,
                nd.desc,
                nd.nports,
                nd.lid,
                nd.node_id,
                nd.attrs.get("vendid"),
                nd.attrs.get("devid"),
                None if sysimg is None else guid_text(sysimg),
            )
        )
        for p in nd.ports:
            assert p.peer is not None
            peer_guid = guid_of.get(p.peer.guid)
            if peer_guid is None:
                raise InputError(
                    f"ibnetdiscover output: {safe_excerpt(nd.node_id, 40)} port {p.port} is cabled to "
                    f"{safe_excerpt(p.peer.guid, 40)}, which the dump does not list",
                    hint=HINT,
                )
            ports.append(
                FabricPort(
                    guid,
                    p.port,
                    width=p.width,
                    speed=p.speed,
                    peer=PortRef(peer_guid, p.peer.port),
                    lid=p.lid,
                    port_guid=p.port_guid,
                )
            )
    return tuple(nodes), tuple(ports)
