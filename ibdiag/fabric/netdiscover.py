"""``ibnetdiscover`` output (its default format, which ibsim also reads, and ibdiagnet's copy of it)
-> nodes and ports. Pure.

::

    switchguid=0xb8cef603000a0001(b8cef603000a0001)
    Switch  40 "S-b8cef603000a0001"    # "leaf1" enhanced port 0 lid 2 lmc 0
    [3]     "H-0002c90300000301"[1](2c90300000302)     # "gpu03 mlx5_2" lid 5 4xHDR
    caguid=0x2c90300000301
    Ca      1 "H-0002c90300000301"     # "gpu03 mlx5_2"
    [1](2c90300000302)  "S-b8cef603000a0001"[3]     # lid 5 lmc 0 "leaf1" lid 2 4xHDR

ibdiagnet writes the same grammar with two differences (``ibdiagnet2.ibnetdiscover``): the switch
line is ``switchguid=0x<system image GUID>(<node GUID>)`` -- every ASIC of a director shows its
chassis's GUID before the parenthesis -- and a switch port is ``[1](1)``. A node is therefore keyed by
the GUID of its node id (``S-<GUID>``, ``H-<GUID>``: what the port lines refer to), and by the
``switchguid=``/``caguid=`` value only where the id is not a GUID (ibsim files may say ``"leaf1"``).

Only cabled, discovered ports are listed. Lines that are clearly not the output (a prompt, a log
banner, a stderr line; :mod:`.pasted`) and lines before the first or after the last line of the dump
are skipped and counted; a line of another shape inside it is refused with its number (exit 2): a
dump that is not understood is never judged in part. Numbers are checked where they enter: a LID is
0-65535, a GUID at most 16 hex digits. Two nodes that say the same GUID are both kept (the second
keyed ``<GUID>-2``) and named in :attr:`Discovered.duplicates`. Descriptions are escaped and capped.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from ibdiag.errors import InputError
from ibdiag.fabric.model import (
    CA,
    ROUTER,
    SWITCH,
    FabricNode,
    FabricPort,
    PortRef,
    built,
    guid_text,
    new_port,
)
from ibdiag.fabric.pasted import MAX_LINE, Skipped, is_junk, normalise, skipped
from ibdiag.text import safe_excerpt

HINT = "give the output of `ibnetdiscover` (its default format), or a directory saved by `ibdiag fabric --save`"
#: NodeDescription is 64 bytes in IBA; more room for escapes.
DESC_LIMIT = 96
MAX_NODES = 65536
MAX_PORTS_PER_NODE = 255
MAX_LID = 0xFFFF

_KINDS = {"Switch": SWITCH, "Ca": CA, "Rt": ROUTER}
_KEYS = {SWITCH: "switchguid", CA: "caguid", ROUTER: "routerguid"}
_HEX = r"[0-9a-fA-F]{1,16}(?![0-9a-fA-F])"
# Whitespace is optional between tokens: a PuTTY log of the terminal keeps no tabs.
_HEADER = re.compile(r'^(Switch|Ca|Rt)\s*(\d{1,3})\s*"([^"]{1,80})"\s*(?:#\s*"(.*)"(.*))?$')
_PORT = re.compile(
    rf'^\[(\d{{1,3}})\](?:\(({_HEX})\))?\s*"([^"]{{1,80}})"\[(\d{{1,3}})\](?:\(({_HEX})\))?'
    r"\s*(?:#(.*))?$"
)
_PORT_COMMENT = re.compile(
    r'^\s*(?:lid\s+(-?\d{1,20})\s+lmc\s+\d{1,3}\s+)?"(.*)"\s+lid\s+(-?\d{1,20})\s+(?:(\d{1,2})x([A-Z0-9]{2,6})|(\?+))\s*$'
)
#: The common port line in one match, its comment included (``# "desc" lid 5 4xHDR``, an adapter's
#: ``# lid 5 lmc 0 "desc" lid 2 4xHDR``): own port, own port GUID, peer id, peer port, own LID, peer
#: LID, width, speed. Any other line (``?????`` for width, a LID of more than 5 digits, no comment)
#: takes the general path, which says what is wrong.
_FAST_PORT = re.compile(
    rf'^\[(\d{{1,3}})\](?:\(({_HEX})\))?\s*"([^"]{{1,80}})"\[(\d{{1,3}})\](?:\({_HEX}\))?'
    r'\s*#\s*(?:lid\s+(\d{1,5})\s+lmc\s+\d{1,3}\s+)?"[^"]*"\s+lid\s+(\d{1,5})\s+(\d{1,2})x([A-Z0-9]{2,6})\s*$'
)
_SW_LID = re.compile(r"\b(?:enhanced|base)\s+port\s+0\s+lid\s+(-?\d{1,20})\b")
_GUID_LINE = re.compile(
    r"^(vendid|devid|sysimgguid|switchguid|caguid|routerguid)=(0x[0-9a-fA-F]{1,16})(?:\((?:0x)?([0-9a-fA-F]{1,16})\))?$"
)
#: How the dump's own lines start (besides ``[<port>]``): never a prompt, banner or stderr line.
_DUMP_STARTS = (
    "vendid=",
    "devid=",
    "sysimgguid=",
    "switchguid=",
    "caguid=",
    "routerguid=",
    "Switch",
    "Ca",
    "Rt",
)
_HEXDIGITS = frozenset("0123456789abcdefABCDEF")
#: The port numbers and widths a port line spells, by their text: a look-up, not an int() a port.
_SMALL = {str(i): i for i in range(MAX_PORTS_PER_NODE + 1)}
_KEY_NAMES = frozenset(_KEYS.values())
_ref = tuple.__new__  # PortRef(guid, port) without the named tuple's Python-level __new__
#: Lines ibnetdiscover prints around the nodes (``-g`` groups them under chassis headings).
_GROUPING = re.compile(r"^(?:Chassis \S.{0,200}|Non-Chassis Nodes|ibnetdiscover:? .{0,200})$")


#: A port line as read: (port, width, speed, peer node id, peer port, LID, port GUID).
_RawPort = tuple[int, "int | None", "str | None", str, int, "int | None", "str | None"]


@dataclass
class _Node:
    kind: str
    node_id: str
    nports: int
    desc: str
    lid: int | None
    attrs: dict[str, int]
    paren: int | None
    """The value in parentheses after ``switchguid=0x…``: the port 0 GUID (ibnetdiscover) or the
    node GUID (ibdiagnet)."""
    line: int
    ports: list[_RawPort]


@dataclass(frozen=True)
class Discovered:
    nodes: tuple[FabricNode, ...]
    ports: tuple[FabricPort, ...]
    skipped: Skipped | None = None
    """Lines that were not the dump (a prompt, a banner, stderr), counted."""
    duplicates: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """(GUID the dump gives twice or more, the keys of the nodes that say it)."""


def _bad(line_no: int, line: str, why: str) -> InputError:
    return InputError(
        f"ibnetdiscover output, line {line_no}: {why}: {safe_excerpt(line, 80)}", hint=HINT
    )


def _lid(text: str, n: int, line: str) -> int:
    value = int(text)
    if not 0 <= value <= MAX_LID:
        raise _bad(n, line, f"LID {safe_excerpt(text, 24)} is not a LID (0-{MAX_LID})")
    return value


@dataclass
class _Reading:
    """What :func:`read_netdiscover` has read so far, and the lines of no known shape it holds back."""

    nodes: list[_Node] = field(default_factory=list)
    junk: list[tuple[int, str]] = field(default_factory=list)
    attrs: dict[str, int] = field(default_factory=dict)
    """The ``…=`` lines of the node whose header comes next."""
    paren: int | None = None
    cur: _Node | None = None
    pending: list[tuple[int, str]] = field(default_factory=list)
    """Lines of no known shape, not yet known to be inside the dump."""
    started: bool = False

    def node(self, m: re.Match[str], line: str, n: int) -> _Node:
        """The node a header line opens."""
        self.started = True
        self.cur = _header(m, line, self.attrs, self.paren, n)
        self.nodes.append(self.cur)
        self.attrs, self.paren = {}, None
        if len(self.nodes) > MAX_NODES:
            raise _bad(n, line, f"more than {MAX_NODES} nodes")
        return self.cur

    def general(self, line: str, n: int) -> None:
        """A line the quick paths did not take: junk, a grouping line, or the grammar's
        (:func:`_line`), with the lines of no known shape before, inside or after the dump."""
        if not (line.startswith(_DUMP_STARTS) or (line[0] == "[" and line[1:2].isdigit())):
            if is_junk(line):  # a prompt, a banner, a stderr line: never the dump (pasted.py)
                self.junk.append((n, line))
                return
            if _GROUPING.match(line):
                return
        kind, m = _line(line, n, self.started, self.cur)
        if kind is None:
            self.pending.append((n, line))
            return
        if self.pending and self.started:
            # A line of another shape with more of the dump after it: inside, refused.
            first = self.pending[0]
            raise _bad(first[0], first[1], "not a line of ibnetdiscover's output")
        self.junk.extend(self.pending)  # before the dump: a title, a command's echo
        self.pending, self.started = [], True
        assert m is not None
        if kind == "guid":
            self.attrs[m.group(1)] = int(m.group(2), 16)
            if m.group(1) in _KEYS.values():
                self.paren = int(m.group(3), 16) if m.group(3) else None
        elif kind == "header":
            self.node(m, line, n)
        else:
            assert self.cur is not None
            _add(self.cur, _port(m, line, self.cur, n), n, line)


def _add(node: _Node, port: _RawPort, n: int, line: str) -> None:
    node.ports.append(port)
    if len(node.ports) > MAX_PORTS_PER_NODE:
        raise _bad(n, line, f"more than {MAX_PORTS_PER_NODE} ports on one node")


@functools.lru_cache(maxsize=4)  # a dump parsed while the other tools ran is not parsed twice
def read_netdiscover(text: str) -> Discovered:
    """Nodes and their cabled ports, with the peer of each (peer GUIDs resolved through the node ids).
    The common lines (a port line with its comment, a ``…=`` line, a header) are read here on quick
    paths, the local variables ``cur`` and ``pending`` mirroring the reading's; any other line by
    :meth:`_Reading.general`."""
    r = _Reading()
    cur, pending = r.cur, r.pending
    fast_port, small = _FAST_PORT.match, _SMALL
    for n, raw in enumerate(normalise(text).splitlines(), 1):
        line = raw.strip()
        if not line or line[0] == "#":
            continue
        if len(line) > MAX_LINE:
            raise _bad(n, line[:80], f"a line of {len(line)} characters")
        if cur is not None and not pending and line[0] == "[":
            f = fast_port(line)  # the common line, first, in one match
            if f is not None:
                num_t, own_pg, peer_id, peer_t, lid_t, peer_lid, width, speed = f.groups()
                num = small.get(num_t)
                if num is None:
                    num = int(num_t)
                lid = cur.lid  # a switch port's LID is the switch's
                if lid_t is not None:
                    lid = int(lid_t)
                    lid = lid or None if lid <= MAX_LID else -1
                # A number out of range takes the general path, which says which.
                if 0 < num <= cur.nports and int(peer_lid) <= MAX_LID and lid != -1:
                    peer_port = small.get(peer_t)
                    ports = cur.ports
                    ports.append(
                        (
                            num,
                            small.get(width) or int(width),
                            speed,
                            peer_id,
                            int(peer_t) if peer_port is None else peer_port,
                            lid,
                            # A switch port's parenthesis is its number in ibdiagnet's copy
                            # ([1](1)), not a GUID.
                            guid_text(int(own_pg, 16)) if own_pg and cur.kind != SWITCH else None,
                        )
                    )
                    if len(ports) > MAX_PORTS_PER_NODE:
                        raise _bad(n, line, f"more than {MAX_PORTS_PER_NODE} ports on one node")
                    continue
            m = _PORT.match(line)
            if m is not None:
                _add(cur, _port(m, line, cur, n), n, line)
                continue
        if not pending and line[0] in "vdscr":  # vendid=, devid=, sysimgguid=, switchguid= ...
            g = _GUID_LINE.match(line)
            if g is not None:
                r.started = True
                key, value, inner = g.groups()
                r.attrs[key] = int(value, 16)
                if key in _KEY_NAMES:
                    r.paren = int(inner, 16) if inner else None
                continue
        if not pending and line[0] in "SCR":  # Switch, Ca, Rt: a node's header, as _line reads it
            h = _HEADER.match(line)
            if h is not None:
                cur = r.node(h, line, n)
                continue
        r.general(line, n)
        cur, pending = r.cur, r.pending
    r.junk.extend(r.pending)  # after the dump: a prompt, a summary
    if not r.nodes:
        raise InputError("ibnetdiscover output holds no node (no Switch/Ca line)", hint=HINT)
    return _resolve(r.nodes, skipped(r.junk))


def parse_netdiscover(text: str) -> tuple[tuple[FabricNode, ...], tuple[FabricPort, ...]]:
    """:func:`read_netdiscover`'s nodes and ports alone."""
    d = read_netdiscover(text)
    return d.nodes, d.ports


