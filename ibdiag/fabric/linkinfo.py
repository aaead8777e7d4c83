"""``iblinkinfo -l`` output -> every port's state, physical state, width and speed. Pure.

::

    0xb8cef603000a0002 "      leaf2"  3  7[  ] ==( 4X  53.125 Gbps Active/  LinkUp)==>  0xb8cef603000a0001  2  7[  ] "leaf1" (Could be 12X )
    0xb8cef603000a0002 "      leaf2"  3  8[  ] ==(                Down/ Polling)==>             [  ] "" ( )

Adapters are listed by port GUID, switches by node GUID; the speed is the lane's signalling rate.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from ibdiag.errors import InputError
from ibdiag.fabric.model import guid_text

HINT = "give the output of `iblinkinfo -l` (one line per port), or a directory saved by `ibdiag fabric --save`"

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

_LINE = re.compile(
    r'^0x([0-9a-fA-F]{1,16})\s+"(.*?)"\s+(\d+)\s+(\d{1,3})\[[^\]]*\]\s+==\(\s*'
    r"(?:(\d{1,2})X\s+([\d.]+)\s+Gbps\s+)?([A-Za-z]+)/\s*([A-Za-z]+)\s*\)==>\s*"
    r'(?:(?:0x([0-9a-fA-F]{1,16})\s+(\d+)\s+(\d{1,3}))?\s*\[[^\]]*\]\s+"(.*)"\s+\((.*)\)|"(Port not available)")\s*$'
)


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


@functools.lru_cache(maxsize=4)  # an output parsed while the other tools ran is not parsed twice
def parse_linkinfo(text: str) -> tuple[LinkLine, ...]:
    out: list[LinkLine] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None:
            # iblinkinfo's own headers for a switch block (without -l) are not this format.
            raise InputError(
                f"iblinkinfo output, line {n}: not a `iblinkinfo -l` port line", hint=HINT
            )
        speed_text = m.group(6)
        speed = None
        if speed_text is not None:
            speed = LANE_SPEED.get(speed_text)
            if speed is None:
                raise InputError(
                    f"iblinkinfo output, line {n}: unknown lane speed {speed_text[:12]} Gbps",
                    hint=HINT,
                )
        out.append(
            LinkLine(
                guid=guid_text(int(m.group(1), 16)),
                lid=int(m.group(3)) or None,
                port=int(m.group(4)),
                state=_STATE.get(m.group(7), m.group(7)[:20]),
                phys_state=m.group(8)[:30],
                width=int(m.group(5)) if m.group(5) else None,
                speed=speed,
                peer_guid=guid_text(int(m.group(9), 16)) if m.group(9) else None,
                peer_port=int(m.group(11)) if m.group(11) else None,
                could_be=" ".join((m.group(13) or "").replace("Could be", "").split())[:40],
                peer_unknown=m.group(14) is not None,
            )
        )
    return tuple(out)


_STATE = {"Init": "Initialize"}
