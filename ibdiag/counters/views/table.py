"""``-o table`` (and ``--watch``): one row per port, the port's worst finding highlighted, and the
legend under the table. Rich renderables; the findings block is ``report.table``'s."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ibdiag.counters.config import CountersConfig
from ibdiag.counters.delta import figures
from ibdiag.counters.hw_spec import HW_JUDGED, HwGroup
from ibdiag.counters.model import PortCounters, PortDelta, Sample, Span
from ibdiag.counters.spec import ERROR_COUNTERS
from ibdiag.counters.wording import pct
from ibdiag.findings.model import Finding, Severity, worst
from ibdiag.output.table import COMPACT_BELOW_COLUMNS
from ibdiag.ports.config import PortsConfig
from ibdiag.units import format_bytes

#: Short names of the error counters for narrow terminals (the full sysfs names everywhere else).
ERR_SHORT = {
    "symbol_error": "symbol",
    "link_error_recovery": "link_recovery",
    "link_downed": "link_down",
    "port_rcv_errors": "rcv_err",
    "port_rcv_remote_physical_errors": "rcv_remote_phys",
    "port_rcv_switch_relay_errors": "rcv_switch_relay",
    "port_xmit_discards": "xmit_discard",
    "port_xmit_constraint_errors": "xmit_constraint",
    "port_rcv_constraint_errors": "rcv_constraint",
    "local_link_integrity_errors": "link_integrity",
    "excessive_buffer_overrun_errors": "buf_overrun",
    "VL15_dropped": "vl15_drop",
}
_STYLE = {Severity.OK: "green", Severity.WARN: "yellow", Severity.FAIL: "bold red"}


def _compact(v: float | None) -> str:
    """1234 -> ``1234``, 12345678 -> ``12.3M``, 4294967295 -> ``4.29G``, 5561.3 -> ``5561``, 0.25 -> ``0.25``."""
    if v is None:
        return "-"
    a = abs(v)
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M")):
        if a >= scale:
            return f"{v / scale:.3g}{suffix}"
    if v == int(v) or a >= 100:
        return f"{v:.0f}"
    return f"{v:.3g}"


def _gbps(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}" if v < 100 else f"{v:.0f}"


def _status_cell(f: Finding | None, ignored: bool, *, compact: bool = False) -> Any:
    """The port's worst finding: ``FAIL errors``, ``FAIL port_state`` (just ``FAIL`` on narrow terminals, where the findings follow)."""
    from rich.text import Text

    if ignored:
        return Text("ign.", style="dim")
    if f is None:
        return Text("-", style="dim")
    label = {Severity.OK: "OK", Severity.WARN: "WARN", Severity.FAIL: "FAIL"}[f.severity]
    text = Text(label, style=_STYLE[f.severity])
    if f.severity is not Severity.OK and not compact:
        text.append(" " + f.check.removeprefix("counters.").replace(".", "_"))
    return text


def _worst_by_subject(findings: Sequence[Finding]) -> dict[str, Finding]:
    out: dict[str, Finding] = {}
    for f in findings:
        cur = out.get(f.subject)
        if cur is None or f.severity.rank > cur.severity.rank:
            out[f.subject] = f
    return out


def _link_cell(p: PortCounters, *, compact: bool = False) -> Any:
    """``ACTIVE 400G IB`` in green, or ``DOWN/Polling 400G IB`` in red (``ibstat``'s State, Rate, Link layer)."""
    from rich.text import Text

    info = p.info
    if info is None:
        return "-"
    ok = info.active and info.link_up
    state = info.state if ok else f"{info.state or '?'}/{info.phys_state or '?'}"
    rate = "?" if info.rate_gbps is None else f"{info.rate_gbps:g}G"
    layer = {"InfiniBand": "IB", "Ethernet": "RoCE"}.get(
        info.link_layer or "", info.link_layer or "?"
    )
    text = Text(state or "?", style="green" if ok else "bold red")
    text.append(f" {rate}" if compact else f" {rate} {layer}")
    return text