def _line(
    line: str, n: int, started: bool, cur: _Node | None
) -> tuple[str | None, re.Match[str] | None]:
    """Which production of the grammar ``line`` is (``guid``, ``header``, ``port``) and its match, or
    None. A line that starts like one of them but breaks its rules is refused here with the reason."""
    if line[:1] == "[":
        m = _PORT.match(line)
        if m is not None:
            if cur is None:
                raise _bad(n, line, "a port line before any Switch/Ca line")
            return "port", m
        if started:
            raise _bad(n, line, _why_port(line))
        return None, None
    m = _GUID_LINE.match(line)
    if m is not None:
        return "guid", m
    if line.startswith(
        ("vendid=", "devid=", "sysimgguid=", "switchguid=", "caguid=", "routerguid=")
    ):
        raise _bad(n, line, "a GUID or ID that is not 0x and 1-16 hex digits")
    m = _HEADER.match(line)
    if m is not None:
        return "header", m
    return None, None


_LOOSE_PORT = re.compile(
    r'^\[(\d{1,6})\](?:\(([^)]{0,40})\))?\s*"([^"]{0,200})"\[(\d{1,6})\](?:\(([^)]{0,40})\))?'
)


def _why_port(line: str) -> str:
    """What is wrong with a line that starts like a port line."""
    m = _LOOSE_PORT.match(line)
    if m is None:
        return "not a port line of ibnetdiscover's output"
    for g in (m.group(2), m.group(5)):
        if g is not None and not re.fullmatch(r"(?:0x)?[0-9a-fA-F]{1,16}", g):
            return f"({safe_excerpt(g, 24)}) is not a GUID (1-16 hex digits)"
    if int(m.group(1)) > MAX_PORTS_PER_NODE or int(m.group(4)) > MAX_PORTS_PER_NODE:
        return f"a port number above {MAX_PORTS_PER_NODE}"
    return "not a port line of ibnetdiscover's output"


