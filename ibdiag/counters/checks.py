"""Samples and spans -> findings: is a port erroring, flapping, backpressured or congested?

Check ids (stable; one finding per check and port, subject ``mlx5_0:1``, the device-level
``hw_counters`` use the adapter name); each is one function registered in ``CHECKS``, the rules behind
them for a snapshot and for a span are in :mod:`ibdiag.counters.rules`:

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
* ``counters.ports``     no RDMA port at all (only from :func:`ibdiag.counters.reading.reading_findings`)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ibdiag.counters import hw_rules, rules
from ibdiag.counters.config import CountersConfig
from ibdiag.counters.delta import figures
from ibdiag.counters.model import PortCounters, PortDelta, Sample, Span
from ibdiag.counters.spec import max_value
from ibdiag.counters.wording import count_text
from ibdiag.findings.model import Finding, Severity
from ibdiag.findings.registry import CheckRegistry
from ibdiag.node.discover import discover
from ibdiag.node.model import Port
from ibdiag.node.ports import node_ports
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.ports.checks import check_ports
from ibdiag.ports.config import PortsConfig, SetKind
from ibdiag.ports.selection import gpu_facing
from ibdiag.units import format_duration

CHECKS = CheckRegistry("counters")


@dataclass(frozen=True)
class PortReading:
    """What a per-port check judges: one port's reading and, over time, what it counted."""

    port: PortCounters
    cfg: CountersConfig
    delta: PortDelta | None = None
    """None: a snapshot (counts since the last reset, time unknown); else the span's totals."""
    duration: str = ""
    """The span's length as findings say it (``10 s``)."""


def _judged_ports(sample: Sample, ports: PortsConfig) -> list[PortCounters]:
    return [p for p in sample.ports if not ports.ignored(p.adapter, p.port)]


def port_findings(
    sample: Sample,
    ports: PortsConfig,
    peers: Sequence[Port] | None = None,
    gpu_names: Sequence[str] = (),
) -> list[Finding]:
    """``port.state``/``port.rate`` of the sample's ports (:func:`ibdiag.ports.checks.check_ports`);
    ``gpu_names``: the GPU-facing adapters ``[ports] expect_on = "gpu"`` means."""
    infos = [p.info for p in sample.ports if p.info is not None]
    return check_ports(infos, ports, peers=peers, gpu_names=gpu_names)


@CHECKS.check(
    "counters.unavailable", "no counters/, N/A (no PMA), unreadable or malformed counters: warn"
)
def unavailable(p: PortCounters) -> Finding | None:
    """Counters that have no value, reported once per port (not once per sample)."""
    if p.port is not None and p.counters is None and p.info is not None and p.info.software:
        # rxe and siw have no PMA (no process_mad), so the rdma core makes no counters/ for them
        # (drivers/infiniband/core/sysfs.c setup_port): normal, and their hw_counters are judged.
        return Finding(
            "counters.unavailable",
            Severity.OK,
            p.subject,
            "no counters/ directory, as for every software device (no PMA); its transport counters in hw_counters are judged",
        )
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
        parts.append(
            f"{len(names)} counter(s) {why!r}: {shown}"
            if why.startswith("N/A")
            else f"{shown}: {why}"
        )
    no_pma = any(why.startswith("N/A") for why in by_reason)
    hint = (
        "this kernel has no PMA for the device (old kernels print N/A (no PMA) for RoCE devices): use `ethtool -S <netdev>` or upgrade the kernel/driver"
        if no_pma
        else "the driver refused or garbled these reads (EINVAL/EIO on some firmware); they are treated as unknown, compare with a healthy node"
    )
    return Finding(
        "counters.unavailable",
        Severity.WARN,
        p.subject,
        "; ".join(parts),
        value=len(p.unavailable),
        unit="counters",
        hint=hint,
    )


