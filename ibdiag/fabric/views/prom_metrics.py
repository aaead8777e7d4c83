"""Prometheus metrics of the fabric, named as the IB exporters operators already run name them.

Per switch port, ``ibdiag_fabric_switch_port_<name>_total`` with treydock/infiniband_exporter's
switch collector's ``<name>`` (``collectors/switch.go``: ``infiniband_switch_port_symbol_error_total``
...) after ibdiag's prefix, in base units: data counters in bytes (the PortXmitData/PortRcvData
4-octet words x 4, as that exporter's ``perfquery.go`` multiplies them), packets and errors as counts,
the link rate in bytes per second. Labels ``switch``, ``guid``, ``port``, ``remote_node``,
``remote_port``; ``ibdiag_fabric_switch_port_info`` (value 1) adds the far end's GUID, LID and type
for joins. contrib/prometheus/ibdiag-exporter-compat.yml records treydock's and guilbaults'
(``infiniband_portxmitdata_total`` ...) series from these, so their dashboards read ibdiag's.
The shape (docs/fabric-shape.md): per switch below the top tier ``ibdiag_fabric_switch_*`` (``switch``,
``guid``, ``tier``), the fabric's bisection, host-link capacity, tiers and whether it is rail-optimised.

One process writes these for the whole subnet (``ibdiag fabric --textfile`` on a management host):
every node running it would export the same series under its own ``instance``.
"""

from __future__ import annotations

from ibdiag.counters.spec import IB_COUNTERS, Kind
from ibdiag.fabric.judge import Judged
from ibdiag.fabric.model import SWITCH, FabricPort
from ibdiag.fabric.shape import SINGLE, TREE, tier_name
from ibdiag.output.prom import Metric, PromSample

#: IBA counter -> the name infiniband_exporter's switch collector gives it (without
#: ``infiniband_switch_``), so ``ibdiag_fabric_switch_<this>`` is that series under ibdiag's prefix.
EXPORTER_NAMES: dict[str, str] = {
    "SymbolErrorCounter": "port_symbol_error_total",
    "LinkErrorRecoveryCounter": "port_link_error_recovery_total",
    "LinkDownedCounter": "port_link_downed_total",
    "PortRcvErrors": "port_receive_errors_total",
    "PortRcvRemotePhysicalErrors": "port_receive_remote_physical_errors_total",
    "PortRcvSwitchRelayErrors": "port_receive_switch_relay_errors_total",
    "PortXmitDiscards": "port_transmit_discards_total",
    "PortXmitConstraintErrors": "port_transmit_constraint_errors_total",
    "PortRcvConstraintErrors": "port_receive_constraint_errors_total",
    "LocalLinkIntegrityErrors": "port_local_link_integrity_errors_total",
    "ExcessiveBufferOverrunErrors": "port_excessive_buffer_overrun_errors_total",
    "VL15Dropped": "port_vl15_dropped_total",
    "PortXmitWait": "port_transmit_wait_total",
    "PortXmitData": "port_transmit_data_bytes_total",
    "PortRcvData": "port_receive_data_bytes_total",
    "PortXmitPkts": "port_transmit_packets_total",
    "PortRcvPkts": "port_receive_packets_total",
    "PortUnicastXmitPkts": "port_unicast_transmit_packets_total",
    "PortUnicastRcvPkts": "port_unicast_receive_packets_total",
    "PortMulticastXmitPkts": "port_multicast_transmit_packets_total",
    "PortMulticastRcvPkts": "port_multicast_receive_packets_total",
}
#: sysfs/IBA key of ibdiag's counters -> (metric name, bytes per count)
KEYS: dict[str, tuple[str, int]] = {
    key: (f"ibdiag_fabric_switch_{EXPORTER_NAMES[spec.iba]}", 4 if spec.kind is Kind.DATA else 1)
    for key, spec in IB_COUNTERS.items()
    if spec.iba in EXPORTER_NAMES
}
PREFIX = "ibdiag_fabric_switch_port_"


def _labels(j: Judged, p: FabricPort) -> dict[str, str]:
    assert p.peer is not None
    node = j.fabric.node(p.guid)
    return {
        "switch": node.desc if node else p.guid,
        "guid": p.guid,
        "port": str(p.port),
        "remote_node": j.names.node(p.peer.guid),
        "remote_port": str(p.peer.port),
    }


