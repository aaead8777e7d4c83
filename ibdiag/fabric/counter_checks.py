"""Counter checks on every port of the fabric, with ``ibdiag counters``' meanings and rules.

The same rules judge a switch port as a host port (:mod:`ibdiag.counters.rules`: saturation, resets,
``[counters]`` thresholds); here the subject becomes the port's name and the message names the cable's
far end (the host, NIC and GPUs where the far end is a host). Backpressure: PortXmitWait as a share of
the interval per port (``--interval``/``--since``), and, snapshot or span, the ports where the fabric's
wait concentrates (the root of a congestion tree), inter-switch links and host-facing ports told apart.
"""

from __future__ import annotations

from dataclasses import replace

from ibdiag.counters.config import CountersConfig
from ibdiag.counters.delta import figures
from ibdiag.counters.model import PortDelta, Span
from ibdiag.counters.rules import SNAPSHOT_HINT, errors_snapshot, errors_span
from ibdiag.counters.spec import ERROR_COUNTERS
from ibdiag.fabric.checks import CHECKS
from ibdiag.fabric.config import FabricConfig
from ibdiag.fabric.hosts import Names
from ibdiag.fabric.model import SWITCH, Fabric, FabricPort, PortRef
from ibdiag.findings.model import Finding, Severity

FABRIC_SNAPSHOT_HINT = (
    "counts are since the last reset, time unknown: `ibdiag fabric --interval 10` measures a rate, "
    "`ibdiag fabric --save before.tar.gz` then `--since before.tar.gz` measures a job"
)


def totals_by_port(span: Span | None) -> dict[tuple[str, int | None], PortDelta]:
    """The span's per-port totals by key (Span.total scans: a fabric has thousands of ports)."""
    return {} if span is None else {d.key: d for d in span.totals}


def _where(fab: Fabric, names: Names, p: FabricPort) -> str:
    node = fab.node(p.guid)
    kind = (
        "inter-switch link"
        if fab.is_isl(p)
        else (
            "host-facing port"
            if node and node.kind == SWITCH
            else ("port" if node and node.kind == "unknown" else "host port")
        )
    )
    return f"{names.cable(p)} [{kind}]"


@CHECKS.check(
    "fabric.errors",
    "error counters on any port of the fabric (counters' rules and [counters] thresholds): warn/fail",
)
def errors(
    fab: Fabric, names: Names, cfg: CountersConfig, span: Span | None, dur: str
) -> list[Finding]:
    if fab.counters is None:
        return []
    out: list[Finding] = []
    totals = totals_by_port(span)
    for pc in fab.counters.ports:
        d = totals.get(pc.key)
        if (
            d is None
            and not pc.saturated
            and not pc.unavailable
            and not any((pc.counters or {}).values())
        ):
            continue  # a snapshot of a port that counted nothing: nothing to say (most of a fabric)
        port = fab.port(PortRef(pc.adapter, pc.port or 0))
        if port is None:
            continue
        f = errors_span(pc, d, cfg, dur) if d is not None else errors_snapshot(pc, cfg)
        if f is None or f.severity is Severity.OK:
            continue
        out.append(
            replace(
                f,
                hint=(f.hint or "").replace(SNAPSHOT_HINT, FABRIC_SNAPSHOT_HINT),
                check="fabric.errors",
                subject=names.subject(port.ref),
                message=f"{_where(fab, names, port)}: {f.message}",
            )
        )
    if not out:
        n = sum(
            1
            for pc in fab.counters.ports
            if any((pc.counters or {}).get(k) is not None for k in ERROR_COUNTERS)
        )
        what = (
            f"no error counted in {dur}"
            if span is not None
            else "all error counters 0 since the last reset"
        )
        if n == 0:
            # perfquery -x (PortCountersExtended) holds the data counters alone.
            return [
                Finding(
                    "fabric.errors",
                    Severity.OK,
                    "fabric",
                    f"{len(fab.counters.ports)} ports read, without error counters (data counters only): errors not judged",
                )
            ]
        out.append(Finding("fabric.errors", Severity.OK, "fabric", f"{n} ports: {what}"))
    return out


def _wait_rows(fab: Fabric, span: Span | None) -> list[tuple[FabricPort, float, PortDelta | None]]:
    rows = []
    assert fab.counters is not None
    totals = totals_by_port(span)
    for pc in fab.counters.ports:
        port = fab.port(PortRef(pc.adapter, pc.port or 0))
        if port is None:
            continue
        d = totals.get(pc.key)
        value = (
            d.deltas.get("port_xmit_wait")
            if d is not None
            else (pc.counters or {}).get("port_xmit_wait")
        ) or 0
        rows.append((port, float(value), d))
    return rows


@CHECKS.check(
    "fabric.xmit_wait",
    "PortXmitWait: a port waiting for credits over [fabric] xmit_wait_warn_pct of an interval, or where the fabric's wait concentrates: warn",
)
def xmit_wait(
    fab: Fabric, names: Names, cfg: CountersConfig, fcfg: FabricConfig, span: Span | None, dur: str
) -> list[Finding]:
    if fab.counters is None or all(
        (pc.counters or {}).get("port_xmit_wait") is None for pc in fab.counters.ports
    ):
        return []
    rows = _wait_rows(fab, span)
    total = sum(v for _, v, _ in rows)
    out: list[Finding] = []
    for port, value, d in sorted(rows, key=lambda r: -r[1]):
        if value <= 0:
            break
        share = value / total * 100
        est = (
            figures(
                d, port.rate_gbps, xmit_wait_bytes_per_count=cfg.xmit_wait_bytes_per_count
            ).xmit_wait_est_pct
            if d is not None
            else None
        )
        busy = est is not None and est >= fcfg.xmit_wait_warn_pct
        root = (
            share >= fcfg.congestion_share_pct
            and value >= fcfg.congestion_min_ticks
            and len(rows) > 1
        )
        if not (busy or root):
            continue
        parts = [
            f"{value:.0f} ticks of PortXmitWait"
            + (f" in {dur}" if span is not None else " since the last reset")
        ]
        if est is not None:
            parts.append(f"about {est:.1f}% of the time waiting for credits (est.)")
        parts.append(f"{share:.0f}% of the fabric's wait")
        out.append(
            Finding(
                "fabric.xmit_wait",
                Severity.WARN,
                names.subject(port.ref),
                f"{_where(fab, names, port)}: " + ", ".join(parts),
                value=round(est, 2) if est is not None else value,
                limit=fcfg.xmit_wait_warn_pct if est is not None else fcfg.congestion_min_ticks,
                unit="%" if est is not None else "ticks",
                hint="backpressure concentrates here: the receiver beyond it is slow or oversubscribed (incast onto one host, an uplink short of capacity); look at the ports it feeds",
            )
        )
    if not out:
        out.append(
            Finding(
                "fabric.xmit_wait",
                Severity.OK,
                "fabric",
                f"no port holds the fabric's backpressure ({total:.0f} ticks in all)",
            )
        )
    return out
