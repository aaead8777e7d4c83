"""What the tools said on stderr, classified: a fabric discovered or queried only in part must say so.

Kinds (:class:`~ibdiag.fabric.model.ToolNote`): ``unreachable`` (a directed-route or PMA query timed out
or failed: what lies behind was not discovered, or that port's counters were not read), ``no-sm`` (no
subnet manager or SA answered), ``timeout`` (the tool ran past ibdiag's limit and was killed), ``failed``
(it exited non-zero), ``other`` (a line ibdiag does not know: shown, and the fabric is not called
complete); ``ibroute`` (``--routes``): a switch's forwarding table not read is ``unreachable``. The simulator's ``sim_connect: attached as client`` line is dropped. Texts are escaped and capped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from ibdiag.fabric.capture import ToolRun
from ibdiag.fabric.model import ToolNote
from ibdiag.text import safe_excerpt

MAX_NOTES_PER_TOOL = 200
#: Each stderr line is cut here before any pattern sees it (the tools' lines are under 300 characters).
MAX_LINE = 1024
#: Most stderr lines classified per tool: 10 times a 16,384-GPU fabric's (100,000 ports, each PMA
#: query that fails is 3 lines). A dump with more is refused where it is read (:mod:`.dump`); a live
#: tool's further lines are named in one note.
MAX_LINES_PER_TOOL = 1_000_000

_NOISE = re.compile(r"sim_connect: attached as client|^\s*$")
#: Each pattern bounded (a line is cut at :data:`MAX_LINE` first): linear in the line's length.
_DR_FAIL = re.compile(
    r"\(DR path slid \d{1,5}; dlid \d{1,5}; ([\d,]{1,200})[^)]{0,80}\)\s{0,8}bad status (\d{1,5})(?:; (.{0,200}))?"
)
#: ``PortCounters query failed on <node description>, Lid 3 port 1`` (ibqueryerrors' IBWARN; a
#: node description is at most 64 bytes, the description's own commas kept by the greedy part).
_PMA_FAIL = re.compile(r"query failed on (.{0,200}), Lid (\d{1,5}) port (\d{1,3})")
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
    for k, line in enumerate(stderr_lines(run.stderr)):
        if k >= MAX_LINES_PER_TOOL:
            notes.append(
                ToolNote(
                    run.name,
                    "other",
                    f"more than {MAX_LINES_PER_TOOL} lines on stderr: the rest not read",
                )
            )
            break
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


def stderr_lines(text: str) -> Iterator[str]:
    """The lines of ``text`` (as ``splitlines`` cuts them), each cut at :data:`MAX_LINE` characters,
    made one at a time: a line of 256 MiB is never copied whole."""
    start = 0
    while start < len(text):
        end = text.find("\n", start)
        if end < 0:
            end = len(text)
        yield from text[start : min(end, start + MAX_LINE)].splitlines() or [""]
        start = end + 1


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
