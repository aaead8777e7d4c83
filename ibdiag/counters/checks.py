"""Samples and spans -> findings: is a port erroring, flapping, backpressured or congested?

Check ids (stable; one finding per check and port, subject ``mlx5_0:1``, the device-level
``hw_counters`` use the adapter name):

* ``port.state`` / ``port.rate``  the port is not ACTIVE/LinkUp, or slower than expected
  (:mod:`ibdiag.ports.checks`, the same judgement as ``ibdiag topo``'s)
* ``counters.errors``    the IBA error counters. Snapshot: non-zero warns, saturated fails.
  Interval/--since: any increase warns; more than the threshold per interval (infiniband-diags'
  error_thresholds) or a rate above ``rate_limit_per_s`` for the rate-limited ones fails; saturated fails.
* ``counters.xmit_wait`` backpressure (PortXmitWait): more than its threshold per interval warns, with
  the estimated share of time spent waiting; saturated warns (no rate can be measured)
* ``counters.roce_errors``  transport loss and receive-buffer counters in hw_counters (retransmission
  timeouts, sequence errors, RNR retries, out_of_buffer): any increase warns, loss above the rate limit fails
* ``counters.roce_congestion``  ECN marks and CNPs: congestion, warns when they increase
* ``counters.throughput``  tx/rx Gb/s and utilisation; warns when saturated data counters hide them
* ``counters.reset``     counters went down during the interval (reset): deltas are lower bounds
* ``counters.unavailable``  no counters/ directory, ``N/A (no PMA)``, unreadable or malformed files
* ``counters.baseline``  a port the ``--since`` baseline has and this reading does not, or the reverse
* ``counters.ports``     no RDMA port at all (only from :func:`ibdiag.counters.snapshot_findings`)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ibdiag.counters.config import CountersConfig
from ibdiag.counters.delta import figures
from ibdiag.counters.model import PortCounters, PortDelta, Sample, Span
from ibdiag.counters.spec import (
    CONGESTION_HINT,
    ERROR_COUNTERS,
    HINTS,
    HW_JUDGED,
    HwGroup,
    max_value,
    width_bits,
)
from ibdiag.counters.text import duration_text, pct
from ibdiag.ports.checks import check_ports
from ibdiag.ports.config import PortsConfig
from ibdiag.report.checks import CheckRegistry
from ibdiag.report.model import Finding, Severity
from ibdiag.topo.model import Port

CHECKS = CheckRegistry("counters")
CHECKS.declare("counters.errors", "IBA error counters: non-zero (snapshot) or increasing: warn; over the threshold or rate limit, or saturated: fail")
CHECKS.declare("counters.xmit_wait", "backpressure (port_xmit_wait) over its threshold per interval, or saturated: warn")
CHECKS.declare("counters.roce_errors", "transport loss and receive-buffer hw_counters increasing: warn; loss above the rate limit: fail")
CHECKS.declare("counters.roce_congestion", "ECN marks and CNPs increasing: warn (congestion)")
CHECKS.declare("counters.throughput", "tx/rx Gb/s and utilisation; saturated data counters: warn")
CHECKS.declare("counters.reset", "counters went down during the interval (reset): warn")
CHECKS.declare("counters.unavailable", "no counters/, N/A (no PMA), unreadable or malformed counters: warn")
CHECKS.declare("counters.baseline", "a port the --since baseline has and this reading does not, or the reverse: warn")
CHECKS.declare("counters.ports", "no RDMA port at all (ibdiag.counters.snapshot_findings): ok")


SNAPSHOT_HINT = (
    "counts are since the last reset, time unknown: `ibdiag counters --interval 10` measures a rate, "
    "`ibdiag counters -o json > before.json` then `--since before.json` measures a job"
)


@dataclass(frozen=True)
class _Item:
    severity: Severity
    text: str
    value: Any = None
    limit: Any = None
    unit: str | None = None
    hint: str | None = None
    note: str | None = None
    """What the counter means, said once after the list."""


def _combine(check: str, subject: str, items: Iterable[_Item], ok: str, *, prefix: str = "", sep: str = ", ", ok_value: Any = None, ok_unit: str | None = None) -> Finding:
    """One finding per check and port: the worst item decides severity, value and hint; the message lists every problem."""
    bad = sorted((i for i in items if i.severity is not Severity.OK), key=lambda i: -i.severity.rank)
    if not bad:
        return Finding(check, Severity.OK, subject, ok, value=ok_value, unit=ok_unit)
    worst = bad[0]
    message = prefix + sep.join(i.text for i in bad)
    notes: list[str] = []
    for i in bad:
        if i.note and i.note not in notes:
            notes.append(i.note)
    if notes:
        message += " — " + "; ".join(notes)
    return Finding(check, worst.severity, subject, message, value=worst.value, limit=worst.limit, unit=worst.unit, hint=worst.hint)


def _n(v: float | None) -> str:
    if v is None:
        return "?"
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    if abs(v) >= 100:
        return f"{v:.0f}"
    return f"{v:.3g}"


def _sat_text(name: str, p: PortCounters) -> tuple[int, int]:
    bits = width_bits(name, data_bits=p.data_bits) or 64
    return max_value(bits), bits


def _judged_ports(sample: Sample, ports: PortsConfig) -> list[PortCounters]:
    return [p for p in sample.ports if not ports.ignored(p.adapter, p.port)]


def port_findings(sample: Sample, ports: PortsConfig, peers: Sequence[Port] | None = None) -> list[Finding]:
    """``port.state``/``port.rate`` of the sample's ports (:func:`ibdiag.ports.checks.check_ports`)."""
    return check_ports([p.info for p in sample.ports if p.info is not None], ports, peers=peers)


