"""The fabric's own checks: subnet manager, discovery, port states, link widths and speeds, lost links.
Counter checks are :mod:`.counter_checks`; :func:`ibdiag.fabric.judge.judge` calls both in order.
"""

from __future__ import annotations

import re
from dataclasses import replace

from ibdiag.counters.config import CountersConfig
from ibdiag.counters.rules import SNAPSHOT_HINT, errors_snapshot
from ibdiag.fabric.farend import FarEnd
from ibdiag.fabric.hosts import Names
from ibdiag.fabric.model import SWITCH, Fabric, FabricPort, PortRef
from ibdiag.findings.model import Finding, Severity
from ibdiag.findings.registry import CheckRegistry

CHECKS = CheckRegistry("fabric")
LIST_LIMIT = 8


def listed(items: list[str], limit: int = LIST_LIMIT) -> str:
    more = len(items) - limit
    return "; ".join(items[:limit]) + (f"; and {more} more" if more > 0 else "")


@CHECKS.check(
    "fabric.sm", "no master subnet manager, more than one master, or an SM not answering: fail"
)
def subnet_manager(fab: Fabric, names: Names) -> Finding | None:
    if not fab.sm_known:
        return None
    masters = [s for s in fab.sms if s.state == "master"]
    silent = [s for s in fab.sms if s.state == "not answering"]

    def who(lid: int, guid: str | None) -> str:
        node = next((p for p in fab.ports if p.lid == lid and fab.node(p.guid) is not None), None)
        name = names.port(node.ref) if node else (guid or "?")
        return f"LID {lid} ({name})"

    if not masters:
        init = sum(1 for p in fab.ports if p.state == "Initialize")
        return Finding(
            "fabric.sm",
            Severity.FAIL,
            "subnet manager",
            "no master subnet manager answers"
            + (f": {init} ports wait in Initialize (no SM has brought them up)" if init else ""),
            value=0,
            limit=1,
            hint="start the subnet manager (`systemctl start opensm`, or the switch's or UFM's SM) and check `sminfo`",
        )
    others = ", ".join(f"{who(s.lid, s.guid)} {s.state}" for s in fab.sms if s.state != "master")
    if len(masters) > 1:
        return Finding(
            "fabric.sm",
            Severity.FAIL,
            "subnet manager",
            f"{len(masters)} master subnet managers: "
            + ", ".join(who(s.lid, s.guid) for s in masters),
            value=len(masters),
            limit=1,
            hint="two masters fight over LIDs and routes: stop one, or give them distinct priorities so one stands by",
        )
    m = masters[0]
    text = f"master {who(m.lid, m.guid)}, priority {m.priority}, activity count {m.activity}" + (
        f"; {others}" if others else ""
    )
    if silent:
        return Finding(
            "fabric.sm",
            Severity.FAIL,
            "subnet manager",
            f"{text}: {len(silent)} SM port(s) do not answer SMInfo",
            value=len(silent),
            hint="a standby SM that does not answer will not take over: check it (`sminfo LID`)",
        )
    return Finding("fabric.sm", Severity.OK, "subnet manager", text)


def _walk(fab: Fabric, origin: str | None, path: str, names: Names) -> str:
    hops = [int(h) for h in path.split(",")[1:] if h.isdigit()]
    if origin is None or fab.node(origin) is None or not hops:
        return f"directed route {path}"
    node = origin
    for i, hop in enumerate(hops):
        port = fab.port(PortRef(node, hop))
        if port is None or port.peer is None or i == len(hops) - 1:
            return f"behind {names.port(PortRef(node, hop))} (directed route {path})"
        node = port.peer.guid
    return f"directed route {path}"


@CHECKS.check(
    "fabric.discovery",
    "part of the fabric not discovered, or a tool timed out: fail; port counters not read: warn",
)
def discovery(fab: Fabric, names: Names, origin: str | None) -> Finding:
    lost = [
        n
        for n in fab.notes
        if n.kind in ("unreachable", "timeout", "other")
        and n.tool in ("ibnetdiscover", "iblinkinfo")
    ]
    unread = [
        n
        for n in fab.notes
        if (n.kind in ("unreachable", "timeout", "other") and n.tool.startswith("ibqueryerrors"))
        or (n.kind == "failed" and n.tool != "ibnetdiscover" and not n.tool.startswith("sminfo"))
    ]
    if lost:
        where = []
        for n in lost:
            if n.text.startswith("directed route "):
                path = n.text.split()[2].rstrip(":")
                where.append(f"{_walk(fab, origin, path, names)}: {n.text.split(': ', 1)[-1]}")
            elif n.text.startswith("port "):
                m = re.match(
                    r"port (\d{1,3}) of .{0,300} is (\w{1,30}), its far end was not discovered \((0x[0-9a-f]{1,16})\)",
                    n.text,
                )
                where.append(
                    f"beyond {names.port(PortRef(m.group(3), int(m.group(1))))} ({m.group(2)}; far end not discovered)"
                    if m
                    else n.text
                )
            else:
                where.append(f"{n.tool}: {n.text}")
        return Finding(
            "fabric.discovery",
            Severity.FAIL,
            "fabric",
            f"discovered in part ({len(fab.nodes)} nodes, {len(fab.ports)} ports seen); not reached: {listed(where, 5)}",
            value=len(lost),
            hint="management datagrams are lost or time out there: check that link's cable and ports (`ibdiag fabric` again, `ibnetdiscover -v`); nothing behind it was judged",
        )
    if unread:
        return Finding(
            "fabric.discovery",
            Severity.WARN,
            "fabric",
            f"discovered whole, but not everything was read: {listed([n.text for n in unread], 5)}",
            value=len(unread),
            hint="a counters query that failed leaves those ports' errors unknown (MAD loss, a port without PMA, a tool that crashed): run `ibdiag fabric` again; iblinkinfo failing leaves port states unknown",
        )
    skipped = "".join(f"; {n.text}" for n in fab.notes if n.kind == "skipped")
    if not fab.topology_known:
        links = len(fab.links())
        what = (
            f"a paste of part of the fabric (far ends it does not list): {len(fab.nodes)} node(s), {links} link(s) "
            "judged for state and rate; tiers, oversubscription, rails and SHARP coverage not judged"
            if links
            else f"a paste without topology: {len(fab.nodes)} node(s) named, {len(fab.ports)} port(s) read; "
            "links, tiers, rails and link rates not judged"
        )
        return Finding("fabric.discovery", Severity.OK, "fabric", what + skipped)
    return Finding(
        "fabric.discovery",
        Severity.OK,
        "fabric",
        f"{len(fab.nodes)} nodes ({sum(1 for n in fab.nodes if n.kind == SWITCH)} switches), {len(fab.links())} links discovered with no tool complaint"
        + skipped,
    )


