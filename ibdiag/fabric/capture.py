"""What the tools printed, kept as text: the one input of :func:`ibdiag.fabric.build.build_fabric`,
whether it comes from a live run (:mod:`.collect`) or a saved dump (:mod:`.dump`).

Names (``ibnetdiscover``, ``iblinkinfo``, ``ibqueryerrors``, ``sminfo``, ``saquery``, ``sminfo-<lid>``)
are fixed; ``ibqueryerrors-1`` is a second counters read (``--interval``); ``ibqueryerrors-data`` (and
``-data-1``) every switch port's data and packet counters (``--data-counters``); ``ibroute`` (``--routes``) is
every switch's ``ibroute -n LID`` output, concatenated in switch-LID order (one file in a dump);
``perfquery`` and ``ibnodes`` (``ibhosts``/``ibswitches`` lines) come only from a pasted file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ibdiag.errors import InputError
from ibdiag.jsonread import Fields, JsonFieldError

#: Names a capture may hold (files ``<name>.out`` / ``<name>.err`` in a dump).
NAME_RE = re.compile(
    r"^(ibnetdiscover|iblinkinfo|ibqueryerrors(?:-data)?(?:-1)?|sminfo(?:-\d{1,5})?|saquery|ibroute|perfquery|ibnodes)$"
)


@dataclass(frozen=True)
class ToolRun:
    name: str
    command: str
    """The command line, for the reader (never run again from a dump)."""
    stdout: str
    stderr: str
    rc: int | None
    """Exit status; None when it was killed for running past its limit."""
    elapsed_s: float | None = None
    taken_at_s: float | None = None

    def meta(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "command": self.command,
            "rc": self.rc,
            "elapsed_s": self.elapsed_s,
            "taken_at_s": self.taken_at_s,
        }


@dataclass(frozen=True)
class Capture:
    source: str
    """``live`` or the dump's path."""
    runs: tuple[ToolRun, ...]
    taken_at_s: float | None
    versions: dict[str, str] = field(default_factory=dict)

    def run(self, name: str) -> ToolRun | None:
        for r in self.runs:
            if r.name == name:
                return r
        return None

    def meta(self) -> dict[str, Any]:
        return {
            "schema": "ibdiag.fabric-capture/1",
            "taken_at_s": self.taken_at_s,
            "versions": dict(self.versions),
            "runs": [r.meta() for r in self.runs],
        }


def read_meta(doc: Any, source: str) -> tuple[float | None, list[dict[str, Any]], dict[str, str]]:
    """The checked ``capture.json`` of a dump: when, and each run's name, command, rc and timing."""
    hint = "a dump written by `ibdiag fabric --save`"
    try:
        f = Fields(doc, "capture.json")
        if f.text("schema") != "ibdiag.fabric-capture/1":
            raise JsonFieldError("capture.json schema", "is not ibdiag.fabric-capture/1")
        taken = f.number("taken_at_s", 0)

        def run(r: Fields) -> dict[str, Any]:
            name = r.text("name", required=True)
            if not NAME_RE.match(name):
                raise JsonFieldError(r.where + ".name", "is not a run ibdiag saves")
            return {
                "name": name,
                "command": r.text("command", required=True)[:500],
                "rc": r.integer("rc", -255, 255),
                "elapsed_s": r.number("elapsed_s", 0),
                "taken_at_s": r.number("taken_at_s", 0),
            }

        runs = list(f.objects("runs", run, max_items=64))
        versions = {k: str(v)[:80] for k, v in f.scalars("versions").items()}
    except JsonFieldError as e:
        raise InputError(f"{source}: {e}", hint=hint) from None
    return taken, runs, versions
