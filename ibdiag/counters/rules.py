"""The rules behind the counters checks (:mod:`ibdiag.counters.checks`), for a snapshot (counts since
the last reset, time unknown) and for a span (deltas over time). One finding per check and port: the
worst problem decides severity, value and hint; the message lists every problem.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ibdiag.counters.config import CountersConfig
from ibdiag.counters.delta import figures
from ibdiag.counters.model import PortCounters, PortDelta
from ibdiag.counters.spec import (
    CONGESTION_HINT,
    ERROR_COUNTERS,
    HINTS,
    HW_JUDGED,
    HwGroup,
    max_value,
    packet_counters,
    width_bits,
)
from ibdiag.counters.wording import count_text, pct
from ibdiag.findings.model import Finding, Severity

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


def combine(
    check: str,
    subject: str,
    items: Iterable[_Item],
    ok: str,
    *,
    prefix: str = "",
    sep: str = ", ",
    ok_value: Any = None,
    ok_unit: str | None = None,
) -> Finding:
    """One finding per check and port: the worst item decides severity, value and hint; the message lists every problem."""
    bad = sorted(
        (i for i in items if i.severity is not Severity.OK), key=lambda i: -i.severity.rank
    )
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
    return Finding(
        check,
        worst.severity,
        subject,
        message,
        value=worst.value,
        limit=worst.limit,
        unit=worst.unit,
        hint=worst.hint,
    )


def saturated_at(name: str, p: PortCounters) -> tuple[int, int]:
    bits = width_bits(name, data_bits=p.data_bits) or 64
    return max_value(bits), bits


# --- snapshot ----------------------------------------------------------------------------------------


def errors_snapshot(p: PortCounters, cfg: CountersConfig) -> Finding | None:
    counters = p.counters or {}
    # Only counters that have a value: N/A and unreadable ones are counters.unavailable's to report.
    present = [n for n in ERROR_COUNTERS if counters.get(n) is not None and cfg.judged(n)]
    if p.port is None or not present:
        return None
    items = []
    for name in present:
        v = counters[name]
        if v is None:
            continue
        if name in p.saturated:
            top, bits = saturated_at(name, p)
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
            items.append(
                _Item(Severity.WARN, f"{name} {v}", value=v, hint=f"{HINTS[name]}; {SNAPSHOT_HINT}")
            )
    return combine(
        "counters.errors",
        p.subject,
        items,
        f"all {len(present)} error counters are 0 since the last reset",
        prefix="error counters since the last reset: ",
    )


def xmit_wait_snapshot(p: PortCounters, cfg: CountersConfig) -> Finding | None:
    counters = p.counters or {}
    if "port_xmit_wait" not in counters or not cfg.judged("port_xmit_wait"):
        return None
    v = counters["port_xmit_wait"]
    if v is None:
        return None
    if "port_xmit_wait" in p.saturated:
        return Finding(
            "counters.xmit_wait",
            Severity.WARN,
            p.subject,
            f"port_xmit_wait is saturated at {v} (32-bit): heavy backpressure since the last reset; no rate can be measured until the counters are reset",
            value=v,
            limit=v,
            unit="ticks",
            hint=f"{HINTS['port_xmit_wait']}; reset with `perfquery -C {p.adapter} -P {p.port} -R`, then `ibdiag counters --interval 10`",
        )
    return Finding(
        "counters.xmit_wait",
        Severity.OK,
        p.subject,
        f"port_xmit_wait = {v} ticks since the last reset (use --interval for a rate)",
        value=v,
        unit="ticks",
    )


_GROUP_NOTE = {
    HwGroup.LOSS: "retransmissions and sequence errors: packets were lost or reordered",
    HwGroup.HOST: "receiver not ready / out of buffers: the receiver had no buffer posted",
    HwGroup.CONGESTION: "ECN/CNP: congestion control acted",
}


def _software(p: PortCounters) -> bool:
    return p.info is not None and p.info.software


def _packet_keys(p: PortCounters) -> list[str]:
    """Flat keys of the port's packet counts (sent and received): the driver's hw_counters (rxe sent_pkts,
    bnxt_re/efa tx_pkts ...), else ``counters/port_xmit_packets`` and ``port_rcv_packets``."""
    tx, rx = packet_counters(p.hw_counters or {})
    keys = [p.hw_key(n) for n in (tx, rx) if n is not None]
    if not keys:
        keys = [n for n in ("port_xmit_packets", "port_rcv_packets") if n in (p.counters or {})]
    return keys


def _share_text(count: int, packets: int | None) -> str:
    """`` (0.69% of 124904 packets)``, or nothing when the packet count is unknown or zero."""
    if not packets:
        return ""
    return f" ({pct(100.0 * count / packets)} of {packets} packets)"


def _snapshot_packets(p: PortCounters) -> int | None:
    values = p.values()
    got = [values.get(k) for k in _packet_keys(p)]
    return sum(v for v in got if v is not None) if any(v is not None for v in got) else None


def _span_packets(p: PortCounters, d: PortDelta) -> int | None:
    got = [d.deltas.get(k) for k in _packet_keys(p)]
    return sum(v for v in got if v is not None) if any(v is not None for v in got) else None


def _roce_judged(
    p: PortCounters, cfg: CountersConfig, *, congestion: bool, with_value: bool
) -> list[str]:
    """The judged hw_counters this port has, of the congestion group or of the others."""
    hw = p.hw_counters or {}
    return [
        n
        for n in HW_JUDGED
        if n in hw
        and cfg.judged(n)
        and (hw[n] is not None or not with_value)
        and (HW_JUDGED[n].group is HwGroup.CONGESTION) == congestion
    ]


def roce_errors_snapshot(p: PortCounters, cfg: CountersConfig) -> Finding | None:
    hw = p.hw_counters or {}
    errs = _roce_judged(p, cfg, congestion=False, with_value=True)
    if not errs:
        return None
    packets = _snapshot_packets(p)
    items = [
        _Item(
            Severity.WARN,
            f"{n} {hw[n]}{_share_text(hw[n] or 0, packets)}",
            value=hw[n],
            hint=f"{HW_JUDGED[n].hint}; {SNAPSHOT_HINT}",
            note=_GROUP_NOTE[HW_JUDGED[n].group],
        )
        for n in errs
        if (hw[n] or 0) > 0
    ]
    return combine(
        "counters.roce_errors",
        p.subject,
        items,
        "no transport retransmission, sequence or receive-buffer errors since the last reset",
        prefix="since the last reset: ",
    )


def roce_congestion_snapshot(p: PortCounters, cfg: CountersConfig) -> Finding | None:
    hw = p.hw_counters or {}
    cong = _roce_judged(p, cfg, congestion=True, with_value=True)
    if not cong:
        return None
    active = [n for n in cong if (hw[n] or 0) > 0]
    if active:
        text = "congestion control has acted since the last reset: " + ", ".join(
            f"{n} = {hw[n]}" for n in active
        )
        return Finding(
            "counters.roce_congestion",
            Severity.OK,
            p.subject,
            text + " (use --interval to see whether it is happening now)",
        )
    return Finding(
        "counters.roce_congestion",
        Severity.OK,
        p.subject,
        "no ECN marks or CNPs since the last reset",
    )


# --- interval, series, --since ---------------------------------------------------------------------------


def _increase(d: int, lower_bound: bool) -> str:
    return f"+{d}" + (" or more" if lower_bound else "")


def errors_span(p: PortCounters, d: PortDelta, cfg: CountersConfig, dur: str) -> Finding | None:
    counters = p.counters or {}
    present = [
        n
        for n in ERROR_COUNTERS
        if n in counters
        and cfg.judged(n)
        and (d.deltas.get(n) is not None or n in p.saturated or d.unknown.get(n) == "saturated")
    ]
    if not present:
        return None
    items = []
    for name in present:
        delta = d.deltas.get(name)
        if name in p.saturated or (delta is None and d.unknown.get(name) == "saturated"):
            # Saturated now (or throughout): whatever was counted before, the count is lost from here on.
            top, bits = saturated_at(name, p)
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
        per_s = f"{count_text(rate)}/s" + (
            f", peak {count_text(peak)}/s" if d.samples > 1 and peak > rate else ""
        )
        reset_note = "counters were reset during the interval: + N or more" if lower else None
        if thr is not None and delta > thr:
            items.append(
                _Item(
                    Severity.FAIL,
                    f"{name} {_increase(delta, lower)} ({per_s}) over the threshold of {thr} per interval",
                    value=delta,
                    limit=thr,
                    hint=HINTS[name],
                    note=reset_note,
                )
            )
        elif name in cfg.rate_limited and peak > cfg.rate_limit_per_s:
            items.append(
                _Item(
                    Severity.FAIL,
                    f"{name} at {count_text(peak)}/s over the rate limit of {count_text(cfg.rate_limit_per_s)}/s",
                    value=round(peak, 3),
                    limit=cfg.rate_limit_per_s,
                    unit="/s",
                    hint=HINTS[name],
                    note=reset_note,
                )
            )
        elif delta > 0:
            items.append(
                _Item(
                    Severity.WARN,
                    f"{name} {_increase(delta, lower)} ({per_s})",
                    value=delta,
                    limit=thr,
                    hint=HINTS[name],
                    note=reset_note,
                )
            )
    return combine(
        "counters.errors",
        p.subject,
        items,
        f"no error counter increased in {dur} ({len(present)} checked)",
        prefix=f"in {dur}: ",
        sep="; ",
        ok_value=0,
    )


def xmit_wait_span(p: PortCounters, d: PortDelta, cfg: CountersConfig, dur: str) -> Finding | None:
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
    share = (
        f"; est. {pct(fig.xmit_wait_est_pct)} of the time waiting for credits (assuming {count_text(cfg.xmit_wait_bytes_per_count)} B per count)"
        if fig.xmit_wait_est_pct is not None
        else ""
    )
    thr = cfg.thresholds.get("port_xmit_wait")
    if thr is not None and delta > thr:
        return Finding(
            "counters.xmit_wait",
            Severity.WARN,
            p.subject,
            f"port_xmit_wait {_increase(delta, 'port_xmit_wait' in d.resets)} ticks in {dur} ({count_text(fig.xmit_wait_per_s)}/s){share}, over the threshold of {thr} per interval",
            value=delta,
            limit=thr,
            unit="ticks",
            hint=HINTS["port_xmit_wait"],
        )
    return Finding(
        "counters.xmit_wait",
        Severity.OK,
        p.subject,
        f"port_xmit_wait +{delta} ticks in {dur}{share}",
        value=delta,
        limit=thr,
        unit="ticks",
    )


def _hw_deltas(p: PortCounters, d: PortDelta, names: list[str]) -> list[tuple[str, str, int]]:
    """``(name, flat key, delta)`` of the hw_counters among ``names`` whose delta is known."""
    out = []
    for n in names:
        key = p.hw_key(n)
        delta = d.deltas.get(key)
        if delta is not None:
            out.append((n, key, delta))
    return out


def roce_errors_span(
    p: PortCounters, d: PortDelta, cfg: CountersConfig, dur: str
) -> Finding | None:
    errs = _roce_judged(p, cfg, congestion=False, with_value=False)
    if not errs:
        return None
    items = []
    packets = _span_packets(p, d)
    # Software devices (rxe, siw) retransmit whenever the host is slow to run them: a clean ib_write_bw
    # on rxe counts retries and duplicate requests. Their loss is judged as a share of the packets.
    by_share = _software(p) and bool(packets)
    for n, key, delta in _hw_deltas(p, d, errs):
        spec = HW_JUDGED[n]
        peak = d.peak_rates.get(key) or 0.0
        thr = cfg.roce_thresholds.get(n, 0)
        share = 100.0 * delta / packets if packets else None
        if by_share and spec.group is HwGroup.LOSS:
            if share is not None and share > cfg.software_loss_pct:
                items.append(
                    _Item(
                        Severity.FAIL,
                        f"{n} +{delta}{_share_text(delta, packets)} over the software-device limit of {cfg.software_loss_pct:g}% of packets",
                        value=round(share, 4),
                        limit=cfg.software_loss_pct,
                        unit="%",
                        hint=spec.hint,
                        note=_GROUP_NOTE[spec.group],
                    )
                )
            elif delta > thr:
                items.append(
                    _Item(
                        Severity.WARN,
                        f"{n} +{delta}{_share_text(delta, packets)}",
                        value=delta,
                        limit=thr,
                        hint=spec.hint,
                        note=_GROUP_NOTE[spec.group],
                    )
                )
            continue
        if spec.group is HwGroup.LOSS and peak > cfg.rate_limit_per_s:
            items.append(
                _Item(
                    Severity.FAIL,
                    f"{n} at {count_text(peak)}/s over the rate limit of {count_text(cfg.rate_limit_per_s)}/s",
                    value=round(peak, 3),
                    limit=cfg.rate_limit_per_s,
                    unit="/s",
                    hint=spec.hint,
                    note=_GROUP_NOTE[spec.group],
                )
            )
        elif delta > thr:
            items.append(
                _Item(
                    Severity.WARN,
                    f"{n} +{delta} ({count_text(d.rates.get(key))}/s){_share_text(delta, packets)}",
                    value=delta,
                    limit=thr,
                    hint=spec.hint,
                    note=_GROUP_NOTE[spec.group],
                )
            )
    return combine(
        "counters.roce_errors",
        p.subject,
        items,
        f"no transport retransmission, sequence or receive-buffer errors in {dur}",
        prefix=f"in {dur}: ",
        sep="; ",
        ok_value=0,
    )


def roce_congestion_span(
    p: PortCounters, d: PortDelta, cfg: CountersConfig, dur: str
) -> Finding | None:
    cong = _roce_judged(p, cfg, congestion=True, with_value=False)
    if not cong:
        return None
    active = [
        (n, delta, d.rates.get(key))
        for n, key, delta in _hw_deltas(p, d, cong)
        if delta > cfg.roce_thresholds.get(n, 0)
    ]
    if not active:
        return Finding(
            "counters.roce_congestion",
            Severity.OK,
            p.subject,
            f"no ECN marks or CNPs in {dur}",
            value=0,
        )
    worst = max(active, key=lambda t: t[1])
    return Finding(
        "counters.roce_congestion",
        Severity.WARN,
        p.subject,
        f"congestion in {dur}: "
        + ", ".join(f"{n} {count_text(r)}/s" for n, _, r in active)
        + " (ECN/CNP: switches queued this traffic and DCQCN slowed the sender)",
        value=worst[1],
        limit=cfg.roce_thresholds.get(worst[0], 0),
        hint=CONGESTION_HINT,
    )