@CHECKS.check(
    "fabric.port_state",
    "a cabled port not Active (Down/Polling/Initialize/Armed with a peer): fail",
)
def port_state(fab: Fabric, names: Names) -> list[Finding]:
    if not fab.states_known or (fab.sm_known and not any(s.state == "master" for s in fab.sms)):
        return []  # no master SM: fabric.sm says why every port waits in Initialize
    out = []
    for p in fab.ports:
        if p.peer is not None and p.state not in ("Active", None):
            out.append(
                Finding(
                    "fabric.port_state",
                    Severity.FAIL,
                    names.subject(p.ref),
                    f"{names.cable(p)} is {p.state}/{p.phys_state}, cabled but not Active",
                    value=p.state,
                    limit="Active",
                    hint="Armed/Initialize: the SM has not finished bringing it up (check `sminfo`, the SM log); Down/Polling with a peer: reseat or replace the cable",
                )
            )
    return out


def switch_end(fab: Fabric, a: FabricPort, b: FabricPort | None) -> FabricPort:
    """The switch end of a host link (the one whose cable text names the host), else ``a``."""
    node = fab.node(a.guid)
    if node is not None and node.kind == SWITCH or b is None:
        return a
    return b


@CHECKS.check(
    "fabric.far_end",
    "the switch port at the other end of this node's cable (counters --far-end): its error counters (counters' rules), or that it could not be read: warn/fail",
)
def far_end(ends: list[FarEnd], cfg: CountersConfig) -> list[Finding]:
    out = []
    for e in ends:
        local = f"{e.adapter}:{e.port}"
        if e.counters is None:
            out.append(
                Finding(
                    "fabric.far_end",
                    Severity.WARN,
                    local,
                    f"the far end of {local} could not be read: {e.problem}",
                    hint="the tools need umad access (/dev/infiniband/umad*, root or the rdma group) and a running subnet manager",
                )
            )
            continue
        name = f"{e.desc or e.guid} port {e.far_port}"
        f = errors_snapshot(e.counters, cfg)
        if f is None or f.severity is Severity.OK:
            out.append(
                Finding(
                    "fabric.far_end",
                    Severity.OK,
                    local,
                    f"far end {name} ({e.kind}, LID {e.lid}): all error counters 0 since the last reset",
                )
            )
        else:
            out.append(
                replace(
                    f,
                    check="fabric.far_end",
                    subject=local,
                    message=f"far end of {local}: {name} ({e.kind}, LID {e.lid}): {f.message}",
                    hint=(f.hint or "").replace(
                        SNAPSHOT_HINT,
                        "counts are since the switch port's last reset; `ibdiag fabric --interval 10` measures a rate fabric-wide",
                    ),
                )
            )
    return out


@CHECKS.check("fabric.link_lost", "a link of the reference fabric (--since) that is gone: fail")
def link_lost(
    fab: Fabric, names: Names, before: Fabric | None, before_names: Names | None
) -> list[Finding]:
    if before is None or before_names is None:
        return []
    now = {(p.guid, p.port) for p, _ in fab.links()} | {
        (p.peer.guid, p.peer.port) for p, _ in fab.links() if p.peer
    }
    out = []
    for a, b in before.links():
        if (a.guid, a.port) in now and (b is None or (b.guid, b.port) in now):
            continue
        ends = f"{before_names.port(a.ref)} — {before_names.port(b.ref) if b else '?'}"
        kind = "inter-switch link" if before.is_isl(a) else "host link"
        far = before_names.cable(switch_end(before, a, b)) if kind == "host link" else ends
        out.append(
            Finding(
                "fabric.link_lost",
                Severity.FAIL,
                before_names.link_subject(a, b),
                f"{kind} {far} was up in the reference and is not now",
                hint="the cable is down or unplugged, or a port failed: check both ends (`iblinkinfo`), reseat, replace",
            )
        )
    return out
