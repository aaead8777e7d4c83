"""Directors: switch chips that are one chassis. Pure.

A director (CS7500, CS8500, Voltaire 4700) is many switch ASICs in one box: line chips (the ports on
the front, ``L01``...) and spine chips joining them inside (``S01``...). Discovery sees each chip as a
switch of its own, each with its own node GUID; they share the chassis's system image GUID, and a
managed one describes each chip ``MF0;<chassis>:<model>/<slot>/U<n>``. Chips are grouped by the system
image GUID where two or more switches share it, else by the description's chassis name and model.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from ibdiag.fabric.model import SWITCH, Fabric
from ibdiag.fabric.naming import mf0


@dataclass(frozen=True)
class Chassis:
    name: str
    """The operator's name of the box (``ib-core1``), else its system image GUID."""
    model: str | None
    """``MCS8500`` (from the chips' descriptions), None when they do not say."""
    members: tuple[str, ...]
    """The chips' node GUIDs."""
    slots: dict[str, str]
    """Chip GUID -> its slot (``L03``, ``S07``), where the description says."""

    def kind(self, guid: str) -> str:
        """``line``, ``spine`` or ``chip`` (slot unknown)."""
        slot = self.slots.get(guid, "")
        return {"L": "line", "S": "spine"}.get(slot[:1], "chip")

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "model": self.model,
            "members": list(self.members),
            "slots": dict(sorted(self.slots.items())),
        }


def chassis(fab: Fabric) -> tuple[Chassis, ...]:
    """Every group of two or more switch chips in one box, by system image GUID or description."""
    by_img: dict[str, list[str]] = defaultdict(list)
    by_name: dict[tuple[str, str], list[str]] = defaultdict(list)
    for n in fab.nodes:
        if n.kind != SWITCH:
            continue
        if n.sysimg_guid is not None:
            by_img[n.sysimg_guid].append(n.guid)
        m = mf0(n.desc)
        if m is not None and m.slot:
            by_name[(m.name, m.model)].append(n.guid)
    groups: list[list[str]] = [g for g in by_img.values() if len(g) > 1]
    grouped = {x for g in groups for x in g}
    groups += [
        [x for x in g if x not in grouped]
        for g in by_name.values()
        if len([x for x in g if x not in grouped]) > 1
    ]
    out = []
    for members in groups:
        descs = [mf0(fab.node(g).desc) for g in members]  # type: ignore[union-attr]
        named = [d for d in descs if d is not None]
        img = fab.node(members[0]).sysimg_guid  # type: ignore[union-attr]
        name = named[0].name if named else (img or members[0])
        model = named[0].model if named else None
        slots = {g: d.slot for g, d in zip(members, descs, strict=True) if d is not None and d.slot}
        out.append(Chassis(name, model, tuple(sorted(members)), slots))
    return tuple(sorted(out, key=lambda c: c.name))


def chassis_of(boxes: tuple[Chassis, ...]) -> dict[str, Chassis]:
    return {g: c for c in boxes for g in c.members}
