"""Prometheus metrics per switch port, labelled as IB-exporter users expect: ``switch``, ``port``,
``remote_node``, ``remote_port`` (plus ``guid``). Counter names follow node_exporter's infiniband
collector (``symbol_error_total`` ...) under ``ibdiag_fabric_port_``."""

from __future__ import annotations

from ibdiag.counters.spec import IB_COUNTERS
from ibdiag.fabric.judge import Judged
from ibdiag.fabric.model import SWITCH
from ibdiag.output.prom import Metric, PromSample

KEYS = tuple(k for k, s in IB_COUNTERS.items() if s.bits is not None and s.prom)


def prom_metrics(j: Judged) -> list[Metric]:
    fab, names = j.fabric, j.names
    counters = {pc.key: pc for pc in fab.counters.ports} if fab.counters else {}
    per: dict[str, list[PromSample]] = {k: [] for k in KEYS}
    rate: list[PromSample] = []
    active: list[PromSample] = []
    for p in fab.ports:
        node = fab.node(p.guid)
        if node is None or node.kind != SWITCH or p.peer is None:
            continue
        labels = {
            "switch": node.desc,
            "guid": p.guid,
            "port": str(p.port),
            "remote_node": names.node(p.peer.guid),
            "remote_port": str(p.peer.port),
        }
        active.append(PromSample(labels, 1.0 if p.state in ("Active", None) else 0.0))
        if p.rate_gbps is not None:
            rate.append(PromSample(labels, p.rate_gbps))
        pc = counters.get((p.guid, p.port))
        for k in KEYS:
            v = (pc.counters or {}).get(k) if pc else None
            if v is not None:
                per[k].append(PromSample(labels, float(v)))
    out = [
        Metric(
            "ibdiag_fabric_port_active",
            "1 when the switch port's link is Active",
            "gauge",
            tuple(active),
        ),
        Metric(
            "ibdiag_fabric_port_rate_gbps",
            "Link data rate (width x lane speed), Gb/s",
            "gauge",
            tuple(rate),
        ),
    ]
    for k in KEYS:
        if per[k]:
            out.append(
                Metric(
                    f"ibdiag_fabric_port_{IB_COUNTERS[k].prom}",
                    f"{IB_COUNTERS[k].iba} of the switch port",
                    "counter",
                    tuple(per[k]),
                )
            )
    masters = sum(1 for s in fab.sms if s.state == "master")
    if fab.sm_known:
        out.append(
            Metric(
                "ibdiag_fabric_sm_masters",
                "Master subnet managers answering",
                "gauge",
                (PromSample({}, float(masters)),),
            )
        )
    return out