@CHECKS.check(
    "counters.throughput", "tx/rx Gb/s and utilisation over a span; saturated data counters: warn"
)
def throughput(p: PortCounters, d: PortDelta, cfg: CountersConfig) -> Finding | None:
    if (
        p.port is None
        or not p.counters
        or not any(k in p.counters for k in ("port_xmit_data", "port_rcv_data"))
    ):
        return None
    sat = [
        k
        for k in ("port_xmit_data", "port_rcv_data")
        if d.unknown.get({"port_xmit_data": "xmit_bytes", "port_rcv_data": "rcv_bytes"}[k])
        == "saturated"
        or k in p.saturated
    ]
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
            'or set [counters] extended_counters = "yes" if this adapter has 64-bit counters',
        )
    rate_gbps = p.info.rate_gbps if p.info else None
    fig = figures(d, rate_gbps, xmit_wait_bytes_per_count=cfg.xmit_wait_bytes_per_count)
    if fig.tx_gbps is None and fig.rx_gbps is None:
        return None
    util = (
        f" ({count_text(fig.tx_util_pct)}% / {count_text(fig.rx_util_pct)}% of {count_text(rate_gbps)} Gb/s)"
        if fig.tx_util_pct is not None and fig.rx_util_pct is not None
        else ""
    )
    return Finding(
        "counters.throughput",
        Severity.OK,
        p.subject,
        f"tx {count_text(fig.tx_gbps)} Gb/s, rx {count_text(fig.rx_gbps)} Gb/s{util}",
        value=None if fig.tx_gbps is None else round(fig.tx_gbps, 3),
        limit=rate_gbps,
        unit="Gb/s",
    )


@CHECKS.check(
    "counters.reset",
    "counters went down during the span (reset): warn, the deltas are lower bounds",
)
def reset(p: PortCounters, d: PortDelta, dur: str) -> Finding | None:
    if not d.resets:
        return None
    shown = ", ".join(d.resets[:5]) + (
        f" and {len(d.resets) - 5} more" if len(d.resets) > 5 else ""
    )
    return Finding(
        "counters.reset",
        Severity.WARN,
        p.subject,
        f"{len(d.resets)} counter(s) went down in {dur} ({shown}): they were reset, so their deltas count from the reset and are lower bounds",
        value=len(d.resets),
        unit="counters",
        hint="someone reset the counters (perfquery -R, a monitoring agent), the driver reloaded or the host rebooted; measure again over a quiet interval",
    )


# --- the checks: one function per id, a snapshot or a span -----------------------------------------


def _by_mode(
    name: str, snapshot: Callable[..., Finding | None], span: Callable[..., Finding | None]
) -> Callable[[PortReading], Finding | None]:
    """A check that judges a snapshot by one rule and a span by the other (:mod:`ibdiag.counters.rules`)."""

    def judge(r: PortReading) -> Finding | None:
        return (
            snapshot(r.port, r.cfg) if r.delta is None else span(r.port, r.delta, r.cfg, r.duration)
        )

    judge.__name__ = judge.__qualname__ = name
    return judge


errors = CHECKS.check(
    "counters.errors",
    "IBA error counters: non-zero (snapshot) or increasing: warn; over the threshold or rate limit, or saturated: fail",
)(_by_mode("errors", rules.errors_snapshot, rules.errors_span))
xmit_wait = CHECKS.check(
    "counters.xmit_wait",
    "backpressure (port_xmit_wait) over its threshold per interval, or saturated: warn",
)(_by_mode("xmit_wait", rules.xmit_wait_snapshot, rules.xmit_wait_span))
roce_errors = CHECKS.check(
    "counters.roce_errors",
    "transport loss and receive-buffer hw_counters non-zero or increasing: warn; loss above the rate limit: fail",
)(_by_mode("roce_errors", hw_rules.roce_errors_snapshot, hw_rules.roce_errors_span))
roce_congestion = CHECKS.check(
    "counters.roce_congestion",
    "ECN marks and CNPs: history in a snapshot (ok), increasing over a span: warn (congestion)",
)(_by_mode("roce_congestion", hw_rules.roce_congestion_snapshot, hw_rules.roce_congestion_span))


@CHECKS.check(
    "counters.baseline",
    "a port the --since baseline has and this reading does not, or the reverse: warn",
)
def baseline(subject: str, *, gone: bool) -> Finding:
    if gone:
        return Finding(
            "counters.baseline",
            Severity.WARN,
            subject,
            "this port is in the baseline but not in this reading",
            hint="the adapter disappeared (driver unloaded, device failed or renamed): check `dmesg` and `ibstat`",
        )
    return Finding(
        "counters.baseline",
        Severity.WARN,
        subject,
        "this port is not in the baseline: no deltas",
        hint="the adapter appeared (hot-plug, driver load) after the baseline was saved; save a new baseline",
    )


@CHECKS.check(
    "counters.ports",
    "no RDMA port at all (ibdiag.counters.reading.reading_findings): ok, nothing to judge",
)
def no_ports() -> Finding:
    return Finding(
        "counters.ports",
        Severity.OK,
        "node",
        "no RDMA port under /sys/class/infiniband: no counters to judge",
        value=0,
    )