def _unavailable(p: PortCounters) -> Finding | None:
    if p.port is not None and p.counters is None:
        return Finding(
            "counters.unavailable",
            Severity.WARN,
            p.subject,
            "no counters/ directory: this port's error and data counters cannot be read or judged",
            hint="the driver exposes no PMA counters for this port (some RoCE or software devices, or an incomplete snapshot); "
            f"`rdma statistic show link {p.subject.replace(':', '/')}` or `ethtool -S <netdev>` show what it has",
        )
    if not p.unavailable:
        return None
    by_reason: dict[str, list[str]] = {}
    for name, why in p.unavailable.items():
        by_reason.setdefault(why, []).append(name)
    parts = []
    for why, names in by_reason.items():
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        parts.append(f"{len(names)} counter(s) {why!r}: {shown}" if why.startswith("N/A") else f"{shown}: {why}")
    no_pma = any(why.startswith("N/A") for why in by_reason)
    hint = (
        "this kernel has no PMA for the device (old kernels print N/A (no PMA) for RoCE devices): use `ethtool -S <netdev>` or upgrade the kernel/driver"
        if no_pma
        else "the driver refused or garbled these reads (EINVAL/EIO on some firmware); they are treated as unknown, compare with a healthy node"
    )
    return Finding("counters.unavailable", Severity.WARN, p.subject, "; ".join(parts), value=len(p.unavailable), unit="counters", hint=hint)


# --- snapshot ----------------------------------------------------------------------------------------


def _snapshot_port(p: PortCounters, cfg: CountersConfig) -> list[Finding]:
    out: list[Finding] = []
    counters = p.counters or {}
    # Only counters that have a value: N/A and unreadable ones are counters.unavailable's to report.
    present = [n for n in ERROR_COUNTERS if counters.get(n) is not None and cfg.judged(n)]
    if p.port is not None and present:
        items = []
        for name in present:
            v = counters[name]
            if v is None:
                continue
            if name in p.saturated:
                top, bits = _sat_text(name, p)
                items.append(
                    _Item(
                        Severity.FAIL,
                        f"{name} ≥{top} (saturated, {bits}-bit)",
                        value=v,
                        limit=top,
                        hint=f"{HINTS[name]}. A saturated counter stops counting: after fixing, reset it (`perfquery -C {p.adapter} -P {p.port} -R`) to see new errors",
                        note="a saturated counter means at least that many",
                    )
                )
            elif v > 0:
                items.append(_Item(Severity.WARN, f"{name} {v}", value=v, hint=f"{HINTS[name]}; {SNAPSHOT_HINT}"))
        out.append(_combine("counters.errors", p.subject, items, f"all {len(present)} error counters are 0 since the last reset", prefix="error counters since the last reset: "))
    if "port_xmit_wait" in counters and cfg.judged("port_xmit_wait"):
        v = counters["port_xmit_wait"]
        if v is not None:
            if "port_xmit_wait" in p.saturated:
                out.append(
                    Finding(
                        "counters.xmit_wait",
                        Severity.WARN,
                        p.subject,
                        f"port_xmit_wait is saturated at {v} (32-bit): heavy backpressure since the last reset; no rate can be measured until the counters are reset",
                        value=v,
                        limit=v,
                        unit="ticks",
                        hint=f"{HINTS['port_xmit_wait']}; reset with `perfquery -C {p.adapter} -P {p.port} -R`, then `ibdiag counters --interval 10`",
                    )
                )
            else:
                out.append(Finding("counters.xmit_wait", Severity.OK, p.subject, f"port_xmit_wait = {v} ticks since the last reset (use --interval for a rate)", value=v, unit="ticks"))
    out.extend(_roce_snapshot(p, cfg))
    return out


