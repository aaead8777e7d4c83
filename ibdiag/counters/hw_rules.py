"""The rules behind the hw_counters checks (``counters.roce_errors``, ``counters.roce_congestion``): the
driver counters judged by meaning (:mod:`ibdiag.counters.hw_spec`), for a snapshot and for a span,
with the share of packets where the port counts them. Built on :func:`ibdiag.counters.rules.combine`."""

from __future__ import annotations

from ibdiag.counters.config import CountersConfig
from ibdiag.counters.hw_spec import CONGESTION_HINT, HW_JUDGED, HwGroup, packet_counters
from ibdiag.counters.model import PortCounters, PortDelta
from ibdiag.counters.rules import SNAPSHOT_HINT, Item, combine
from ibdiag.counters.wording import count_text, pct
from ibdiag.findings.model import Finding, Severity

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
        Item(
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
        shares = _share_text(delta, packets)
        # (text, value, limit, unit) of a failing loss: by share of packets on a software device, else by rate
        fail: tuple[str, float, float, str] | None = None
        if by_share and packets and spec.group is HwGroup.LOSS:
            share, limit = 100.0 * delta / packets, cfg.software_loss_pct
            if share > limit:
                text = (
                    f"{n} +{delta}{shares} over the software-device limit of {limit:g}% of packets"
                )
                fail = (text, round(share, 4), limit, "%")
            warn_text = f"{n} +{delta}{shares}"
        else:
            peak, limit = d.peak_rates.get(key) or 0.0, cfg.rate_limit_per_s
            if spec.group is HwGroup.LOSS and peak > limit:
                text = f"{n} at {count_text(peak)}/s over the rate limit of {count_text(limit)}/s"
                fail = (text, round(peak, 3), limit, "/s")
            warn_text = f"{n} +{delta} ({count_text(d.rates.get(key))}/s){shares}"
        note = _GROUP_NOTE[spec.group]
        thr = cfg.roce_thresholds.get(n, 0)
        if fail is not None:
            text, value, limit, unit = fail
            items.append(
                Item(
                    Severity.FAIL,
                    text,
                    value=value,
                    limit=limit,
                    unit=unit,
                    hint=spec.hint,
                    note=note,
                )
            )
        elif delta > thr:
            items.append(
                Item(Severity.WARN, warn_text, value=delta, limit=thr, hint=spec.hint, note=note)
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
