"""A saved file of one tool's output -- or of several, pasted one after another -- told apart by the
shape of its lines, and a fabric from what they hold. Pure.

``ibdiag fabric --from FILE`` takes a dump saved by ``--save``, a file of ``ibnetdiscover`` output,
or a paste of ``iblinkinfo`` (either form), ``ibqueryerrors`` (with the ``ibhosts``/``ibswitches``
lines often run before it), ``perfquery`` (``-x`` or not) or ``sminfo``: each is judged for what it
holds. A topology comes from ``ibnetdiscover`` or, without it, from ``iblinkinfo`` (adapters then keyed
by port GUID, as iblinkinfo lists them); counters from ``ibqueryerrors`` or ``perfquery``; the subnet
manager from ``sminfo``. What a paste does not hold is not judged (a counters paste has no links: no
shape, no rails, no link rates).
"""

from __future__ import annotations

import re

from ibdiag.fabric.capture import Capture, ToolRun
from ibdiag.fabric.devices import AN_DESC
from ibdiag.fabric.linkinfo import LinkLine
from ibdiag.fabric.model import CA, SWITCH, FabricNode, FabricPort, PortRef, guid_text
from ibdiag.fabric.pasted import MAX_LINE, is_junk, normalise
from ibdiag.text import safe_excerpt

#: Each tool's lines (the first that matches names the tool of a line; others continue a section).
_TOOLS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "ibnetdiscover",
        re.compile(
            r'^(?:(?:vendid|devid|sysimgguid|switchguid|caguid|routerguid)=|(?:Switch|Ca|Rt)\s*\d{1,3}\s*"|\[\d{1,3}\](?:\([0-9a-fA-F]{1,16}\))?\s*"|# Topology file|# Initiated from)'
        ),
    ),
    (
        "iblinkinfo",
        re.compile(
            r'^(?:(?:Switch|CA|Router):\s|0x[0-9a-fA-F]{1,16}\s+"|(?:0x[0-9a-fA-F]{1,16}\s+)?\d{1,5}\s+\d{1,3}\[[^\]]{0,8}\]\s+==\()'
        ),
    ),
    ("ibnodes", re.compile(r'^(?:Ca|Switch|Router)\s*: 0x[0-9a-fA-F]{1,16} ports \d{1,3} "')),
    (
        "ibqueryerrors",
        re.compile(
            r"^(?:(?:Errors|Data Counters) for 0x|GUID 0x[0-9a-fA-F]{1,16} port |## |Suppressing:)"
        ),
    ),
    (
        "perfquery",
        re.compile(
            r"^(?:# Port (?:extended )?counters: Lid \d{1,5} port \d{1,3}|\w{1,48}:\.{2,}\S)"
        ),
    ),
    ("sminfo", re.compile(r"^sminfo: sm lid \d{1,5} ")),
)
#: A substring every other tool's output has and ibnetdiscover's never does.
_MARKERS = (
    "==(",
    "Errors for 0x",
    "Data Counters for 0x",
    "GUID 0x",
    "counters: Lid",
    "sminfo:",
    " ports ",
)
_NODES = re.compile(
    r'^(Ca|Switch|Router)\s*: 0x([0-9a-fA-F]{1,16}) ports (\d{1,3}) "(.{0,200})"(?:\s+(?:base|enhanced) port 0 lid (\d{1,5}))?'
)
#: ``PortXmitData:....................59616`` (a value of at most 20 digits: 64 bits).
_PQ_FIELD = re.compile(r"^(\w{1,48}):\.+(\d{1,20})\s*$", re.M)
_PQ_HEAD = re.compile(r"^# Port (?:extended )?counters: Lid (\d{1,5}) port (\d{1,3})", re.M)


def split(text: str) -> dict[str, str]:
    """Tool name -> its lines, in order. A line no tool's shape names continues the section it is in
    (its parser judges it); lines before any are left out."""
    out: dict[str, list[str]] = {}
    tool: str | None = None
    for raw in normalise(text).splitlines():
        line = raw.strip()
        if not line or is_junk(line) or len(line) > MAX_LINE:
            if line and tool is not None and len(line) > MAX_LINE:
                out[tool].append(line)  # refused there, with its number
            continue
        named = next((t for t, rx in _TOOLS if rx.match(line)), None)
        if named is not None:
            tool = named
        if tool is not None:
            out.setdefault(tool, []).append(raw)
    return {t: "\n".join(ls) + "\n" for t, ls in out.items()}


