"""``iblinkinfo`` output -> every port's state, physical state, width and speed. Pure.

Both of its forms. ``iblinkinfo -l`` (what ``ibdiag fabric`` runs) gives one line per port::

    0xb8cef603000a0002 "      leaf2"  3  7[  ] ==( 4X  53.125 Gbps Active/  LinkUp)==>  0xb8cef603000a0001  2  7[  ] "leaf1" (Could be 12X )
    0xb8cef603000a0002 "      leaf2"  3  8[  ] ==(                Down/ Polling)==>             [  ] "" ( )

Its default form (what people paste) puts each node's ports under a heading and names the far end by
LID and port only (the far end's GUID is found through its own heading's LIDs)::

    Switch: 0x0002c9020046c588 Infiniscale-IV Mellanox Technologies:
               2    1[  ] ==( 4X          10.0 Gbps Active/  LinkUp)==>       6    1[  ] "ip-211 mlx4_0" ( )
    CA: ip-211 mlx4_0:
          0x0002c90300293e1f      6    1[  ] ==( 4X          10.0 Gbps Active/  LinkUp)==>       2    1[  ] "Infiniscale-IV Mellanox Technologies" ( )

Adapters are listed by port GUID, switches by node GUID; the speed is the lane's signalling rate.
Lines that are clearly not the output (a prompt, a stderr line) are skipped (:mod:`.pasted`).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace

from ibdiag.errors import InputError
from ibdiag.fabric.model import CA, SWITCH, built, guid_text
from ibdiag.fabric.pasted import MAX_LINE, lines
from ibdiag.text import safe_excerpt

HINT = "give the output of `iblinkinfo` (its default form or -l), or a directory saved by `ibdiag fabric --save`"

#: Lane signalling rate as iblinkinfo prints it -> IBA speed name.
LANE_SPEED: dict[str, str] = {
    "2.5": "SDR",
    "5.0": "DDR",
    "10.0": "QDR",
    "10.3125": "FDR10",
    "14.0625": "FDR",
    "25.78125": "EDR",
    "53.125": "HDR",
    "106.25": "NDR",
    "212.5": "XDR",
}

_LINK = (
    r"(\d{1,5})\s+(\d{1,3})\[[^\]]{0,8}\]\s+==\(\s*"
    r"(?:(\d{1,2})X\s+([\d.]{1,10})\s+Gbps\s+)?([A-Za-z]{1,20})/\s*([A-Za-z]{1,30})\s*\)==>\s*"
)
_LINE = re.compile(
    r'^0x([0-9a-fA-F]{1,16})\s+"(.{0,200}?)"\s+'
    + _LINK
    + r'(?:(?:0x([0-9a-fA-F]{1,16})\s+(\d{1,5})\s+(\d{1,3})\s*)?\[[^\]]{0,8}\]\s+"(.{0,200})"\s+\((.{0,120})\)|"(Port not available)")\s*$'
)
#: ``-l``'s common line, quotes and parentheses only where the grammar puts them: the same groups as
#: :data:`_LINE` (the 14th, "Port not available", never matches here) with fewer ways to backtrack;
#: any other line (a quote inside a description, a far end not discovered) takes :data:`_LINE`. The
#: spaces before the far end's ``[`` belong to one run only (``_LINK``'s, or the far end's own):
#: two runs side by side were quadratic on a line of spaces.
_FAST_LINE = re.compile(
    r'^0x([0-9a-fA-F]{1,16})\s+"([^"]{0,200})"\s+'
    + _LINK
    + r'(?:0x([0-9a-fA-F]{1,16})\s+(\d{1,5})\s+(\d{1,3})\s*)?\[[^\]]{0,8}\]\s+"([^"]{0,200})"\s+\(([^()]{0,120})\)((?!))?\s*$'
)
_HEAD = re.compile(r"^(Switch|CA|Router):\s+(?:(0x[0-9a-fA-F]{1,16})\s+)?(.{0,200}):$")
_PLAIN = re.compile(
    r"^(?:0x([0-9a-fA-F]{1,16})\s+)?"
    + _LINK
    + r'(?:(?:(\d{1,5})\s+(\d{1,3})\s*)?\[[^\]]{0,8}\]\s+"(.{0,200})"\s+\((.{0,120})\)|"(Port not available)")\s*$'
)
_STATE = {"Init": "Initialize"}


@dataclass(frozen=True)
class LinkLine:
    guid: str
    """Node GUID of a switch; port GUID of an adapter (iblinkinfo's own choice)."""
    lid: int | None
    port: int
    state: str
    phys_state: str
    width: int | None
    speed: str | None
    peer_guid: str | None
    peer_port: int | None
    could_be: str
    peer_unknown: bool = False
    """The port is up but its peer was not discovered (iblinkinfo: "Port not available")."""
    desc: str = ""
    """The node's description."""
    kind: str | None = None
    """``switch`` or ``ca`` where the output says (its default form's headings)."""
    peer_desc: str = ""
    peer_lid: int | None = None


def _bad(n: int, why: str) -> InputError:
    return InputError(f"iblinkinfo output, line {n}: {why}", hint=HINT)


def _speed(text: str | None, n: int) -> str | None:
    if text is None:
        return None
    speed = LANE_SPEED.get(text)
    if speed is None:
        raise _bad(n, f"unknown lane speed {text[:12]} Gbps")
    return speed


def _link(m: re.Match[str], at: int, n: int) -> dict[str, object]:
    """The fields of the link part, from group ``at`` on (lid, port, width, speed, state, phys)."""
    g = m.group
    return {
        "lid": int(g(at)) or None,
        "port": int(g(at + 1)),
        "width": int(g(at + 2)) if g(at + 2) else None,
        "speed": _speed(g(at + 3), n),
        "state": _STATE.get(g(at + 4), g(at + 4)[:20]),
        "phys_state": g(at + 5)[:30],
    }


def _could(text: str | None) -> str:
    return " ".join((text or "").replace("Could be", "").split())[:40]


@functools.lru_cache(maxsize=4)  # an output parsed while the other tools ran is not parsed twice
def parse_linkinfo(text: str) -> tuple[LinkLine, ...]:
    out: list[LinkLine] = []
    head: tuple[str, str | None, str] | None = None  # (kind, guid, desc) of the default form
    junk: list[tuple[int, str]] = []
    for n, line in lines(text, junk):
        if line.startswith("#"):
            continue
        if len(line) > MAX_LINE:
            raise _bad(n, f"a line of {len(line)} characters")
        m = _FAST_LINE.match(line) or _LINE.match(line)
        if m is not None:
            out.append(_long(m, n))
            continue
        h = _HEAD.match(line)
        if h is not None:
            kind = SWITCH if h.group(1) == "Switch" else CA
            head = (kind, h.group(2), safe_excerpt(h.group(3).strip(), 96))
            continue
        p = _PLAIN.match(line)
        if p is None or head is None:
            raise _bad(n, f"not a port line of iblinkinfo: {safe_excerpt(line, 60)}")
        out.append(_plain(p, head, n))
    return _resolve_lids(out)


def _long(m: re.Match[str], n: int) -> LinkLine:
    """A line of ``-l`` (:data:`_LINE`'s groups), built by :func:`~ibdiag.fabric.model.built` (the frozen
    dataclass's ``__init__`` of 15 fields, once per port of the fabric, was most of the parse)."""
    guid, desc, lid, port, width, speed, state, phys, pg, plid, pport, pdesc, could, unknown = (
        m.groups()
    )
    return built(
        LinkLine,
        {
            "guid": guid_text(int(guid, 16)),
            "lid": int(lid) or None,
            "port": int(port),
            "state": _STATE.get(state, state[:20]),
            "phys_state": phys[:30],
            "width": int(width) if width else None,
            "speed": _speed(speed, n),
            "peer_guid": guid_text(int(pg, 16)) if pg else None,
            "peer_port": int(pport) if pport else None,
            "could_be": _could(could),
            "peer_unknown": unknown is not None,
            "desc": safe_excerpt(desc.strip(), 96),
            "kind": None,
            "peer_desc": safe_excerpt(pdesc or "", 96),
            "peer_lid": int(plid) if plid else None,
        },
    )


def _plain(p: re.Match[str], head: tuple[str, str | None, str], n: int) -> LinkLine:
    kind, guid, desc = head
    own = p.group(1) or (guid[2:] if guid else None)
    if own is None:
        raise _bad(n, "an adapter's port line without its port GUID")
    f = _link(p, 2, n)
    return LinkLine(
        guid=guid_text(int(own, 16)),
        peer_guid=None,
        peer_port=int(p.group(9)) if p.group(9) else None,
        could_be=_could(p.group(11)),
        peer_unknown=p.group(12) is not None,
        desc=desc,
        kind=kind,
        peer_desc=safe_excerpt(p.group(10) or "", 96),
        peer_lid=int(p.group(8)) if p.group(8) else None,
        **f,  # type: ignore[arg-type]
    )


def _resolve_lids(out: list[LinkLine]) -> tuple[LinkLine, ...]:
    """The default form names a far end by LID and port: its GUID is the node listed with that LID
    (a switch's LID is its port 0's, an adapter's its port's)."""
    by_lid: dict[int, str] = {}
    for ln in out:
        if ln.lid is not None:
            by_lid.setdefault(ln.lid, ln.guid)
    return tuple(
        replace(ln, peer_guid=by_lid.get(ln.peer_lid))
        if ln.peer_guid is None and ln.peer_lid is not None and ln.kind is not None
        else ln
        for ln in out
    )
