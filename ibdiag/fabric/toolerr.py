"""What the tools said on stderr, classified: a fabric discovered or queried only in part must say so.

Kinds (:class:`~ibdiag.fabric.model.ToolNote`): ``unreachable`` (a directed-route or PMA query timed out
or failed: what lies behind was not discovered, or that port's counters were not read), ``no-sm`` (no
subnet manager or SA answered), ``timeout`` (the tool ran past ibdiag's limit and was killed), ``failed``
(it exited non-zero), ``other`` (a line ibdiag does not know: shown, and the fabric is not called
complete); ``ibroute`` (``--routes``): a switch's forwarding table not read is ``unreachable``. The simulator's ``sim_connect: attached as client`` line is dropped. Texts are escaped and capped.
"""

from __future__ import annotations

import re

from ibdiag.fabric.capture import ToolRun
from ibdiag.fabric.model import ToolNote
from ibdiag.text import safe_excerpt

MAX_NOTES_PER_TOOL = 200

_NOISE = re.compile(r"sim_connect: attached as client|^\s*$")
_DR_FAIL = re.compile(
    r"\(DR path slid \d+; dlid \d+; ([\d,]{1,200})[^)]*\)\s*bad status (\d+)(?:; (.*))?"
)
_PMA_FAIL = re.compile(r"query failed on (.*), Lid (\d+) port (\d+)")
_NO_SM = re.compile(r"No SM/SA found|Failed to bind to the SA|sminfo: iberror: failed: query")
_MADRPC = re.compile(r"_do_madrpc failed; dport(?: \(Lid (\d{1,5})\))?")
#: ibroute (``--routes``): one switch's table not read; the MAD it dumps before saying so.
_ROUTE_FAIL = re.compile(r"ibroute: iberror: failed: (.*)")
_MAD_DUMP = re.compile(r"^\s*(?:nodeinfo|switchinfo|[0-9a-f]{4}(?: [0-9a-f]{4}){1,15})\s*$")


def classify(run: ToolRun) -> tuple[ToolNote, ...]:
    notes: list[ToolNote] = []
    if run.rc is None:
        notes.append(
            ToolNote(run.name, "timeout", f"{run.name} ran past its time limit and was killed")
        )
    unknown = 0
    if run.name == "ibroute":
        notes += _route_failures(run)
    for line in run.stderr.splitlines():
        if _NOISE.search(line) or _MADRPC.search(line):
            continue  # _do_madrpc is followed by the line that names what failed
        if run.name == "ibroute" and (_MAD_DUMP.match(line) or _ROUTE_FAIL.search(line)):
            continue
        m = _DR_FAIL.search(line)
        if m:
            why = (m.group(3) or f"status {m.group(2)}").strip()
            notes.append(
                ToolNote(
                    run.name, "unreachable", f"directed route {m.group(1)}: {safe_excerpt(why, 60)}"
                )
            )
        elif (m := _PMA_FAIL.search(line)) is not None:
            notes.append(
                ToolNote(
                    run.name,
                    "unreachable",
                    f"counters of {safe_excerpt(m.group(1), 64)} (LID {m.group(2)}) port {m.group(3)} not read",
                )
            )
        elif _NO_SM.search(line):
            notes.append(ToolNote(run.name, "no-sm", safe_excerpt(line.strip(), 160)))
        else:
            unknown += 1
            if unknown <= 5:
                notes.append(ToolNote(run.name, "other", safe_excerpt(line.strip(), 160)))
        if len(notes) >= MAX_NOTES_PER_TOOL:
            notes.append(ToolNote(run.name, "other", "… more lines on stderr not shown"))
            break
    if (
        run.rc not in (None, 0)
        and not notes
        and not (run.name.startswith("ibqueryerrors") and run.rc == 1)
    ):
        # ibqueryerrors exits 1 when it found errors: that is its answer, not a failure.
        notes.append(ToolNote(run.name, "failed", f"{run.name} exited with status {run.rc}"))
    return tuple(_dedup(notes))


def _route_failures(run: ToolRun) -> list[ToolNote]:
    """ibroute says a switch failed on stdout (``iberror: failed``), the LID it asked on stderr
    (``_do_madrpc failed; dport (Lid N)``): paired in order, both concatenated in LID order."""
    lids = [m.group(1) for m in _MADRPC.finditer(run.stderr) if m.group(1)]
    whys = [m.group(1) for m in _ROUTE_FAIL.finditer(run.stdout + "\n" + run.stderr)]
    notes = []
    for k, why in enumerate(whys[:MAX_NOTES_PER_TOOL]):
        at = f"the switch at LID {lids[k]}" if len(lids) == len(whys) else "a switch"
        text = f"forwarding table of {at} not read: {safe_excerpt(why.strip(), 80)}"
        notes.append(ToolNote(run.name, "unreachable", text))
    return notes


def _dedup(notes: list[ToolNote]) -> list[ToolNote]:
    seen: set[tuple[str, str]] = set()
    out = []
    for n in notes:
        if (n.kind, n.text) not in seen:
            seen.add((n.kind, n.text))
            out.append(n)
    return out