def _cell_with_severity(parts: list[tuple[str, Severity]]) -> Any:
    from rich.text import Text

    if not parts:
        return Text("-", style="dim")
    text = Text()
    for i, (s, sev) in enumerate(parts):
        if i:
            text.append(", ")
        text.append(s, style=_STYLE[sev] if sev is not Severity.OK else "")
    return text


def _severity_of(findings: Sequence[Finding], check: str, subject: str) -> Severity:
    return worst(f.severity for f in findings if f.check == check and f.subject == subject)


def _table(
    title: str, columns: Sequence[tuple[str, bool]], *, compact: bool, names: Sequence[str] = ()
) -> Any:
    """A table of (name, right-aligned) columns; only the counter lists wrap, and the port column
    keeps the width of the longest of ``names``: rich never squeezes the names the rows go by."""
    from rich import box
    from rich.table import Table

    t = Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD if compact else box.HEAVY_HEAD,
        pad_edge=False,
    )
    for name, right in columns:
        wraps = name.startswith(("error", "RoCE", "counters"))
        name_width = max(map(len, names), default=0) if name == "port" else 0
        t.add_column(
            name,
            justify="right" if right else "left",
            no_wrap=not wraps,
            min_width=14 if wraps else (name_width or None),
            overflow="fold",
        )
    return t


def _err_name(name: str, compact: bool) -> str:
    return ERR_SHORT.get(name, name) if compact else name


def _bytes(v: int | None, saturated: bool) -> str:
    return ("≥" if saturated else "") + format_bytes(v)


_SNAPSHOT_COLUMNS = {
    True: [
        ("port", False),
        ("link", False),
        ("xmit_wait", True),
        ("status", False),
        ("counters", False),
    ],
    False: [
        ("port", False),
        ("link", False),
        ("tx", True),
        ("rx", True),
        ("xmit_wait", True),
        ("error counters", False),
        ("RoCE/transport", False),
        ("status", False),
    ],
}
"""The snapshot table's (name, right-aligned) columns, on a narrow terminal (True) or not."""

_INTERVAL_COLUMNS = {
    True: [
        ("port", False),
        ("link", False),
        ("Gb/s tx/rx", True),
        ("wait", True),
        ("status", False),
        ("counters (+, /s)", False),
    ],
    False: [
        ("port", False),
        ("link", False),
        ("Gb/s tx/rx", True),
        ("util", True),
        ("wait/s", True),
        ("est.wait", True),
        ("error counters (+)", False),
        ("RoCE/transport (/s)", False),
        ("status", False),
    ],
}
"""The interval table's (name, right-aligned) columns, on a narrow terminal (True) or not."""


def _snapshot_cells(
    p: PortCounters, findings: Sequence[Finding], compact: bool
) -> tuple[Any, Any, Any, Any, list[tuple[str, Severity]]]:
    """A port's tx, rx, xmit_wait and error counter cells since the last reset, and the error parts."""
    from rich.text import Text

    c = p.counters
    sat = p.saturated_keys()
    parts: list[tuple[str, Severity]] = []
    tx: Text | str
    rx: Text | str
    if c is None:
        tx = rx = wait = Text("-", style="dim")
        errs: Any = Text("no counters/", style="yellow")
        return tx, rx, wait, errs, parts
    tx = _bytes(p.xmit_bytes, "xmit_bytes" in sat)
    rx = _bytes(p.rcv_bytes, "rcv_bytes" in sat)
    w = c.get("port_xmit_wait")
    wait = Text(
        ("≥" if "port_xmit_wait" in sat else "") + _compact(w),
        style="yellow" if "port_xmit_wait" in sat else "",
    )
    sev = _severity_of(findings, "counters.errors", p.subject)
    parts = [
        (
            f"{_err_name(n, compact)}{'≥' if n in sat else '='}{c[n]}",
            Severity.FAIL if n in sat else sev,
        )
        for n in ERROR_COUNTERS
        if (c.get(n) or 0) > 0
    ]
    na = [n for n in ERROR_COUNTERS if n in p.unavailable]
    errs = _cell_with_severity(parts)
    if na and not parts:
        errs = Text(f"{len(na)} N/A", style="yellow")
    return tx, rx, wait, errs, parts


