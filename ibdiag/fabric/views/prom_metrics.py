"""Prometheus metrics per switch port, labelled as IB-exporter users expect: ``switch``, ``port``,
``remote_node``, ``remote_port`` (plus ``guid``). Counter names follow node_exporter's infiniband
collector (``symbol_error_total`` ...) under ``ibdiag_fabric_port_``. The shape (docs/fabric-shape.md): per
switch below the top tier ``ibdiag_fabric_switch_*`` (``switch``, ``guid``, ``tier``), the fabric's
bisection, host-link capacity, tiers and whether it is rail-optimised."""

from __future__ import annotations

from ibdiag.counters.spec import IB_COUNTERS
from ibdiag.fabric.judge import Judged
from ibdiag.fabric.model import SWITCH
from ibdiag.fabric.shape import SINGLE, TREE, tier_name
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
    out += shape_metrics(j)
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


def shape_metrics(j: Judged) -> list[Metric]:
    """The shape's series: none for a fabric that is not a tree of tiers (its loads are not judged)."""
    sh, names = j.shape, j.names
    out: list[Metric] = []
    if sh is None:
        return out
    per: dict[str, list[PromSample]] = {k: [] for k in SWITCH_SERIES}
    for x in sh.loads:
        labels = {"switch": names.node(x.guid), "guid": x.guid, "tier": tier_name(x.tier)}
        values = {
            "down_gbps": x.down_gbps,
            "up_gbps": x.up_gbps,
            "uplinks": float(x.uplinks),
            "oversubscription_ratio": x.ratio,
        }
        for k, v in values.items():
            if v is not None:
                per[k].append(PromSample(labels, v))
    for k, help_text in SWITCH_SERIES.items():
        if per[k]:
            out.append(Metric(f"ibdiag_fabric_switch_{k}", help_text, "gauge", tuple(per[k])))
    fabric_wide = (
        ("tiers", "Tiers of the fat tree (1 a single switch); absent when not a tree of tiers", float(sh.depth) if sh.kind in (TREE, SINGLE) else None),
        ("host_links_gbps", "Sum of the active host links' rates, Gb/s", sh.host_gbps),
        ("bisection_gbps", "Maximum flow between two halves of the leaves (docs/fabric-shape.md), Gb/s", sh.bisection_gbps),
        ("rail_optimised", "1 when rail k of every host is on a leaf of rail k; absent with one rail per host", None if j.rails is None or j.rails.optimised is None else float(j.rails.optimised)),
    )  # fmt: skip
    for name, help_text, v in fabric_wide:
        if v is not None:
            out.append(Metric(f"ibdiag_fabric_{name}", help_text, "gauge", (PromSample({}, v),)))
    return out


SWITCH_SERIES = {
    "down_gbps": "Capacity of the switch's active links down (host links for a leaf), Gb/s",
    "up_gbps": "Capacity of the switch's active uplinks to the tier above, Gb/s",
    "uplinks": "Active uplinks to the tier above",
    "oversubscription_ratio": "Down over up capacity (2 is 2:1)",
}
