"""A :class:`~.capture.Capture` (what the tools printed) -> one :class:`~.model.Fabric`. Pure.

ibnetdiscover gives the nodes and cabled ports (widths, speeds, LIDs); iblinkinfo adds every port's
state and physical state (ports without a cable too); ibqueryerrors the counters; sminfo/saquery the
subnet managers; ibroute (``--routes``) each switch's forwarding table; stderr of each the notes (:mod:`.toolerr`).
"""

from __future__ import annotations

import re
from dataclasses import replace

from ibdiag.counters.model import PortCounters, Sample
from ibdiag.counters.spec import ERROR_COUNTERS, IB_COUNTERS, max_value
from ibdiag.errors import CannotRunError, InputError
from ibdiag.fabric import datacounters, pastes
from ibdiag.fabric.capture import Capture, ToolRun
from ibdiag.fabric.linkinfo import parse_linkinfo
from ibdiag.fabric.model import (
    Fabric,
    FabricNode,
    FabricPort,
    PortRef,
    SubnetManager,
    ToolNote,
    guid_text,
    new_port,
)
from ibdiag.fabric.netdiscover import read_netdiscover
from ibdiag.fabric.queryerrors import parse_queryerrors
from ibdiag.fabric.routes import parse_routes
from ibdiag.fabric.sminfo import parse_sm_lids, parse_sminfo
from ibdiag.fabric.toolerr import classify
from ibdiag.text import safe_excerpt

#: IBA name -> counters' key, for the counters a switch's PMA reports in PortCounters.
BY_IBA = {spec.iba: name for name, spec in IB_COUNTERS.items() if spec.bits is not None}
#: Judged per port whether or not ibqueryerrors listed it (absent: it counted none).
ZERO_UNLESS_LISTED = (*ERROR_COUNTERS, "port_xmit_wait")
_ORIGIN = re.compile(r"^#\s*Initiated from node ([0-9a-fA-F]{1,16}) port ([0-9a-fA-F]{1,16})", re.M)


#: What a pasted file may hold without ibnetdiscover (pastes.py): judged for what it holds.
PASTED = ("iblinkinfo", "ibqueryerrors", "perfquery", "sminfo")


def build_fabric(cap: Capture, counters_run: str = "ibqueryerrors") -> Fabric:
    disc = cap.run("ibnetdiscover")
    if disc is None and any(cap.run(t) is not None for t in PASTED):
        return from_paste(cap)
    if disc is None or not disc.stdout.strip() or disc.rc not in (0, None):
        # No subnet to discover (no adapter, no umad access, the port down): the tool says so on
        # stdout or stderr and exits non-zero; what it said is the message, never parsed as a dump.
        said = (
            "; ".join(
                safe_excerpt(ln.strip(), 160)
                for ln in ((disc.stderr + disc.stdout).splitlines() if disc else ())
                if ln.strip() and "sim_connect" not in ln
            )[:400]
            or "no output"
        )
        raise CannotRunError(
            f"ibnetdiscover discovered nothing (exit {disc.rc if disc else '-'}: {said})",
            hint="the tools need an InfiniBand port that is up, the ib_umad module loaded and access to /dev/infiniband/umad* (root or the rdma group); check `ibstat` and `sminfo`; -C/-P pick the port; or judge a saved dump with --from",
        )
    found = read_netdiscover(disc.stdout)
    nodes, ports = found.nodes, found.ports
    notes: list[ToolNote] = list(classify(disc))
    if found.skipped is not None:
        notes.append(
            ToolNote("ibnetdiscover", "skipped", found.skipped.text("ibnetdiscover output"))
        )
    link = cap.run("iblinkinfo")
    states_known = link is not None and bool(link.stdout.strip())
    if link is not None:
        notes.extend(classify(link))
        if states_known:
            ports = _merge_states(nodes, ports, link, notes)
    sms, sm_known = _sms(cap, notes)
    counters = None
    qe = cap.run(counters_run)
    if qe is not None:
        notes.extend(classify(qe))
        counters = _counters(ports, qe, notes, qe.taken_at_s or cap.taken_at_s)
    data = cap.run(datacounters.run_name(counters_run))
    if data is not None:  # --data-counters: every switch port's data and packet counters
        notes.extend(classify(data))
        if counters is not None and data.rc in (0, 1):
            counters = datacounters.with_data(counters, data.stdout)
    routes = None
    lft = cap.run("ibroute")
    if lft is not None:
        notes.extend(classify(lft))
        routes = parse_routes(lft.stdout)[0] or None
    return Fabric(
        source=cap.source,
        taken_at_s=cap.taken_at_s,
        nodes=nodes,
        ports=ports,
        sms=sms,
        sm_known=sm_known,
        states_known=states_known,
        counters=counters,
        notes=tuple(notes),
        routes=routes,
        duplicates=found.duplicates,
    )


