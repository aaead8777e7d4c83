"""``ibqueryerrors --data --details`` output -> counters per (node GUID, port), IBA names. Pure.

::

    Errors for 0xb8cef603000a0001 "leaf1"
       GUID 0xb8cef603000a0001 port ALL: [SymbolErrorCounter == 57] ...
       GUID 0xb8cef603000a0001 port 1: [SymbolErrorCounter == 57] [PortXmitData == 22752 (88.875KB)] ...

Only ports with an error counter above its threshold (0 unless a threshold file says otherwise) are
listed: a port that is not listed counted no errors. ``port ALL`` (the node's sum) is skipped. The
``## ... PMA query failures`` footer and stderr are the tool notes' business (:mod:`.toolerr`).
"""

from __future__ import annotations

import re

from ibdiag.errors import InputError
from ibdiag.fabric.model import guid_text

HINT = "give the output of `ibqueryerrors --data --details`, or a directory saved by `ibdiag fabric --save`"

_NODE = re.compile(r'^(?:Errors|Data Counters) for 0x([0-9a-fA-F]{1,16})\s+"(.*)"\s*$')
_PORT = re.compile(r"^GUID 0x([0-9a-fA-F]{1,16}) port (ALL|\d{1,3}):\s*(.*)$")
#: 20 digits: a 64-bit counter; the bracket after it: ``(88.875KB)``.
_VALUE = re.compile(r"\[(\w{1,48}) == (\d{1,20})(?: \([^)\]]{0,32}\))?\]")
_SKIP = re.compile(r"^(##|Suppressing|Thresholds|\s*$)")


def parse_queryerrors(text: str) -> dict[tuple[str, int], dict[str, int]]:
    out: dict[tuple[str, int], dict[str, int]] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if _SKIP.match(line) or _NODE.match(line):
            continue
        m = _PORT.match(line)
        if m is None:
            # Lines such as "Link info:" (-r) or a tool's complaint on stdout: not counters.
            if line.startswith(("Link info", "0x", "ibwarn", "ibpanic")):
                continue
            raise InputError(f"ibqueryerrors output, line {n}: not a counters line", hint=HINT)
        if m.group(2) == "ALL":
            continue
        values = {name: int(v) for name, v in _VALUE.findall(m.group(3))}
        rest = _VALUE.sub("", m.group(3)).strip()
        if rest and not rest.startswith("Link"):
            raise InputError(
                f"ibqueryerrors output, line {n}: unreadable counter values after GUID … port {m.group(2)}",
                hint=HINT,
            )
        key = (guid_text(int(m.group(1), 16)), int(m.group(2)))
        out.setdefault(key, {}).update(values)
    return out
