"""CSV: one row per cabled port, with its far end and its counters (since the last reset, or deltas)."""

from __future__ import annotations

from typing import Any

from ibdiag.counters.spec import ERROR_COUNTERS
from ibdiag.fabric.counter_checks import totals_by_port
from ibdiag.fabric.judge import Judged

CSV_HEADER = (
    "node",
    "guid",
    "port",
    "state",
    "width",
    "speed",
    "rate_gbps",
    "kind",
    "remote",
    "remote_guid",
    "remote_port",
    *ERROR_COUNTERS,
    "port_xmit_wait",
)


def csv_rows(j: Judged) -> list[dict[str, Any]]:
    fab, names = j.fabric, j.names
    totals = totals_by_port(j.span)
    counters = {pc.key: pc for pc in fab.counters.ports} if fab.counters else {}
    rows = []
    for p in fab.ports:
        if p.peer is None:
            continue
        pc = counters.get((p.guid, p.port))
        d = totals.get((p.guid, p.port))
        values = (d.deltas if d else (pc.counters if pc else None)) or {}
        rows.append(
            {
                "node": names.node(p.guid),
                "guid": p.guid,
                "port": p.port,
                "state": p.state,
                "width": p.width,
                "speed": p.speed,
                "rate_gbps": p.rate_gbps,
                "kind": "isl" if fab.is_isl(p) else "host",
                "remote": names.node(p.peer.guid),
                "remote_guid": p.peer.guid,
                "remote_port": p.peer.port,
                **{k: values.get(k) for k in (*ERROR_COUNTERS, "port_xmit_wait")},
            }
        )
    return rows