_GROUP_NOTE = {
    HwGroup.LOSS: "retransmissions and sequence errors: packets were lost or reordered",
    HwGroup.HOST: "out_of_buffer: the receiver had no buffer posted",
    HwGroup.CONGESTION: "ECN/CNP: congestion control acted",
}


def _roce_snapshot(p: PortCounters, cfg: CountersConfig) -> list[Finding]:
    hw = p.hw_counters or {}
    judged = [n for n in HW_JUDGED if n in hw and cfg.judged(n) and hw[n] is not None]
    if not judged:
        return []
    out = []
    errs = [n for n in judged if HW_JUDGED[n].group is not HwGroup.CONGESTION]
    if errs:
        items = [
            _Item(Severity.WARN, f"{n} {hw[n]}", value=hw[n], hint=f"{HW_JUDGED[n].hint}; {SNAPSHOT_HINT}", note=_GROUP_NOTE[HW_JUDGED[n].group])
            for n in errs
            if (hw[n] or 0) > 0
        ]
        out.append(_combine("counters.roce_errors", p.subject, items, "no transport retransmission, sequence or receive-buffer errors since the last reset", prefix="since the last reset: "))
    cong = [n for n in judged if HW_JUDGED[n].group is HwGroup.CONGESTION]
    if cong:
        active = [n for n in cong if (hw[n] or 0) > 0]
        if active:
            text = "congestion control has acted since the last reset: " + ", ".join(f"{n} = {hw[n]}" for n in active)
            out.append(Finding("counters.roce_congestion", Severity.OK, p.subject, text + " (use --interval to see whether it is happening now)"))
        else:
            out.append(Finding("counters.roce_congestion", Severity.OK, p.subject, "no ECN marks or CNPs since the last reset"))
    return out


def check_snapshot(
    sample: Sample,
    cfg: CountersConfig | None = None,
    ports: PortsConfig | None = None,
    *,
    peers: Sequence[Port] | None = None,
    port_health: bool = True,
) -> list[Finding]:
    """Findings of one reading: counts since the last reset, time unknown.

    ``peers``: the node's ports a selection's rates are judged against (default: the sample's);
    ``port_health`` False leaves ``port.*`` out, for a caller that judges the ports itself (verdict).
    """
    cfg = cfg or CountersConfig()
    ports = ports or PortsConfig()
    out = port_findings(sample, ports, peers) if port_health else []
    for p in _judged_ports(sample, ports):
        out.extend(_snapshot_port(p, cfg))
        u = _unavailable(p)
        if u is not None:
            out.append(u)
    return out


# --- interval, series, --since ---------------------------------------------------------------------------


def _increase(d: int, lower_bound: bool) -> str:
    return f"+{d}" + (" or more" if lower_bound else "")