def origin(cap: Capture) -> str | None:
    """The node GUID ibnetdiscover started from (its header comment), if it says."""
    disc = cap.run("ibnetdiscover")
    m = _ORIGIN.search(disc.stdout) if disc else None
    return None if m is None else f"0x{int(m.group(1), 16):016x}"


def _merge_states(
    nodes: tuple[FabricNode, ...],
    ports: tuple[FabricPort, ...],
    run: ToolRun,
    notes: list[ToolNote],
) -> tuple[FabricPort, ...]:
    lines = parse_linkinfo(run.stdout)
    desc = {n.guid: n.desc for n in nodes}
    by_port_guid = {p.port_guid: p.guid for p in ports if p.port_guid}
    known_nodes = {n.guid for n in nodes}
    merged = {(p.guid, p.port): p for p in ports}
    for ln in lines:
        guid = by_port_guid.get(ln.guid, ln.guid)
        if guid not in known_nodes:
            continue  # a node iblinkinfo saw and ibnetdiscover did not: the notes say so
        if ln.peer_unknown:
            notes.append(
                ToolNote(
                    "iblinkinfo",
                    "unreachable",
                    f"port {ln.port} of {desc.get(guid, guid)} is {ln.state}, its far end was not discovered ({guid})",
                )
            )
        peer = None
        if ln.peer_guid is not None and ln.peer_port is not None:
            peer = PortRef(by_port_guid.get(ln.peer_guid, ln.peer_guid), ln.peer_port)
        key = (guid, ln.port)
        old = merged.get(key)
        if old is None:
            merged[key] = new_port(
                guid,
                ln.port,
                ln.state,
                ln.phys_state,
                ln.width,
                ln.speed,
                peer,
                ln.lid,
                None,
                ln.could_be,
            )
        else:
            merged[key] = new_port(
                guid,
                ln.port,
                ln.state,
                ln.phys_state,
                ln.width or old.width,
                ln.speed or old.speed,
                old.peer or peer,
                old.lid or ln.lid,
                old.port_guid,
                ln.could_be,
            )
    return tuple(merged[k] for k in sorted(merged))


def _sms(cap: Capture, notes: list[ToolNote]) -> tuple[tuple[SubnetManager, ...], bool]:
    master = cap.run("sminfo")
    if master is None:
        return (), False
    notes.extend(n for n in classify(master) if n.kind != "failed")
    found: dict[int, SubnetManager] = {}
    try:
        sm = parse_sminfo(master.stdout)
        found[sm.lid] = sm
    except InputError:
        pass
    sa = cap.run("saquery")
    lids = parse_sm_lids(sa.stdout) if sa is not None else ()
    for lid in lids:
        if lid in found:
            continue
        run = cap.run(f"sminfo-{lid}")
        try:
            found[lid] = parse_sminfo(run.stdout if run else "")
        except InputError:
            found[lid] = SubnetManager(lid, None, None, "not answering")
    return tuple(found.values()), True


def _counters(
    ports: tuple[FabricPort, ...], run: ToolRun, notes: list[ToolNote], taken_at_s: float | None
) -> Sample | None:
    if run.rc not in (0, 1) or any(n.kind == "no-sm" for n in classify(run)):
        return None
    listed = parse_queryerrors(run.stdout)
    unread = _unread(notes, ports)
    out: list[PortCounters] = []
    for p in ports:
        if p.peer is None or p.state not in (None, "Active", "Armed"):
            continue
        failed = (p.lid, p.port) in unread or (p.guid, p.port) in unread
        out.append(
            port_counters(
                p.guid, p.port, listed.get((p.guid, p.port), {}), unlisted=None if failed else 0
            )
        )
    return Sample(taken_at_s or 0.0, None, tuple(out))