def snapshot_table(
    sample: Sample,
    findings: Sequence[Finding],
    cfg: CountersConfig,
    ports: PortsConfig,
    *,
    width: int | None = None,
) -> Any:

    compact = width is not None and width < COMPACT_BELOW_COLUMNS
    worst_of = _worst_by_subject(findings)
    title = "RDMA port counters since the last reset (perfquery -x)"
    names = [p.subject for p in sample.ports if p.port is not None]
    t = _table(title, _SNAPSHOT_COLUMNS[compact], compact=compact, names=names)
    for p in sample.ports:
        if p.port is None:
            continue
        c = p.counters
        tx, rx, wait, errs, parts = _snapshot_cells(p, findings, compact)
        hw = p.hw_counters or {}
        roce_parts = []
        for n in HW_JUDGED:
            v = hw.get(n)
            if v:
                sev = Severity.OK if HW_JUDGED[n].group is HwGroup.CONGESTION else Severity.WARN
                roce_parts.append((f"{HW_JUDGED[n].label}={_compact(v)}", sev))
        status = _status_cell(
            worst_of.get(p.subject), ports.ignored(p.adapter, p.port), compact=compact
        )
        if compact:
            merged = (
                _cell_with_severity(parts + roce_parts)
                if (parts or roce_parts or c is not None)
                else errs
            )
            t.add_row(p.subject, _link_cell(p, compact=True), wait, status, merged)
        else:
            t.add_row(
                p.subject,
                _link_cell(p),
                tx,
                rx,
                wait,
                errs,
                _cell_with_severity(roce_parts),
                status,
            )
    return t


def interval_table(
    sample: Sample,
    rate_deltas: Sequence[PortDelta],
    count_deltas: Sequence[PortDelta],
    findings: Sequence[Finding],
    cfg: CountersConfig,
    ports: PortsConfig,
    *,
    title: str,
    width: int | None = None,
) -> Any:
    """Rates from ``rate_deltas`` (the interval, or the last step under --watch); error increases from
    ``count_deltas`` (the whole span). Narrow terminals get merged columns."""
    from rich.text import Text

    compact = width is not None and width < COMPACT_BELOW_COLUMNS
    by_rate = {d.key: d for d in rate_deltas}
    by_count = {d.key: d for d in count_deltas}
    worst_of = _worst_by_subject(findings)
    names = [p.subject for p in sample.ports if p.port is not None]
    t = _table(title, _INTERVAL_COLUMNS[compact], compact=compact, names=names)
    for p in sample.ports:
        if p.port is None:
            continue
        dr = by_rate.get(p.key)
        dc = by_count.get(p.key)
        status = _status_cell(
            worst_of.get(p.subject), ports.ignored(p.adapter, p.port), compact=compact
        )
        link = _link_cell(p, compact=compact)
        if dr is None or dc is None or p.counters is None:
            note = (
                Text("no counters/", style="yellow")
                if p.counters is None
                else Text("no baseline", style="yellow")
            )
            t.add_row(p.subject, link, "-", "-", status, note) if compact else t.add_row(
                p.subject, link, "-", "-", "-", "-", note, "-", status
            )
            continue
        fig = figures(
            dr,
            p.info.rate_gbps if p.info else None,
            xmit_wait_bytes_per_count=cfg.xmit_wait_bytes_per_count,
        )
        unk = dr.unknown
        tx = "sat." if unk.get("xmit_bytes") == "saturated" else _gbps(fig.tx_gbps)
        rx = "sat." if unk.get("rcv_bytes") == "saturated" else _gbps(fig.rx_gbps)
        util = (
            "-"
            if fig.tx_util_pct is None or fig.rx_util_pct is None
            else f"{fig.tx_util_pct:.0f}/{fig.rx_util_pct:.0f}%"
        )
        wait_sat = unk.get("port_xmit_wait") == "saturated" or "port_xmit_wait" in p.saturated
        wait: Any = Text("sat.", style="yellow") if wait_sat else _compact(fig.xmit_wait_per_s)
        wait_sev = _severity_of(findings, "counters.xmit_wait", p.subject)
        est_text = pct(fig.xmit_wait_est_pct)
        est = Text(est_text, style=_STYLE[wait_sev] if wait_sev is not Severity.OK else "")
        parts = _error_increases(p, dc, findings, compact)
        roce = _hw_rates(p, dr, findings, compact)
        if compact:
            wait_cell = wait if wait_sat else Text(f"{est_text}", style=est.style)
            t.add_row(
                p.subject, link, f"{tx}/{rx}", wait_cell, status, _cell_with_severity(parts + roce)
            )
        else:
            t.add_row(
                p.subject,
                link,
                f"{tx}/{rx}",
                util,
                wait,
                est,
                _cell_with_severity(parts),
                _cell_with_severity(roce),
                status,
            )
    return t