def _errors_span(p: PortCounters, d: PortDelta, cfg: CountersConfig, dur: str) -> Finding | None:
    counters = p.counters or {}
    present = [n for n in ERROR_COUNTERS if n in counters and cfg.judged(n) and (d.deltas.get(n) is not None or n in p.saturated or d.unknown.get(n) == "saturated")]
    if not present:
        return None
    items = []
    for name in present:
        delta = d.deltas.get(name)
        if name in p.saturated or (delta is None and d.unknown.get(name) == "saturated"):
            # Saturated now (or throughout): whatever was counted before, the count is lost from here on.
            top, bits = _sat_text(name, p)
            before = f", +{delta} before it saturated" if delta else ""
            items.append(
                _Item(
                    Severity.FAIL,
                    f"{name} saturated at {top} ({bits}-bit){before}, no delta",
                    value=counters.get(name),
                    limit=top,
                    hint=f"{HINTS[name]}. Reset the counters (`perfquery -C {p.adapter} -P {p.port} -R`) to measure again",
                    note="a saturated counter means at least that many since the last reset",
                )
            )
            continue
        if delta is None:
            continue  # unavailable or no baseline: counters.unavailable / counters.baseline say so
        lower = name in d.resets
        rate = d.rates.get(name) or 0.0
        peak = d.peak_rates.get(name) or 0.0
        thr = cfg.thresholds.get(name)
        per_s = f"{_n(rate)}/s" + (f", peak {_n(peak)}/s" if d.samples > 1 and peak > rate else "")
        reset_note = "counters were reset during the interval: + N or more" if lower else None
        if thr is not None and delta > thr:
            items.append(_Item(Severity.FAIL, f"{name} {_increase(delta, lower)} ({per_s}) over the threshold of {thr} per interval", value=delta, limit=thr, hint=HINTS[name], note=reset_note))
        elif name in cfg.rate_limited and peak > cfg.rate_limit_per_s:
            items.append(
                _Item(Severity.FAIL, f"{name} at {_n(peak)}/s over the rate limit of {_n(cfg.rate_limit_per_s)}/s", value=round(peak, 3), limit=cfg.rate_limit_per_s, unit="/s", hint=HINTS[name], note=reset_note)
            )
        elif delta > 0:
            items.append(_Item(Severity.WARN, f"{name} {_increase(delta, lower)} ({per_s})", value=delta, limit=thr, hint=HINTS[name], note=reset_note))
    return _combine("counters.errors", p.subject, items, f"no error counter increased in {dur} ({len(present)} checked)", prefix=f"in {dur}: ", sep="; ", ok_value=0)


def _xmit_wait_span(p: PortCounters, d: PortDelta, cfg: CountersConfig, dur: str) -> Finding | None:
    if "port_xmit_wait" not in (p.counters or {}) or not cfg.judged("port_xmit_wait"):
        return None
    delta = d.deltas.get("port_xmit_wait")
    if delta is None or "port_xmit_wait" in p.saturated:
        if "port_xmit_wait" in p.saturated or d.unknown.get("port_xmit_wait") == "saturated":
            return Finding(
                "counters.xmit_wait",
                Severity.WARN,
                p.subject,
                "port_xmit_wait is saturated at 4294967295 (32-bit): backpressure cannot be measured until the counters are reset",
                value=(p.counters or {}).get("port_xmit_wait"),
                limit=max_value(32),
                unit="ticks",
                hint=f"{HINTS['port_xmit_wait']}; reset with `perfquery -C {p.adapter} -P {p.port} -R`",
            )
        return None
    rate_gbps = p.info.rate_gbps if p.info else None
    fig = figures(d, rate_gbps, xmit_wait_bytes_per_count=cfg.xmit_wait_bytes_per_count)
    share = f"; est. {pct(fig.xmit_wait_est_pct)} of the time waiting for credits (assuming {_n(cfg.xmit_wait_bytes_per_count)} B per count)" if fig.xmit_wait_est_pct is not None else ""
    thr = cfg.thresholds.get("port_xmit_wait")
    if thr is not None and delta > thr:
        return Finding(
            "counters.xmit_wait",
            Severity.WARN,
            p.subject,
            f"port_xmit_wait {_increase(delta, 'port_xmit_wait' in d.resets)} ticks in {dur} ({_n(fig.xmit_wait_per_s)}/s){share}, over the threshold of {thr} per interval",
            value=delta,
            limit=thr,
            unit="ticks",
            hint=HINTS["port_xmit_wait"],
        )
    return Finding("counters.xmit_wait", Severity.OK, p.subject, f"port_xmit_wait +{delta} ticks in {dur}{share}", value=delta, limit=thr, unit="ticks")


