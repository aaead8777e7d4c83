"""The rules behind the IBA counters checks (:mod:`ibdiag.counters.checks`; the driver hw_counters are
:mod:`ibdiag.counters.hw_rules`), for a snapshot (counts since the last reset, time unknown) and for a
span (deltas over time). One finding per check and port: the
worst problem decides severity, value and hint; the message lists every problem.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ibdiag.counters.config import CountersConfig
from ibdiag.counters.delta import figures
from ibdiag.counters.model import PortCounters, PortDelta
from ibdiag.counters.spec import ERROR_COUNTERS, HINTS, max_value, width_bits
from ibdiag.counters.wording import count_text, pct
from ibdiag.findings.model import Finding, Severity

SNAPSHOT_HINT = (
    "counts are since the last reset, time unknown: `ibdiag counters --interval 10` measures a rate, "
    "`ibdiag counters -o json > before.json` then `--since before.json` measures a job"
)


@dataclass(frozen=True)
class Item:
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
    items: Iterable[Item],
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
                Item(
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
                Item(Severity.WARN, f"{name} {v}", value=v, hint=f"{HINTS[name]}; {SNAPSHOT_HINT}")
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
            items.append(_saturated_item(name, delta, p))
            continue
        if delta is None:
            continue  # unavailable or no baseline: counters.unavailable / counters.baseline say so
        item = _increase_item(name, delta, d, cfg)
        if item is not None:
            items.append(item)
    return combine(
        "counters.errors",
        p.subject,
        items,
        f"no error counter increased in {dur} ({len(present)} checked)",
        prefix=f"in {dur}: ",
        sep="; ",
        ok_value=0,
    )


def _saturated_item(name: str, delta: int | None, p: PortCounters) -> Item:
    """Saturated now (or throughout): whatever was counted before, the count is lost from here on."""
    top, bits = saturated_at(name, p)
    before = f", +{delta} before it saturated" if delta else ""
    return Item(
        Severity.FAIL,
        f"{name} saturated at {top} ({bits}-bit){before}, no delta",
        value=(p.counters or {}).get(name),
        limit=top,
        hint=f"{HINTS[name]}. Reset the counters (`perfquery -C {p.adapter} -P {p.port} -R`) to measure again",
        note="a saturated counter means at least that many since the last reset",
    )


def _increase_item(name: str, delta: int, d: PortDelta, cfg: CountersConfig) -> Item | None:
    """An error counter's increase over the span: over its threshold or rate limit, or just non-zero."""
    lower = name in d.resets
    rate = d.rates.get(name) or 0.0
    peak = d.peak_rates.get(name) or 0.0
    thr = cfg.thresholds.get(name)
    per_s = f"{count_text(rate)}/s" + (
        f", peak {count_text(peak)}/s" if d.samples > 1 and peak > rate else ""
    )
    reset_note = "counters were reset during the interval: + N or more" if lower else None
    if thr is not None and delta > thr:
        return Item(
            Severity.FAIL,
            f"{name} {_increase(delta, lower)} ({per_s}) over the threshold of {thr} per interval",
            value=delta,
            limit=thr,
            hint=HINTS[name],
            note=reset_note,
        )
    if name in cfg.rate_limited and peak > cfg.rate_limit_per_s:
        return Item(
            Severity.FAIL,
            f"{name} at {count_text(peak)}/s over the rate limit of {count_text(cfg.rate_limit_per_s)}/s",
            value=round(peak, 3),
            limit=cfg.rate_limit_per_s,
            unit="/s",
            hint=HINTS[name],
            note=reset_note,
        )
    if delta > 0:
        return Item(
            Severity.WARN,
            f"{name} {_increase(delta, lower)} ({per_s})",
            value=delta,
            limit=thr,
            hint=HINTS[name],
            note=reset_note,
        )
    return None


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