def _header(m: re.Match[str], line: str, attrs: dict[str, int], paren: int | None, n: int) -> _Node:
    kind = _KINDS[m.group(1)]
    nports = int(m.group(2))
    if not 0 < nports <= MAX_PORTS_PER_NODE:
        raise _bad(n, line, f"{nports} ports")
    if _KEYS[kind] not in attrs:
        raise _bad(n, line, f"no {_KEYS[kind]}= line before the node")
    rest = m.group(5) or ""
    lid_m = _SW_LID.search(rest)
    desc = safe_excerpt(m.group(4) if m.group(4) is not None else "", DESC_LIMIT)
    lid = (_lid(lid_m.group(1), n, line) or None) if lid_m else None
    return built(  # _Node(...): one per node
        _Node,
        {
            "kind": kind,
            "node_id": m.group(3),
            "nports": nports,
            "desc": desc,
            "lid": lid,
            "attrs": attrs,  # the caller starts a new one for the next node
            "paren": paren,
            "line": n,
            "ports": [],
        },
    )


def _port(m: re.Match[str], line: str, cur: _Node, n: int) -> _RawPort:
    num = int(m.group(1))
    if not 0 < num <= cur.nports:
        raise _bad(n, line, f"port {num} of a {cur.nports}-port node")
    own_pg, peer_id, peer_port = m.group(2), m.group(3), int(m.group(4))
    lid = width = speed = None
    if m.group(6) is not None:
        c = _PORT_COMMENT.match(m.group(6))
        if c is None:
            raise _bad(n, line, "the comment after # is not '\"desc\" lid N <width>x<speed>'")
        # "?????": ibnetdiscover could not read the port's PortInfo (a lost MAD); width and speed unknown.
        width, speed = (int(c.group(4)), c.group(5)) if c.group(4) else (None, None)
        _lid(c.group(3), n, line)  # the peer's LID: checked, the peer's own line carries it
        # An adapter's own LID is in its port line; a switch port's LID is the switch's.
        lid = (_lid(c.group(1), n, line) or None) if c.group(1) else cur.lid
    # A switch port's parenthesis is its number in ibdiagnet's copy ([1](1)), not a GUID.
    pg = own_pg if cur.kind != SWITCH else None
    return (num, width, speed, peer_id, peer_port, lid, guid_text(int(pg, 16)) if pg else None)


