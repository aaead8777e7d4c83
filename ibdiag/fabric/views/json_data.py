"""``ibdiag.fabric/1``: the command's own keys (the envelope and findings are added by the renderer)."""

from __future__ import annotations

from typing import Any

from ibdiag.fabric.counter_checks import totals_by_port
from ibdiag.fabric.devices import is_aggregation_node
from ibdiag.fabric.judge import Judged
from ibdiag.fabric.model import CA, SWITCH, FabricNode, FabricPort
from ibdiag.fabric.shape import loopbacks
from ibdiag.output.records import Records, records_of


def _ends(ports: list[FabricPort], length: int, present: list[bool] | None, j: Judged) -> Records:
    port_at = j.names.port_at
    return Records(
        ("guid", "port", "name"),
        (
            [p.guid for p in ports],
            [p.port for p in ports],
            [port_at(p.guid, p.port) for p in ports],
        ),
        length,
        present,
    )


def _links(j: Judged) -> Records:
    """The links, one record each (held by column: a 16k-GPU fabric has 50k)."""
    fab = j.fabric
    links = fab.links()
    near = [a for a, _ in links]
    far = [b for _, b in links if b is not None]
    n = len(links)
    return Records(
        ("kind", "a", "b", "state", "phys_state", "width", "speed", "rate_gbps"),
        (
            ["isl" if fab.is_isl(a) else "host" for a in near],
            _ends(near, n, None, j),
            _ends(far, n, None if len(far) == n else [b is not None for _, b in links], j),
            [a.state for a in near],
            [a.phys_state for a in near],
            [a.width for a in near],
            [a.speed for a in near],
            [a.rate_gbps for a in near],
        ),
        n,
    )


def _adapters(nodes: list[FabricNode], hosts: dict[str, dict[str, Any]]) -> Records:
    """The adapters (``FabricNode.to_json``, its host, whether it is a SHARP node), by column."""
    host = [hosts.get(n.guid) for n in nodes]
    by_host = records_of(host) if any(host) else None
    return Records(
        (*ADAPTER_KEYS, "host", "sharp_aggregation_node"),
        (
            *([getattr(n, key) for n in nodes] for key in ADAPTER_KEYS),
            host if by_host is None else by_host,
            [is_aggregation_node(n) for n in nodes],
        ),
        len(nodes),
    )


#: ``FabricNode.to_json``'s keys, in its order, each the field it is read from
#: (tests/fabric/test_json_data.py checks both).
ADAPTER_KEYS = ("guid", "kind", "desc", "ports", "lid", "vendor_id", "device_id")


def _counters(j: Judged) -> list[dict[str, Any]]:
    fab, names = j.fabric, j.names
    totals = totals_by_port(j.span)
    counters = []
    if fab.counters is not None:
        for pc in fab.counters.ports:
            values = {k: v for k, v in (pc.counters or {}).items() if v}
            d = totals.get(pc.key)
            deltas = {k: v for k, v in (d.deltas.items() if d else ()) if v}
            if values or deltas or pc.unavailable:
                counters.append(
                    {
                        "guid": pc.adapter,
                        "port": pc.port,
                        "name": names.port(fab.port_ref(pc.adapter, pc.port)),
                        "counters": values,
                        "deltas": deltas if d else None,
                        "saturated": sorted(pc.saturated),
                        "unavailable": dict(pc.unavailable),
                    }
                )
    return counters


def fabric_data(j: Judged) -> dict[str, Any]:
    fab, names = j.fabric, j.names
    links = _links(j)
    hosts = {}
    for n in fab.nodes:
        h = names.host(n.guid) if n.kind == CA else None
        if h is not None:
            hosts[n.guid] = h.to_json()
    boxes = {g: c for c in (j.shape.boxes if j.shape is not None else ()) for g in c.members}
    counters = _counters(j)
    return {
        "source": fab.source,
        "taken_at_s": fab.taken_at_s,
        "partial": fab.partial,
        "interval_s": None if j.span is None else j.span.interval_s,
        "switches": [
            {
                **n.to_json(),
                "name": names.node(n.guid),
                "chassis": None
                if n.guid not in boxes
                else {"name": boxes[n.guid].name, "slot": boxes[n.guid].slots.get(n.guid)},
            }
            for n in fab.nodes
            if n.kind == SWITCH
        ],
        "adapters": _adapters([n for n in fab.nodes if n.kind != SWITCH], hosts),
        "duplicate_guids": [{"guid": g, "nodes": list(keys)} for g, keys in fab.duplicates],
        "loopbacks": [
            {"guid": a.guid, "port": a.port, "peer_port": b.port, "name": names.node(a.guid)}
            for a, b in loopbacks(fab)
        ],
        "sharp": None if j.sharp is None else j.sharp.to_json(),
        "links": links,
        "subnet_managers": None if not fab.sm_known else [s.to_json() for s in fab.sms],
        "port_counters": counters,
        "notes": [n.to_json() for n in fab.notes],
        "routes": None
        if fab.routes is None
        else {
            "switches": len(fab.routes),
            "entries": sum(map(len, fab.routes.values())),
            **({} if j.routing is None else j.routing.to_json(j.tolerance)),
        },
        "shape": None if j.shape is None else j.shape.to_json(),
        "rails": None if j.rails is None else j.rails.to_json(),
        **(j.extra or {}),
    }
