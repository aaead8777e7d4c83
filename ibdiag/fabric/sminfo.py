"""``sminfo`` and ``saquery -s`` output -> subnet managers. Pure.

``sminfo: sm lid 1 sm guid 0x2c90300000101, activity count 1144 priority 0 state 3 SMINFO_MASTER``;
``saquery -s`` lists the ports with the IsSM capability (``EndPortLid....1`` per record).
"""

from __future__ import annotations

import re

from ibdiag.errors import InputError
from ibdiag.fabric.model import SubnetManager, guid_text

_SMINFO = re.compile(
    r"sm lid (\d+) sm guid 0x([0-9a-fA-F]{1,16}), activity count (\d+) priority (\d+) state (\d) (\w+)"
)
_STATES = {0: "not-active", 1: "discovering", 2: "standby", 3: "master"}
_SA_LID = re.compile(r"^\s*EndPortLid\.+(\d+)\s*$", re.M)


def parse_sminfo(text: str) -> SubnetManager:
    m = _SMINFO.search(text)
    if m is None:
        raise InputError(
            "sminfo output holds no 'sm lid … state …' line",
            hint="give the output of `sminfo`, or a directory saved by `ibdiag fabric --save`",
        )
    return SubnetManager(
        lid=int(m.group(1)),
        guid=guid_text(int(m.group(2), 16)),
        priority=int(m.group(4)),
        state=_STATES.get(int(m.group(5)), "unknown"),
        activity=int(m.group(3)),
    )


def parse_sm_lids(text: str) -> tuple[int, ...]:
    """LIDs of the ports that carry the IsSM capability (``saquery -s``), in order, once each."""
    seen: dict[int, None] = {}
    for m in _SA_LID.finditer(text):
        seen.setdefault(int(m.group(1)), None)
    return tuple(seen)
