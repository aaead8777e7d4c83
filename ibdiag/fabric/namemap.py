"""Node-name maps: a site's names for nodes by GUID, in the spellings the IB tools and sites use. Pure.

infiniband-diags and opensm read ``/etc/rdma/ib-node-name-map`` (``--node-name-map FILE``; rdma-core
``util/node_name_map.c``): ``#`` comments, then one node a line, its GUID as C's ``strtoull(…, 0)``
reads it (``0x``-prefixed hex, or decimal) and its name, quoted or not::

    # GUID              Node Name
    0x0008f10400411a08 "SW1  (Rack  3) ISR9024 Voltaire 9024D"
    0x0002c90300080d28 r510gluster4

Sites that feed ``ibnetdiscover`` output to their own tools write the node id instead of the GUID
(``H-0002c90300080d28 r510gluster4``, ``S-…`` for a switch); a bare 16-hex-digit GUID is read too.
A GUID given twice with two names is refused (rdma-core keeps the first silently); a malformed line
is refused with its number (exit 2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ibdiag.errors import InputError
from ibdiag.text import safe_excerpt, safe_value

MAX_MAP_BYTES = 16 * 2**20
MAX_LINE = 1024
NAME_LIMIT = 64
HINT = 'one node a line: 0x<GUID> "name" (ibnetdiscover --node-name-map), or H-<GUID> name'

_LINE = re.compile(
    r"^(?:0x([0-9a-fA-F]{1,16})|[SHR]-([0-9a-fA-F]{1,16})|([0-9a-fA-F]{16})|(\d{1,20}))(?=\s|#|$)\s*(.*)$"
)


@dataclass(frozen=True)
class NodeNameMap:
    source: str
    names: dict[str, str] = field(default_factory=dict)
    """Node GUID (``0x`` + 16 hex digits) -> name."""

    def get(self, guid: str) -> str | None:
        return self.names.get(guid)


def _name(rest: str) -> str:
    """The name after the GUID: up to the closing quote when quoted, else up to a ``#``."""
    rest = rest.strip()
    if rest.startswith('"'):
        return rest[1:].split('"', 1)[0].strip()
    return rest.split("#", 1)[0].strip()


def parse_node_name_map(text: str, source: str) -> NodeNameMap:
    names: dict[str, str] = {}
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip().lstrip("\ufeff")
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line) if len(line) <= MAX_LINE else None
        if m is None:
            raise InputError(
                f"{source} line {no}: {safe_excerpt(line, 60)}: not <GUID> <name>", hint=HINT
            )
        hexa = m.group(1) or m.group(2) or m.group(3)
        value = int(hexa, 16) if hexa else int(m.group(4))
        if value >= 2**64:
            raise InputError(
                f"{source} line {no}: {safe_excerpt(line, 40)}: not a 64-bit GUID", hint=HINT
            )
        name = _name(m.group(5))
        if not name or len(name) > NAME_LIMIT or not name.isprintable():
            raise InputError(
                f"{source} line {no}: {safe_value(name[:NAME_LIMIT]) or 'no name'}: a name is 1-{NAME_LIMIT} printable characters",
                hint=HINT,
            )
        guid = f"0x{value:016x}"
        if names.get(guid, name) != name:
            raise InputError(
                f"{source} line {no}: {guid} is named twice ({safe_value(names[guid])}, {safe_value(name)})",
                hint=HINT,
            )
        names[guid] = name
    return NodeNameMap(source, names)
