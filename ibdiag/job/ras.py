"""A RAS reply or file, whichever format it is in, -> :class:`RasStatus`, checked for what RAS itself
gets wrong.

:func:`parse_ras` tells the JSON status from the text report by its first character (after any
``SERVER PROTOCOL``/``OK`` lines a raw ``nc`` capture holds), parses it (:mod:`.rastext`,
:mod:`.rasjson`) and then distrusts what NCCL's own bugs can produce:

* a rank number at or above its communicator's size, or a table row of communicators with no rank
  and no node: RAS walked its buffer wrongly (NVIDIA/nccl#1762: NCCL 2.26 to 2.29.1 mis-step past a
  communicator with missing ranks and print ``Rank 1057455228``). Such details are dropped, with a note;
* with those versions, any communicator with missing ranks makes the ones RAS lists after it suspect:
  a note says so.
"""

from __future__ import annotations

import re
from dataclasses import replace

from ibdiag.errors import InputError
from ibdiag.job.model import RasComm, RasStatus
from ibdiag.job.rasjson import parse_json
from ibdiag.job.rastext import parse_text

HINT = (
    "give what `ncclras` printed (text, NCCL 2.24 or later) or `ncclras -f json` (NCCL 2.28.7 or "
    "later), unchanged"
)
_PROTOCOL = re.compile(r"^(?:SERVER PROTOCOL \d{1,6}|OK)[ \t]*\r?$", re.IGNORECASE)
_VERSION = re.compile(r"^(\d{1,3})\.(\d{1,3})\.(\d{1,3})")
#: NCCL versions whose RAS mis-steps past a communicator with missing ranks (NVIDIA/nccl#1762):
#: 2.26.2 added the missing-rank records, 2.29.2 fixed the walk.
WALK_BUG = ((2, 26, 0), (2, 29, 2))


def version_tuple(text: str | None) -> tuple[int, int, int] | None:
    """``2.28.9+cuda12.9`` -> (2, 28, 9); None when it does not start with a version."""
    m = _VERSION.match(text or "")
    return None if m is None else (int(m.group(1)), int(m.group(2)), int(m.group(3)))


def _strip_protocol(text: str) -> str:
    lines = text.split("\n", 8)
    i = 0
    while i < len(lines) - 1 and _PROTOCOL.match(lines[i][:64]):
        i += 1
    return text if i == 0 else "\n".join(lines[i:])


def parse_ras(data: bytes, source: str) -> RasStatus:
    """The RAS status in ``data``; :class:`InputError` (exit 2) when it holds none."""
    text = _strip_protocol(data.decode("utf-8", errors="replace"))
    if text.lstrip()[:1] == "{":
        status = parse_json(text, source)
    else:
        parsed = parse_text(text, source)
        if parsed is None:
            raise InputError(
                f"{source}: not a NCCL RAS report (no 'NCCL version ... compiled with CUDA' line, "
                "no Job summary, no Communicators table) and not a RAS JSON status",
                hint=HINT,
            )
        status = parsed
    return plausible(status)


def _bad_ranks(c: RasComm) -> list[int]:
    if c.size is None:
        return []
    return [r.rank for r in (*c.ranks, *c.missing) if r.rank >= c.size]


def plausible(status: RasStatus) -> RasStatus:
    """``status`` without what cannot be true (module docstring), and notes saying what was dropped."""
    notes = list(status.notes)
    empty = [g for g in status.groups if g.comms and (g.size == 0 or g.nodes == 0)]
    dropped_groups = {g.index for g in empty}
    for g in empty:
        notes.append(
            f"communicator group {g.index} has {g.comms} communicator(s) of {g.size} rank(s) on "
            f"{g.nodes} node(s): RAS misread its own data (NVIDIA/nccl#1762); the group is not judged"
        )
    comms: list[RasComm] = []
    for c in status.comms:
        bad = _bad_ranks(c)
        group = int(c.label[1:].split("-")[0]) if c.label else None
        if bad or group in dropped_groups:
            what = (
                f"rank {bad[0]} of a {c.size}-rank communicator" if bad else "an implausible group"
            )
            notes.append(
                f"communicator {c.label or c.hash} ({c.hash}): RAS named {what}; its details are "
                "not judged (NVIDIA/nccl#1762, fixed in NCCL 2.29.2)"
            )
            continue
        comms.append(c)
    version = version_tuple(status.nccl_version)
    incomplete = any("INCOMPLETE" in g.errors for g in status.groups) or any(
        c.missing for c in status.comms
    )
    buggy = version is not None and WALK_BUG[0] <= version < WALK_BUG[1]
    if buggy and incomplete and status.format == "text":
        notes.append(
            f"NCCL {status.nccl_version} misreads the communicators it lists after one with missing "
            "ranks (NVIDIA/nccl#1762, fixed in 2.29.2): treat their details with care"
        )
    return replace(
        status,
        groups=tuple(g for g in status.groups if g.index not in dropped_groups),
        comms=tuple(comms),
        notes=tuple(notes),
    )