def legend(
    sample: Sample,
    cfg: CountersConfig,
    *,
    interval: bool,
    width: int | None = None,
    span: Span | None = None,
) -> str:
    """Notes under a table: the xmit_wait estimate, saturation marks and the abbreviations it shows."""
    lines = []
    if interval:
        lines.append(
            f"est.wait = port_xmit_wait x {cfg.xmit_wait_bytes_per_count:g} B per count / (port rate x interval): an estimate "
            "(8 B per count is NVIDIA Quantum's tick; [counters] xmit_wait_bytes_per_count)."
        )
    if any(p.saturated for p in sample.ports):
        lines.append(
            "≥ / sat.: counter saturated at its maximum: the value is a lower bound and no delta is computed across it."
        )
    if span is not None:
        shown = [n for n in HW_JUDGED if any(d.rates.get(n) for d in span.totals)]
    else:
        shown = [n for n in HW_JUDGED if any((p.hw_counters or {}).get(n) for p in sample.ports)]
    if shown:
        lines.append(
            "RoCE/transport: " + ", ".join(f"{HW_JUDGED[n].label} = {n}" for n in shown) + "."
        )
    if width is not None and width < COMPACT_BELOW_COLUMNS:
        if span is not None:
            errs = [
                n
                for n in ERROR_COUNTERS
                if any(d.deltas.get(n) or d.unknown.get(n) == "saturated" for d in span.totals)
            ]
        else:
            errs = [
                n for n in ERROR_COUNTERS if any((p.counters or {}).get(n) for p in sample.ports)
            ]
        if errs:
            lines.append(
                "error counters: " + ", ".join(f"{ERR_SHORT[n]} = {n}" for n in errs) + "."
            )
    return "\n".join(lines)


def _error_increases(
    p: PortCounters, dc: PortDelta, findings: Sequence[Finding], compact: bool
) -> list[tuple[str, Severity]]:
    """The error counters that increased over the span (or saturated), with their severity."""
    err_sev = _severity_of(findings, "counters.errors", p.subject)
    parts = []
    for n in ERROR_COUNTERS:
        if n not in (p.counters or {}):
            continue
        v = dc.deltas.get(n)
        if n in p.saturated or dc.unknown.get(n) == "saturated":
            parts.append((f"{_err_name(n, compact)}=sat.", Severity.FAIL))
        elif v:
            parts.append((f"{_err_name(n, compact)}+{v}", err_sev))
    return parts


def _hw_rates(
    p: PortCounters, dr: PortDelta, findings: Sequence[Finding], compact: bool
) -> list[tuple[str, Severity]]:
    """The judged hw_counters' rates over the interval, with their check's severity."""
    roce_sev = _severity_of(findings, "counters.roce_errors", p.subject)
    cong_sev = _severity_of(findings, "counters.roce_congestion", p.subject)
    roce = []
    for n in HW_JUDGED:
        r = dr.rates.get(p.hw_key(n))
        if r:
            roce.append(
                (
                    f"{HW_JUDGED[n].label}={_compact(r)}/s"
                    if compact
                    else f"{HW_JUDGED[n].label}={_compact(r)}",
                    cong_sev if HW_JUDGED[n].group is HwGroup.CONGESTION else roce_sev,
                )
            )
    return roce