def node_guid(nd: _Node) -> int:
    """The node's own GUID: its id's (``S-<GUID>``), else its ``switchguid=``/``caguid=`` value."""
    nid = nd.node_id
    if 3 <= len(nid) <= 18 and nid[1] == "-" and nid[0] in "SHR" and _HEXDIGITS.issuperset(nid[2:]):
        return int(nid[2:], 16)
    return nd.attrs[_KEYS[nd.kind]]


def declared_guid(nd: _Node) -> int:
    """The GUID the node's ``…guid=`` line gives it: the value before the parenthesis, or inside it
    where that is the id's (ibdiagnet's ``switchguid=0x<system image>(<node>)``)."""
    own = node_guid(nd)
    before = nd.attrs[_KEYS[nd.kind]]
    return own if own in (before, nd.paren) else before


def _keys(raw: list[_Node]) -> tuple[list[str], tuple[tuple[str, tuple[str, ...]], ...]]:
    """A unique key per node (its GUID; ``<GUID>-2`` … for a second node of one id) and the GUIDs
    more than one node says they are."""
    keys: list[str] = []
    taken: set[str] = set()
    by_declared: dict[str, list[str]] = {}
    for nd in raw:
        own = node_guid(nd)
        key = base = guid_text(own)
        k = 2
        while key in taken:
            key, k = f"{base}-{k}", k + 1
        taken.add(key)
        keys.append(key)
        before = nd.attrs[_KEYS[nd.kind]]
        declared = own if own in (before, nd.paren) else before
        by_declared.setdefault(base if declared == own else guid_text(declared), []).append(key)
    dups = tuple(sorted((g, tuple(ks)) for g, ks in by_declared.items() if len(ks) > 1))
    return keys, dups