def capture(source: str, text: str) -> Capture:
    """A capture of the tools a plain file holds (``ibnetdiscover`` when nothing else is recognised:
    its parser says what is wrong)."""
    if not any(marker in text for marker in _MARKERS):
        # No other tool's lines (the common case: a saved ibnetdiscover file): not split line by line.
        return Capture(source, (ToolRun("ibnetdiscover", "ibnetdiscover", text, "", 0),), None)
    parts = split(text)
    if not parts or set(parts) == {"ibnetdiscover"}:
        return Capture(source, (ToolRun("ibnetdiscover", "ibnetdiscover", text, "", 0),), None)
    runs = tuple(ToolRun(name, f"{name} (pasted)", body, "", 0) for name, body in parts.items())
    return Capture(source, runs, None)


def node_list(text: str) -> dict[str, FabricNode]:
    """``ibhosts``/``ibswitches``/``ibnodes`` lines -> nodes by GUID (kind, ports, description)."""
    out: dict[str, FabricNode] = {}
    for raw in text.splitlines():
        m = _NODES.match(raw.strip())
        if m is None:
            continue
        kind = {"Ca": CA, "Switch": SWITCH}.get(m.group(1), "router")
        guid = guid_text(int(m.group(2), 16))
        lid = int(m.group(5)) if m.group(5) else None
        out[guid] = FabricNode(
            guid, kind, safe_excerpt(m.group(4), 96), int(m.group(3)), lid or None
        )
    return out


def perfquery_blocks(text: str) -> dict[tuple[int, int], dict[str, int]]:
    """``perfquery`` output -> counters by IBA name per (LID, port): one block per ``# Port … counters``
    heading (``perfquery -x`` and plain ``perfquery`` of one port merge)."""
    out: dict[tuple[int, int], dict[str, int]] = {}
    heads = list(_PQ_HEAD.finditer(text))
    for i, h in enumerate(heads):
        body = text[h.end() : heads[i + 1].start() if i + 1 < len(heads) else len(text)]
        values = {m.group(1): int(m.group(2)) for m in _PQ_FIELD.finditer(body)}
        values.pop("PortSelect", None)
        out.setdefault((int(h.group(1)), int(h.group(2))), {}).update(values)
    return out


def from_linkinfo(
    lines: tuple[LinkLine, ...], known: dict[str, FabricNode]
) -> tuple[tuple[FabricNode, ...], tuple[FabricPort, ...]]:
    """Nodes and ports from iblinkinfo alone: an adapter is keyed by its port GUID (iblinkinfo names
    it so); a node's kind is its heading's (default form), an ``ibnodes`` line's, or, in ``-l`` form,
    a switch when it lists more than two ports or a port above 2. A far end the paste does not list
    (``iblinkinfo -S`` of one switch) is kept as ``LID <n>`` with the description iblinkinfo gave it,
    so its link is still judged."""
    by_lid = {n.lid: g for g, n in known.items() if n.lid}
    by_node: dict[str, list[LinkLine]] = {}
    for ln in lines:
        by_node.setdefault(ln.guid, []).append(ln)
    nodes: dict[str, FabricNode] = {}
    for guid, mine in by_node.items():
        kind = mine[0].kind or (known[guid].kind if guid in known else None)
        if kind is None:
            kind = SWITCH if len(mine) > 2 or max(ln.port for ln in mine) > 2 else CA
        lid = mine[0].lid if kind == SWITCH else None
        nodes[guid] = FabricNode(guid, kind, mine[0].desc, max(ln.port for ln in mine), lid)
    ports: list[FabricPort] = []
    far: list[FabricPort] = []
    for ln in lines:
        peer = PortRef(ln.peer_guid, ln.peer_port) if ln.peer_guid and ln.peer_port else None
        if peer is None and ln.peer_lid and ln.peer_port:
            key = by_lid.get(ln.peer_lid) or f"LID {ln.peer_lid}"
            if key not in nodes:
                kind = (
                    known[key].kind
                    if key in known
                    else (CA if ln.peer_desc == AN_DESC else "unknown")
                )
                nodes[key] = FabricNode(key, kind, ln.peer_desc, ln.peer_port, ln.peer_lid)
            peer = PortRef(key, ln.peer_port)
            far.append(
                FabricPort(
                    key,
                    ln.peer_port,
                    ln.state,
                    ln.phys_state,
                    ln.width,
                    ln.speed,
                    PortRef(ln.guid, ln.port),
                    ln.peer_lid,
                )
            )
        kind = nodes[ln.guid].kind
        ports.append(
            FabricPort(
                ln.guid,
                ln.port,
                ln.state,
                ln.phys_state,
                ln.width,
                ln.speed,
                peer,
                ln.lid,
                ln.guid if kind == CA else None,
                ln.could_be,
            )
        )
    listed = {(p.guid, p.port) for p in ports}
    ports += [p for p in far if (p.guid, p.port) not in listed]
    return tuple(nodes.values()), tuple(ports)
