"""The names operators use for switches and unnamed adapters, unique across the fabric. Pure.

Managed NVIDIA switches describe themselves ``MF0;<hostname>:<model>/<slot>/U<n>``
(``MF0;leaf-su1-r2:MQM8700/U1``; a director's chips ``MF0;ib-core1:MCS8500/L03/U1``, line card 3, and
``…/S07/U1``, spine 7): the operator knows ``leaf-su1-r2`` and ``ib-core1/L03``. An unmanaged switch
or an adapter without rdma-ndd keeps its firmware's default description (``Quantum Mellanox
Technologies``, ``MT25408 ConnectX Mellanox Technologies``), which a whole fabric shares. A name two
nodes share is told apart by the node's GUID (``Quantum Mellanox Technologies (0x98039b030096aa24)``)
and a finding's one-token subject becomes the GUID itself: no two subjects name different nodes.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from ibdiag.fabric.model import CA, Fabric

_MF0 = re.compile(r"^MF0;([^:;\s]{1,64}):([^/\s]{1,32})((?:/[A-Za-z]{1,2}\d{1,3}){0,4})$")
#: Voltaire's managed switches: ``Voltaire 4036 # hoibp0013`` (model, then the name the site gave it).
_VOLTAIRE = re.compile(r"^Voltaire \S{1,16} # (\S{1,64})$")
#: ``MT25408 ConnectX Mellanox Technologies``, ``Quantum Mellanox Technologies``, ``SwitchIB …``.
_DEFAULT = re.compile(r"^(?:MT\d{3,6}\s+)?(?:[\w-]{1,24}\s+){0,3}Mellanox Technologies$")


@dataclass(frozen=True)
class Mf0:
    name: str
    model: str
    slot: str
    """``L03``, ``S07``, ``L02/U2``; empty for a standalone switch (``U1``)."""


def mf0(desc: str) -> Mf0 | None:
    m = _MF0.match(desc)
    if m is None:
        return None
    parts = [p for p in m.group(3).split("/") if p]
    if parts and parts[-1] == "U1":
        parts = parts[:-1]
    return Mf0(m.group(1), m.group(2), "/".join(parts))


def operator_name(desc: str) -> str:
    """``MF0;leaf-su1-r2:MQM8700/U1`` -> ``leaf-su1-r2``; ``MF0;core1:MCS8500/L03/U1`` -> ``core1/L03``;
    ``Voltaire 4036 # hoibp0013`` -> ``hoibp0013``; any other description as it is."""
    m = mf0(desc)
    if m is None:
        v = _VOLTAIRE.match(desc)
        return v.group(1) if v else desc
    return f"{m.name}/{m.slot}" if m.slot else m.name


def is_default_desc(desc: str) -> bool:
    """The firmware's own description (no host or switch name set), or none."""
    text = desc.strip()
    return not text or (text.endswith("Mellanox Technologies") and bool(_DEFAULT.match(text)))


def labels(fab: Fabric, given: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """Per node GUID: its display name and its one-token subject, unique in the fabric. ``given``:
    the names already known for some nodes (a node-name map, a host's ``host adapter``)."""
    base: dict[str, str] = {}
    for n in fab.nodes:
        name = given.get(n.guid)
        if name is None:
            name = n.desc if n.kind == CA else operator_name(n.desc)
        base[n.guid] = name.strip()
    seen = Counter(base.values())
    shown: dict[str, str] = {}
    tokens: dict[str, str] = {}
    for n in fab.nodes:
        name = base[n.guid]
        unique = (
            bool(name) and seen[name] == 1 and not (n.guid not in given and is_default_desc(name))
        )
        shown[n.guid] = name if unique else (f"{name} ({n.guid})" if name else n.guid)
        tokens[n.guid] = "/".join(name.split()) if unique else n.guid
    return shown, tokens
