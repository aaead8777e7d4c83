"""``ibroute -n LID`` text (one switch's unicast linear forwarding table, or several concatenated) ->
per switch GUID, destination LID -> out port. Pure.

The format, as infiniband-diags 44 prints it (``-n``: no destination resolving; without ``-n`` each
entry also carries `` : (Channel Adapter portguid 0x...: 'gpu01 mlx5_0')``, accepted and ignored)::

    Unicast lids [0x0-0x20] of switch Lid 20 guid 0xb8cef60300000006 (leaf-r1-3):
      Lid  Out   Destination
           Port     Info
    0x0001 005
    0x0014 000
    32 valid lids dumped

Port 0 is the switch itself (the entry for its own LID). A switch ibroute could not read leaves
``ibroute: iberror: failed: ...`` on stdout (infiniband-diags 44): skipped here (the notes of
:mod:`.toolerr` say it), and no entry may follow it before the next header. Anything else is refused with its line
number (:class:`~ibdiag.errors.InputError`); sizes are bounded (:data:`MAX_SWITCHES`,
:data:`MAX_ENTRIES`).
"""

from __future__ import annotations

import re

from ibdiag.errors import InputError
from ibdiag.fabric.model import guid_text
from ibdiag.text import safe_excerpt

#: Switches one text may hold.
MAX_SWITCHES = 16384
#: Forwarding entries in all (about 100 bytes of memory each): 400 switches x 10,000 LIDs.
MAX_ENTRIES = 4_000_000
#: Highest unicast LID (0xc000 and up are multicast).
MAX_UNICAST_LID = 0xBFFF
HINT = "give the output of `ibroute -n LID` for each switch (as `ibdiag fabric --routes --save` writes it)"

_HEADER = re.compile(
    r"^Unicast lids \[0x[0-9a-fA-F]{1,4}-0x[0-9a-fA-F]{1,4}\] of switch Lid (\d{1,5}) "
    r"guid (0x[0-9a-fA-F]{1,16}) \(.*\):\s*$"
)
_ENTRY = re.compile(r"^0x([0-9a-fA-F]{1,4}) (\d{1,3})(?:\s*$| : .*$)")
_FAILED = re.compile(r"^ibroute: iberror: failed: ")
_SKIP = re.compile(
    r"^\s*$|^\s*Lid\s+Out\s+Destination\s*$|^\s*Port\s+Info\s*$|^\d+ (?:valid )?lids dumped\s*$"
)

Tables = dict[str, dict[int, int]]


def _bad(n: int, line: str, why: str) -> InputError:
    return InputError(f"ibroute output line {n}: {why}: {safe_excerpt(line, 80)!r}", hint=HINT)


def parse_routes(text: str) -> tuple[Tables, dict[str, int]]:
    """(switch GUID -> {destination LID: out port}, switch GUID -> its LID)."""
    tables: Tables = {}
    lids: dict[str, int] = {}
    cur: dict[int, int] | None = None
    entries = 0
    for n, line in enumerate(text.splitlines(), 1):
        if (m := _ENTRY.match(line)) is not None:
            if cur is None:
                raise _bad(n, line, "a forwarding entry before any switch's header")
            lid, port = int(m.group(1), 16), int(m.group(2))
            if not 0 < lid <= MAX_UNICAST_LID or port > 254:
                raise _bad(n, line, "not a unicast LID and port")
            cur[lid] = port
            entries += 1
            if entries > MAX_ENTRIES:
                raise _bad(n, line, f"more than {MAX_ENTRIES} forwarding entries")
        elif (m := _HEADER.match(line)) is not None:
            guid = guid_text(int(m.group(2), 16))
            if guid in tables:
                raise _bad(n, line, f"switch {guid} listed twice")
            if len(tables) >= MAX_SWITCHES:
                raise _bad(n, line, f"more than {MAX_SWITCHES} switches")
            cur = tables[guid] = {}
            lids[guid] = int(m.group(1))
        elif _FAILED.match(line):
            cur = None
        elif not _SKIP.match(line):
            raise _bad(n, line, "not a line of ibroute's unicast table")
    return tables, lids