def check_snapshot(
    sample: Sample,
    cfg: CountersConfig | None = None,
    ports: PortsConfig | None = None,
    *,
    peers: Sequence[Port] | None = None,
    port_health: bool = True,
    gpu_names: Sequence[str] = (),
) -> list[Finding]:
    """Findings of one reading: counts since the last reset, time unknown.

    ``peers``: the node's ports a selection's rates are judged against (default: the sample's);
    ``port_health`` False leaves ``port.*`` out, for a caller that judges the ports itself (verdict).
    """
    cfg = cfg or CountersConfig()
    ports = ports or PortsConfig()
    out = port_findings(sample, ports, peers, gpu_names) if port_health else []
    for p in _judged_ports(sample, ports):
        r = PortReading(p, cfg)
        out += [*errors(r), *xmit_wait(r), *roce_errors(r), *roce_congestion(r), *unavailable(p)]
    return out


def _no_baseline(d: PortDelta) -> bool:
    return (
        bool(d.deltas)
        and len(d.unknown) == len(d.deltas)
        and all(w == "no baseline" for w in d.unknown.values())
    )


def check_span(
    span: Span,
    cfg: CountersConfig | None = None,
    ports: PortsConfig | None = None,
    *,
    peers: Sequence[Port] | None = None,
    gpu_names: Sequence[str] = (),
) -> list[Finding]:
    """Findings of counting over time (``--interval``, ``--count``, ``--since``, ``--watch``), judged on
    the totals (port state and rate on the last reading)."""
    cfg = cfg or CountersConfig()
    ports = ports or PortsConfig()
    out = port_findings(span.last, ports, peers, gpu_names)
    dur = format_duration(span.interval_s)
    for p in _judged_ports(span.last, ports):
        d = span.total(p.key)
        if d is None:
            continue
        if _no_baseline(d):
            out += baseline(p.subject, gone=False)
        else:
            r = PortReading(p, cfg, d, dur)
            out += [
                *errors(r),
                *xmit_wait(r),
                *roce_errors(r),
                *roce_congestion(r),
                *throughput(p, d, cfg),
                *reset(p, d, dur),
            ]
        out += unavailable(p)
    for subject in span.missing:
        adapter, _, port = subject.partition(":")
        if not ports.ignored(adapter, int(port) if port.isdigit() else None):
            out += baseline(subject, gone=True)
    return out


@dataclass(frozen=True)
class Judging:
    """What every mode of ``ibdiag counters`` judges with: ``[counters]``, ``[ports]``, and the node's
    ports when only a selection (``--device``) is read."""

    cfg: CountersConfig = CountersConfig()
    ports: PortsConfig = PortsConfig()
    peers: tuple[Port, ...] | None = None
    """Every port of the node, for a selection's expected rates; None: the reading's own ports."""
    gpu_names: tuple[str, ...] = ()
    """The GPU-facing adapters, when ``[ports] expect_on`` is ``gpu`` (:meth:`with_gpu_facing`)."""

    @classmethod
    def from_config(cls, config: Any) -> Judging:
        """From a loaded :class:`ibdiag.config.Config`."""
        return cls(config.section("counters", CountersConfig), config.section("ports", PortsConfig))

    def with_expected_rate(self, rate_gbps: float | None) -> Judging:
        """``[ports] expected_rate_gbps`` replaced by ``--expect-rate``, when given."""
        return replace(self, ports=self.ports.with_expected_rate(rate_gbps))

    def with_expect_on(self, spec: str | None) -> Judging:
        """``[ports] expect_on`` replaced by ``--expect-on``, when given."""
        return replace(self, ports=self.ports.with_expect_on(spec))

    def with_gpu_facing(self, sysfs: SysfsRoot) -> Judging:
        """For ``expect_on = "gpu"``: the node's GPU-facing adapters (its topology discovered once)."""
        if self.ports.expect_set.kind is not SetKind.GPU:
            return self
        return replace(self, gpu_names=gpu_facing(discover(sysfs)))

    def with_node_peers(self, sysfs: SysfsRoot) -> Judging:
        """For a selection of ports: a slow port is still judged against every port of the node, as topo does."""
        return replace(self, peers=node_ports(sysfs))

    def snapshot(self, sample: Sample) -> list[Finding]:
        return check_snapshot(
            sample, self.cfg, self.ports, peers=self.peers, gpu_names=self.gpu_names
        )

    def span(self, span: Span) -> list[Finding]:
        return check_span(span, self.cfg, self.ports, peers=self.peers, gpu_names=self.gpu_names)