def _roce_span(p: PortCounters, d: PortDelta, cfg: CountersConfig, dur: str) -> list[Finding]:
    hw = p.hw_counters or {}
    judged = [n for n in HW_JUDGED if n in hw and cfg.judged(n)]
    if not judged:
        return []
    out = []
    errs = [n for n in judged if HW_JUDGED[n].group is not HwGroup.CONGESTION]
    if errs:
        items = []
        for n in errs:
            key = p.hw_key(n)
            delta = d.deltas.get(key)
            if delta is None:
                continue
            spec = HW_JUDGED[n]
            peak = d.peak_rates.get(key) or 0.0
            thr = cfg.roce_thresholds.get(n, 0)
            if spec.group is HwGroup.LOSS and peak > cfg.rate_limit_per_s:
                items.append(_Item(Severity.FAIL, f"{n} at {_n(peak)}/s over the rate limit of {_n(cfg.rate_limit_per_s)}/s", value=round(peak, 3), limit=cfg.rate_limit_per_s, unit="/s", hint=spec.hint, note=_GROUP_NOTE[spec.group]))
            elif delta > thr:
                items.append(_Item(Severity.WARN, f"{n} +{delta} ({_n(d.rates.get(key))}/s)", value=delta, limit=thr, hint=spec.hint, note=_GROUP_NOTE[spec.group]))
        out.append(_combine("counters.roce_errors", p.subject, items, f"no transport retransmission, sequence or receive-buffer errors in {dur}", prefix=f"in {dur}: ", sep="; ", ok_value=0))
    cong = [n for n in judged if HW_JUDGED[n].group is HwGroup.CONGESTION]
    if cong:
        active = []
        for n in cong:
            key = p.hw_key(n)
            delta = d.deltas.get(key)
            if delta is not None and delta > cfg.roce_thresholds.get(n, 0):
                active.append((n, delta, d.rates.get(key)))
        if active:
            worst = max(active, key=lambda t: t[1])
            out.append(
                Finding(
                    "counters.roce_congestion",
                    Severity.WARN,
                    p.subject,
                    f"congestion in {dur}: " + ", ".join(f"{n} {_n(r)}/s" for n, _, r in active) + " (ECN/CNP: switches queued this traffic and DCQCN slowed the sender)",
                    value=worst[1],
                    limit=cfg.roce_thresholds.get(worst[0], 0),
                                        hint=CONGESTION_HINT,
                )
            )
        else:
            out.append(Finding("counters.roce_congestion", Severity.OK, p.subject, f"no ECN marks or CNPs in {dur}", value=0))
    return out


def _throughput_span(p: PortCounters, d: PortDelta, cfg: CountersConfig) -> Finding | None:
    if p.port is None or not p.counters or not any(k in p.counters for k in ("port_xmit_data", "port_rcv_data")):
        return None
    sat = [k for k in ("port_xmit_data", "port_rcv_data") if d.unknown.get({"port_xmit_data": "xmit_bytes", "port_rcv_data": "rcv_bytes"}[k]) == "saturated" or k in p.saturated]
    if sat:
        bits = p.data_bits
        return Finding(
            "counters.throughput",
            Severity.WARN,
            p.subject,
            f"{', '.join(sat)} saturated at {max_value(bits)} ({bits}-bit): throughput cannot be measured",
            value=(p.counters or {}).get(sat[0]),
            limit=max_value(bits),
            unit="words",
            hint=f"32-bit data counters saturate after 16 GiB; reset them (`perfquery -C {p.adapter} -P {p.port} -R`) before measuring, "
            "or set [counters] extended_counters = \"yes\" if this adapter has 64-bit counters",
        )
    rate_gbps = p.info.rate_gbps if p.info else None
    fig = figures(d, rate_gbps, xmit_wait_bytes_per_count=cfg.xmit_wait_bytes_per_count)
    if fig.tx_gbps is None and fig.rx_gbps is None:
        return None
    util = f" ({_n(fig.tx_util_pct)}% / {_n(fig.rx_util_pct)}% of {_n(rate_gbps)} Gb/s)" if fig.tx_util_pct is not None and fig.rx_util_pct is not None else ""
    return Finding(
        "counters.throughput",
        Severity.OK,
        p.subject,
        f"tx {_n(fig.tx_gbps)} Gb/s, rx {_n(fig.rx_gbps)} Gb/s{util}",
        value=None if fig.tx_gbps is None else round(fig.tx_gbps, 3),
        limit=rate_gbps,
        unit="Gb/s",
    )


