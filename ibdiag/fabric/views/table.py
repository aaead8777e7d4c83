"""The table: the findings (worst ports and links first, from the shared findings block), then the
subnet manager, then one line per switch."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from ibdiag.fabric.farend import FarEnd
from ibdiag.fabric.judge import Judged
from ibdiag.fabric.model import SWITCH
from ibdiag.fabric.shape import host_links
from ibdiag.findings.model import Severity
from ibdiag.output.fit import Col, fitted_table

#: Switches listed; a larger fabric shows the worst ones and says how many are not shown.
MAX_SWITCH_ROWS = 64


def head(j: Judged) -> Text:
    fab = j.fabric
    nsw = sum(1 for n in fab.nodes if n.kind == SWITCH)
    src = "live" if fab.source == "live" else f"from {fab.source}"
    span = (
        f"; counters over {j.span.interval_s:.1f} s"
        if j.span
        else "; counters since the last reset"
    )
    part = " — PARTIAL: part of the fabric was not reached" if fab.partial else ""
    other = sum(1 for n in fab.nodes if n.kind == "unknown")
    nodes = f"{nsw} switches, {len(fab.nodes) - nsw - other} adapters" + (
        f", {other} nodes of a kind the paste does not say" if other else ""
    )
    return Text(f"fabric ({src}): {nodes}, {len(fab.links())} links{span}{part}")


def switch_table(j: Judged, width: int | None = None) -> Table:
    fab, names = j.fabric, j.names
    bad: dict[str, int] = {}
    by_name = {names.switch_token(n.guid): n.guid for n in fab.nodes if n.kind == SWITCH}
    for f in j.findings:
        if f.severity is not Severity.OK:
            for part in f.subject.split("<>"):
                guid = by_name.get(part.rsplit(":", 1)[0])
                if guid is not None:
                    bad[guid] = bad.get(guid, 0) + 1
    hosts = host_links(fab)  # a SHARP Aggregation Node on the extra port is no host
    switches = sorted(
        (n for n in fab.nodes if n.kind == SWITCH), key=lambda n: (-bad.get(n.guid, 0), n.desc)
    )
    rows: list[list[str]] = []
    for n in switches[:MAX_SWITCH_ROWS]:
        ports = [p for p in fab.ports if p.guid == n.guid and p.port > 0]
        active = sum(1 for p in ports if p.state == "Active" or (p.state is None and p.peer))
        isl = sum(1 for p in ports if p.peer and fab.is_isl(p))
        host = len(hosts.get(n.guid, ()))
        rows.append(
            [
                names.node(n.guid),
                n.guid,
                str(n.lid or "-"),
                f"{active}/{n.ports}",
                str(host),
                str(isl),
                str(bad.get(n.guid, 0)),
            ]
        )
    more = len(switches) - MAX_SWITCH_ROWS
    caption = f"{more} more switches not shown (-o json lists all)" if more > 0 else None
    return fitted_table("Switches", SWITCH_COLS, rows, width, caption=caption)


#: The switch table: the switch's name never shrinks; at 80 columns the GUID, then the LID go first.
SWITCH_COLS = (
    Col("switch"),
    Col("GUID", drop=3),
    Col("LID", drop=2),
    Col("active", justify="right"),
    Col("host links", drop=1, justify="right"),
    Col("ISLs", justify="right"),
    Col("findings", justify="right"),
)


def sm_text(j: Judged) -> Text:
    fab = j.fabric
    if not fab.sm_known:
        return Text("subnet manager: not in this source", style="dim")
    if not fab.sms:
        return Text("subnet manager: none answers")
    return Text(
        "subnet managers: "
        + "; ".join(f"LID {s.lid} {s.guid or ''} {s.state} priority {s.priority}" for s in fab.sms)
    )


def shape_text(j: Judged) -> Text:
    parts = [j.shape.text] if j.shape is not None else []
    if j.rails is not None and j.rails.verdict:
        parts.append(j.rails.verdict)
    return Text("shape: " + "; ".join(parts) if parts else "shape: not judged", style="dim")


def items(j: Judged, width: int | None = None) -> list[Any]:
    return [sm_text(j), shape_text(j), switch_table(j, width)]


#: ``counters --far-end``: the local port and the switch port name the rows; the counters fold.
FAR_END_COLS = (
    Col("port"),
    Col("far end"),
    Col("LID", drop=1),
    Col("error counters since the last reset", fold=True),
)


def far_end_table(ends: list[FarEnd], width: int | None = None) -> Table:
    """``counters --far-end``: beside each local port, the switch port at the other end of its cable."""
    rows: list[list[str]] = []
    for e in ends:
        if e.counters is None:
            rows.append(
                [
                    f"{e.adapter}:{e.port}",
                    e.desc or "?",
                    str(e.lid or "-"),
                    f"not read: {e.problem}",
                ]
            )
            continue
        nonzero = {k: v for k, v in (e.counters.counters or {}).items() if v}
        text = ", ".join(f"{k} {v}" for k, v in nonzero.items()) or "all 0"
        rows.append([f"{e.adapter}:{e.port}", f"{e.desc} port {e.far_port}", str(e.lid), text])
    return fitted_table("Far ends (the switch side of each cable)", FAR_END_COLS, rows, width)