def _resolve(raw: list[_Node], skip: Skipped | None) -> Discovered:
    keys, dups = _keys(raw)
    by_id: dict[str, list[int]] = {}
    for i, nd in enumerate(raw):
        by_id.setdefault(nd.node_id, []).append(i)
    key_of = {nid: keys[found[0]] for nid, found in by_id.items() if len(found) == 1}
    nodes: list[FabricNode] = []
    ports: list[FabricPort] = []
    for i, nd in enumerate(raw):
        sysimg = nd.attrs.get("sysimgguid")
        if sysimg is None and nd.kind == SWITCH and nd.paren is not None:
            sysimg = nd.attrs[_KEYS[nd.kind]] if nd.paren == node_guid(nd) else None
        key = keys[i]
        nodes.append(
            built(
                FabricNode,
                {
                    "guid": key,
                    "kind": nd.kind,
                    "desc": nd.desc,
                    "ports": nd.nports,
                    "lid": nd.lid,
                    "node_id": nd.node_id,
                    "vendor_id": nd.attrs.get("vendid"),
                    "device_id": nd.attrs.get("devid"),
                    "sysimg_guid": None if sysimg is None else guid_text(sysimg),
                },
            )
        )
        for num, width, speed, peer_id, peer_port, lid, pg in nd.ports:
            peer_key = key_of.get(peer_id)
            if peer_key is None:  # an id the dump does not list, or that two nodes say
                peer_key = keys[_peer(num, peer_id, peer_port, nd, raw, by_id.get(peer_id))]
            ports.append(
                new_port(
                    key,
                    num,
                    None,
                    None,
                    width,
                    speed,
                    _ref(PortRef, (peer_key, peer_port)),
                    lid,
                    pg,
                )
            )
    return Discovered(tuple(nodes), tuple(ports), skip, dups)


def _back(num: int, peer_port: int, nd: _Node, raw: list[_Node], found: list[int]) -> int:
    """Of two nodes with one id, the one whose port ``peer_port`` points back at ``nd``'s port ``num``."""
    for j in found:
        for q in raw[j].ports:
            if q[0] == peer_port and q[3] == nd.node_id and q[4] == num:
                return j
    return found[0]


def _peer(
    num: int, peer_id: str, peer_port: int, nd: _Node, raw: list[_Node], found: list[int] | None
) -> int:
    """The index of the node at the far end of ``nd``'s port ``num`` (cabled to ``peer_id``)."""
    if not found:
        raise InputError(
            f"ibnetdiscover output: {safe_excerpt(nd.node_id, 40)} port {num} is cabled to "
            f"{safe_excerpt(peer_id, 40)}, which the dump does not list",
            hint=HINT,
        )
    return found[0] if len(found) == 1 else _back(num, peer_port, nd, raw, found)