def _info(j: Judged, p: FabricPort, labels: dict[str, str]) -> PromSample:
    """The far end's GUID, type (``CA``/``SW``, as infiniband_exporter's ``uplink_type``) and LID."""
    assert p.peer is not None
    peer_node, peer_port = j.fabric.node(p.peer.guid), j.fabric.port(p.peer)
    lid = peer_node.lid if peer_node and peer_node.kind == SWITCH else None
    if lid is None and peer_port is not None:
        lid = peer_port.lid
    kind = (
        ""
        if peer_node is None
        else {"switch": "SW", "ca": "CA", "router": "RT"}.get(peer_node.kind, "")
    )
    return PromSample(
        {
            **labels,
            "remote_guid": p.peer.guid,
            "remote_type": kind,
            "remote_lid": "" if lid is None else str(lid),
        },
        1.0,
    )


def prom_metrics(j: Judged) -> list[Metric]:
    fab = j.fabric
    counters = {pc.key: pc for pc in fab.counters.ports} if fab.counters else {}
    per: dict[str, list[PromSample]] = {k: [] for k in KEYS}
    info: list[PromSample] = []
    rate: list[PromSample] = []
    active: list[PromSample] = []
    for p in fab.ports:
        node = fab.node(p.guid)
        if node is None or node.kind != SWITCH or p.peer is None:
            continue
        labels = _labels(j, p)
        info.append(_info(j, p, labels))
        active.append(PromSample(labels, 1.0 if p.state in ("Active", None) else 0.0))
        if p.rate_gbps is not None:
            rate.append(PromSample(labels, p.rate_gbps * 1e9 / 8))
        pc = counters.get((p.guid, p.port))
        for k, (_, scale) in KEYS.items():
            v = (pc.counters or {}).get(k) if pc else None
            if v is not None:
                per[k].append(PromSample(labels, float(v * scale)))
    out = [
        Metric(
            f"{PREFIX}info",
            "The switch port's far end (1 per cabled port): remote_guid, remote_type (CA, SW), remote_lid",
            "gauge",
            tuple(info),
        ),
        Metric(
            f"{PREFIX}active", "1 when the switch port's link is Active", "gauge", tuple(active)
        ),
        Metric(
            f"{PREFIX}rate_bytes_per_second",
            "Link data rate (width x lane speed), bytes per second",
            "gauge",
            tuple(rate),
        ),
    ]
    for k, (name, scale) in KEYS.items():
        if per[k]:
            unit = ", bytes (4-octet words x 4)" if scale == 4 else ""
            out.append(
                Metric(
                    name, f"{IB_COUNTERS[k].iba} of the switch port{unit}", "counter", tuple(per[k])
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
            "down_bytes_per_second": _bytes(x.down_gbps),
            "up_bytes_per_second": _bytes(x.up_gbps),
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
        ("host_links_bytes_per_second", "Sum of the active host links' rates, bytes per second", _bytes(sh.host_gbps)),
        ("bisection_bytes_per_second", "Maximum flow between two halves of the leaves (docs/fabric-shape.md), bytes per second", _bytes(sh.bisection_gbps)),
        ("rail_optimised", "1 when rail k of every host is on a leaf of rail k; absent with one rail per host", None if j.rails is None or j.rails.optimised is None else float(j.rails.optimised)),
    )  # fmt: skip
    for name, help_text, v in fabric_wide:
        if v is not None:
            out.append(Metric(f"ibdiag_fabric_{name}", help_text, "gauge", (PromSample({}, v),)))
    return out


def _bytes(gbps: float | None) -> float | None:
    """Gb/s (decimal, as link rates are given) -> bytes per second, Prometheus' base unit."""
    return None if gbps is None else gbps * 1e9 / 8


SWITCH_SERIES = {
    "down_bytes_per_second": "Capacity of the switch's active links down (host links for a leaf), bytes per second",
    "up_bytes_per_second": "Capacity of the switch's active uplinks to the tier above, bytes per second",
    "uplinks": "Active uplinks to the tier above",
    "oversubscription_ratio": "Down over up capacity (2 is 2:1)",
}