def _reset_span(p: PortCounters, d: PortDelta, dur: str) -> Finding | None:
    if not d.resets:
        return None
    shown = ", ".join(d.resets[:5]) + (f" and {len(d.resets) - 5} more" if len(d.resets) > 5 else "")
    return Finding(
        "counters.reset",
        Severity.WARN,
        p.subject,
        f"{len(d.resets)} counter(s) went down in {dur} ({shown}): they were reset, so their deltas count from the reset and are lower bounds",
        value=len(d.resets),
        unit="counters",
        hint="someone reset the counters (perfquery -R, a monitoring agent), the driver reloaded or the host rebooted; measure again over a quiet interval",
    )


def check_span(span: Span, cfg: CountersConfig | None = None, ports: PortsConfig | None = None, *, peers: Sequence[Port] | None = None) -> list[Finding]:
    """Findings of counting over time (``--interval``, ``--count``, ``--since``), judged on the totals
    (port state and rate on the last reading)."""
    cfg = cfg or CountersConfig()
    ports = ports or PortsConfig()
    last = span.last
    out = port_findings(last, ports, peers)
    dur = duration_text(span.interval_s)
    for p in _judged_ports(last, ports):
        d = span.total(p.key)
        if d is None:
            continue
        if d.deltas and all(w == "no baseline" for w in d.unknown.values()) and len(d.unknown) == len(d.deltas):
            out.append(
                Finding(
                    "counters.baseline",
                    Severity.WARN,
                    p.subject,
                    "this port is not in the baseline: no deltas",
                    hint="the adapter appeared (hot-plug, driver load) after the baseline was saved; save a new baseline",
                )
            )
        else:
            for f in (_errors_span(p, d, cfg, dur), _xmit_wait_span(p, d, cfg, dur), *_roce_span(p, d, cfg, dur), _throughput_span(p, d, cfg), _reset_span(p, d, dur)):
                if f is not None:
                    out.append(f)
        u = _unavailable(p)
        if u is not None:
            out.append(u)
    for subject in span.missing:
        adapter, _, port = subject.partition(":")
        if ports.ignored(adapter, int(port) if port.isdigit() else None):
            continue
        out.append(
            Finding(
                "counters.baseline",
                Severity.WARN,
                subject,
                "this port is in the baseline but not in this reading",
                hint="the adapter disappeared (driver unloaded, device failed or renamed): check `dmesg` and `ibstat`",
            )
        )
    return out



@dataclass(frozen=True)
class Judging:
    """What every mode of ``ibdiag counters`` judges with: ``[counters]``, ``[ports]``, and the node's
    ports when only a selection (``--device``) is read."""

    cfg: CountersConfig = CountersConfig()
    ports: PortsConfig = PortsConfig()
    peers: tuple[Port, ...] | None = None
    """Every port of the node, for a selection's expected rates; None: the reading's own ports."""

    @classmethod
    def from_config(cls, config: Any) -> Judging:
        """From a loaded :class:`ibdiag.config.Config`."""
        return cls(config.section("counters", CountersConfig), config.section("ports", PortsConfig))

    def with_node_peers(self, sysfs: Any) -> Judging:
        """For a selection of ports: a slow port is still judged against every port of the node, as topo does."""
        from ibdiag.ports.read import node_ports

        return replace(self, peers=node_ports(sysfs))

    def snapshot(self, sample: Sample) -> list[Finding]:
        return check_snapshot(sample, self.cfg, self.ports, peers=self.peers)

    def span(self, span: Span) -> list[Finding]:
        return check_span(span, self.cfg, self.ports, peers=self.peers)
