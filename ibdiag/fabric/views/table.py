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


def switch_table(j: Judged) -> Table:
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
    t = Table(title="Switches", title_justify="left")
    for col in ("switch", "GUID", "LID", "active", "host links", "ISLs", "findings"):
        t.add_column(col, overflow="fold")
    switches = sorted(
        (n for n in fab.nodes if n.kind == SWITCH), key=lambda n: (-bad.get(n.guid, 0), n.desc)
    )
    for n in switches[:MAX_SWITCH_ROWS]:
        ports = [p for p in fab.ports if p.guid == n.guid and p.port > 0]
        active = sum(1 for p in ports if p.state == "Active" or (p.state is None and p.peer))
        isl = sum(1 for p in ports if p.peer and fab.is_isl(p))
        host = len(hosts.get(n.guid, ()))
        t.add_row(
            names.node(n.guid),
            n.guid,
            str(n.lid or "-"),
            f"{active}/{n.ports}",
            str(host),
            str(isl),
            str(bad.get(n.guid, 0)),
        )
    if len(switches) > MAX_SWITCH_ROWS:
        t.caption = f"{len(switches) - MAX_SWITCH_ROWS} more switches not shown (-o json lists all)"
    return t


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


def items(j: Judged) -> list[Any]:
    return [sm_text(j), shape_text(j), switch_table(j)]


def far_end_table(ends: list[FarEnd]) -> Table:
    """``counters --far-end``: beside each local port, the switch port at the other end of its cable."""
    t = Table(title="Far ends (the switch side of each cable)", title_justify="left")
    for col in ("port", "far end", "LID", "error counters since the last reset"):
        t.add_column(col, overflow="fold")
    for e in ends:
        if e.counters is None:
            t.add_row(
                f"{e.adapter}:{e.port}", e.desc or "?", str(e.lid or "-"), f"not read: {e.problem}"
            )
            continue
        nonzero = {k: v for k, v in (e.counters.counters or {}).items() if v}
        text = ", ".join(f"{k} {v}" for k, v in nonzero.items()) or "all 0"
        t.add_row(f"{e.adapter}:{e.port}", f"{e.desc} port {e.far_port}", str(e.lid), text)
    return t