def port_counters(
    name: str, port: int, by_iba: dict[str, int], *, unlisted: int | None
) -> PortCounters:
    """One port's PMA counters by IBA name -> counters' own reading (keys, saturation at each width).

    ``unlisted``: the value of a judged counter the source did not give (0 for ibqueryerrors, which lists
    only non-zero ones; None, unavailable, when the port's query failed or the answer lacked it)."""
    if not by_iba and unlisted == 0:  # the common port: nothing listed, every judged counter 0
        return PortCounters(name, port, None, dict(_ZEROS), None, {}, frozenset())
    values: dict[str, int | None] = dict.fromkeys(ZERO_UNLESS_LISTED, unlisted)
    for iba, v in by_iba.items():
        key = BY_IBA.get(iba)
        if key is not None:
            values[key] = v
    unavailable = (
        {k: "PMA query failed" for k, v in values.items() if v is None} if not by_iba else {}
    )
    saturated = frozenset(
        k for k, v in values.items() if v and v >= max_value(IB_COUNTERS[k].bits or 64)
    )
    return PortCounters(name, port, None, values, None, unavailable, saturated)


_ZEROS: dict[str, int | None] = dict.fromkeys(ZERO_UNLESS_LISTED, 0)


def _unread(notes: list[ToolNote], ports: tuple[FabricPort, ...]) -> set[tuple[object, int]]:
    out: set[tuple[object, int]] = set()
    for n in notes:
        m = re.search(r"\(LID (\d+)\) port (\d+) not read", n.text)
        if n.kind == "unreachable" and m:
            out.add((int(m.group(1)), int(m.group(2))))
    return out


_ERRORS_FOR = re.compile(
    r'^(?:Errors|Data Counters) for 0x([0-9a-fA-F]{1,16})\s+"(.{0,200})"\s*$', re.M
)


def from_paste(cap: Capture) -> Fabric:
    """A fabric from a paste of iblinkinfo, ibqueryerrors (and ibhosts/ibswitches lines), perfquery
    or sminfo without ibnetdiscover: the nodes and ports they name, the counters and SMs they hold."""
    ibnodes = cap.run("ibnodes")
    known = pastes.node_list(ibnodes.stdout) if ibnodes is not None else {}
    nodes: dict[str, FabricNode] = {}
    ports: dict[PortRef, FabricPort] = {}
    link = cap.run("iblinkinfo")
    if link is not None:
        ns, ps = pastes.from_linkinfo(parse_linkinfo(link.stdout), known)
        nodes.update({n.guid: n for n in ns})
        ports.update({p.ref: p for p in ps})
    values: dict[tuple[str, int], dict[str, int]] = {}
    qe = cap.run("ibqueryerrors")
    if qe is not None:
        said = {
            guid_text(int(g, 16)): safe_excerpt(d, 96) for g, d in _ERRORS_FOR.findall(qe.stdout)
        }
        values.update(parse_queryerrors(qe.stdout))
        for guid, desc in said.items():
            nodes.setdefault(guid, known.get(guid) or FabricNode(guid, "unknown", desc, 0))
    pq = cap.run("perfquery")
    if pq is not None:
        lids = {p.lid: p.guid for p in ports.values() if p.lid}
        for (lid, port), v in pastes.perfquery_blocks(pq.stdout).items():
            guid = lids.get(lid, f"LID {lid}")
            nodes.setdefault(guid, FabricNode(guid, "unknown", f"LID {lid}", 0, lid))
            values.setdefault((guid, port), {}).update(v)
    for guid, port in values:
        ports.setdefault(PortRef(guid, port), FabricPort(guid, port))
    notes: list[ToolNote] = []
    sms, sm_known = _sms(cap, notes)
    counted = tuple(
        _pasted_counters(g, p, v, qe is not None) for (g, p), v in sorted(values.items())
    )
    return Fabric(
        source=cap.source,
        taken_at_s=None,
        nodes=tuple(nodes.values()),
        ports=tuple(sorted(ports.values(), key=lambda p: (p.guid, p.port))),
        sms=sms,
        sm_known=sm_known,
        states_known=link is not None,
        counters=Sample(0.0, None, counted) if values or qe is not None else None,
        notes=tuple(notes),
        # A far end the paste does not list (iblinkinfo -S of one switch): its links are judged, the
        # fabric's shape is not (a partial view).
        topology_known=link is not None and not any(g.startswith("LID ") for g in nodes),
    )


def _pasted_counters(guid: str, port: int, values: dict[str, int], listed: bool) -> PortCounters:
    """ibqueryerrors lists non-zero counters only (the rest are 0); perfquery prints what it read
    (``-x``: the data counters alone): a counter it did not print is not in the paste."""
    pc = port_counters(guid, port, values, unlisted=0 if listed else None)
    if listed:
        return pc
    gone = {k: "not in the pasted output" for k, v in (pc.counters or {}).items() if v is None}
    return replace(pc, unavailable=gone)
