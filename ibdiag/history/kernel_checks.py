"""Kernel log events -> findings, each naming the host and the port or PCI device (joined to topo's
GPU/NIC map) and its time.

Check ids (one finding per check and subject):

* ``kernel.log``             what was read: the source, its span, the window judged, the lines left out
  and why: ok; nothing readable, nothing in the window, or no line in a known shape: warn
* ``kernel.link``            the driver logged link downs or re-initialisations (``Link up`` again without
  ``Link down``): ``[history] flaps_fail`` or more in the window fail, fewer warn; up again and quiet
  for ``recovery_hours``: ok (recovered)
* ``kernel.module``          port module (cable/transceiver) events: an error (high temperature, power
  budget exceeded, bad cable ...) fails, ``Cable unplugged``/``Cable disabled`` warns
* ``kernel.pcie_power``      ``Detected insufficient power on the PCIe slot``: warn
* ``kernel.firmware``        mlx5/mlx4 firmware health (health compromised, fatal error, firmware
  syndrome) and command timeouts: the device or a command lost fails; a command recovered warns
* ``kernel.pcie_bandwidth``  ``PCIe bandwidth ... limited by``: the device trained below its capability: warn
* ``kernel.aer``             ``PCIe Bus Error``: uncorrectable fails, correctable warns
* ``kernel.access_reg``      ``ACCESS_REG(0x805) ... failed`` at least ``access_reg_flood`` times: warn

Subjects: with one host in the log (or none named), the device as topo names it (``mlx5_0:1``,
``GPU0``, ``bridge 0000:41:00.0``) and the host in the message; with several hosts, ``host/device``
and no join to topo's map (it is one node's). Devices the map does not know are named as the log
names them, for network drivers only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ibdiag.findings.model import Finding, Severity
from ibdiag.findings.registry import CheckRegistry
from ibdiag.history.config import HistoryConfig
from ibdiag.history.devices import DeviceMap
from ibdiag.history.kernlog import (
    ACCESS_REG,
    AER,
    BOOT,
    FIRMWARE,
    LINK_DOWN,
    LINK_REINIT,
    LINK_UP,
    MODULE,
    PCIE_BW,
    PCIE_POWER,
    KernelEvent,
)
from ibdiag.history.kernsource import KernelText
from ibdiag.history.kerntime import NONE, UPTIME, WALL, Span, iso
from ibdiag.text import safe_excerpt
from ibdiag.units import format_duration

CHECKS = CheckRegistry("kernel")
#: Drivers whose messages are about RDMA/network devices even when topo does not know the device.
NETWORK_DRIVERS = frozenset({"mlx5_core", "mlx4_en", "mlx4_core", "bnxt_en", "ice", "infiniband"})


def _subject(ev: KernelEvent, devices: DeviceMap, several: bool) -> tuple[str, str] | None:
    """(subject, how the message names it: PCI address, the GPUs/NICs it serves, the host)."""
    dev = None if several else devices.find(ev.pci, ev.name)
    if dev is not None:
        subject, said = dev.subject, dev.said()
    elif ev.driver not in NETWORK_DRIVERS:
        return None  # an NVMe's AER or a sound card's link width is not this tool's business
    else:
        subject = ev.name or ev.pci or ev.driver
        said = f"{subject} ({ev.pci})" if ev.name and ev.pci else subject
    if ev.host is not None:
        said = f"{said} on {ev.host}"
        if several:
            subject = f"{ev.host}/{subject}"
    return subject, said


def _last(evs: Sequence[KernelEvent]) -> str:
    e = evs[-1]
    return f"last at {e.when}: {safe_excerpt(e.line.message, 200)}"


def _age(seconds: float) -> str:
    """``3 days``, ``5.2 h``: how long before this run a saved log ends."""
    return f"{seconds / 86400:.0f} days" if seconds >= 2 * 86400 else format_duration(seconds)


def _span_text(text: KernelText, span: Span, now_s: float | None) -> str:
    who = (
        f" of {', '.join(span.hosts[:4])}{' …' if len(span.hosts) > 4 else ''}"
        if span.hosts
        else ""
    )
    src = safe_excerpt(text.source, 200)
    said = f"{span.kernel_lines} kernel line(s){who} in {span.lines} line(s) read from {src}"
    if span.clock == WALL and span.first_s is not None and span.last_s is not None:
        said += f", {iso(span.first_s)} to {iso(span.last_s)}"
        if not span.live and now_s is not None and now_s - span.last_s > 3600:
            said += f" (it ends {_age(now_s - span.last_s)} before this run)"
    elif span.clock == UPTIME and span.first_s is not None and span.last_s is not None:
        said += f", {span.first_s:.1f} to {span.last_s:.1f} s after boot (no dates)"
    parts = []
    if span.clock != NONE and span.start_s is not None and span.end_s is not None:
        scope = "up to now" if span.live else "up to its last line"
        parts.append(f"judged {format_duration(span.end_s - span.start_s)} {scope}")
    if span.before_window:
        parts.append(f"{span.before_window} earlier line(s) left out")
    if span.earlier_boot:
        parts.append(
            f"{span.earlier_boot} line(s) of an earlier boot left out (their time is unknown)"
        )
    if span.unplaced:
        parts.append(f"{span.unplaced} line(s) without a time judged as they stand")
    if span.years_from:
        parts.append(f"years of syslog times from {span.years_from}")
    if span.local_time:
        parts.append("times without a zone read as UTC")
    if span.since_ignored:
        parts.append("the start time given was not applied: the log has no dates")
    return said + ("; " + "; ".join(parts) if parts else "")


@CHECKS.check(
    "kernel.log",
    "the kernel log read, its span and window: ok; nothing readable, nothing in the window, no known line shape: warn",
)
def log_source(text: KernelText, span: Span, n_events: int, now_s: float | None = None) -> Finding:
    if text.problem:
        return Finding(
            "kernel.log",
            Severity.WARN,
            "kernel log",
            f"no kernel log could be read: {safe_excerpt(text.problem, 300)}",
            hint="run as root (dmesg_restrict), or pass a saved log: --kernel-log FILE",
        )
    said = _span_text(text, span, now_s)
    if span.kernel_lines and not span.judged:
        return Finding(
            "kernel.log",
            Severity.WARN,
            "kernel log",
            f"nothing judged: every kernel line lies outside the window; {said}",
            value=0,
            hint="widen the window or give the log of the time in question",
        )
    if span.kernel_lines and span.clock == NONE:
        return Finding(
            "kernel.log",
            Severity.WARN,
            "kernel log",
            f"no line has a time in a shape ibdiag reads (dmesg, dmesg -T, syslog, journalctl -k): matched as bare messages; {said}",
            value=n_events,
            hint="give dmesg, dmesg -T, journalctl -k (short, short-iso, json) or /var/log/messages output",
        )
    return Finding(
        "kernel.log",
        Severity.OK,
        "kernel log",
        f"{said}; {n_events} event(s) about RDMA ports, NICs, GPUs and the bridges between them",
        value=n_events,
    )


def _t(ev: KernelEvent, clock: str) -> float | None:
    return ev.line.epoch_s if clock == WALL else ev.line.uptime_s


@CHECKS.check(
    "kernel.link",
    "link downs and re-initialisations logged by the driver: flaps_fail in the window fail, fewer warn, recovered ok",
)
def link(
    subject: str,
    evs: Sequence[KernelEvent],
    cfg: HistoryConfig,
    now_s: float | None,
    clock: str = WALL,
) -> Finding | None:
    downs = [e for e in evs if e.kind in (LINK_DOWN, LINK_REINIT)]
    if not downs:
        return None
    states = [e for e in evs if e.kind in (LINK_DOWN, LINK_UP, LINK_REINIT)]
    up_after = states[-1].kind != LINK_DOWN
    last_down = _t(downs[-1], clock)
    quiet = None if last_down is None or now_s is None else now_s - last_down
    n = len(downs)
    reinits = sum(1 for e in downs if e.kind == LINK_REINIT)
    said = [f"{n - reinits} link down(s)"] if n > reinits else []
    if reinits:
        said.append(f"{reinits} re-initialisation(s) (link up again without a link down)")
    what = " and ".join(said)
    if up_after and quiet is not None and quiet >= cfg.recovery_s:
        return Finding(
            "kernel.link",
            Severity.OK,
            subject,
            f"recovered: {what} logged, up again and quiet for {format_duration(quiet)}; {_last(downs)}",
            value=n,
        )
    severity = Severity.FAIL if n >= cfg.flaps_fail else Severity.WARN
    now = "up again" if up_after else "no link up logged since"
    return Finding(
        "kernel.link",
        severity,
        subject,
        f"the driver logged {what} ({now}); {_last(downs)}",
        value=n,
        limit=cfg.flaps_fail,
        hint="a link that goes down and up is a cable, transceiver or switch port problem: `mlxlink -d <dev> -m -c`, "
        "the switch port's log; one re-initialised without a link down was reset or brought down and up (a driver "
        "recovery, ifdown/ifup, a configuration change)",
    )


@CHECKS.check(
    "kernel.module",
    "port module events: an error (temperature, power budget, bad cable) fails, unplugged or disabled warns",
)
def module(subject: str, evs: Sequence[KernelEvent]) -> Finding | None:
    bad = [
        e
        for e in evs
        if e.kind == MODULE and (e.severe or "plugged" not in e.detail or "unplugged" in e.detail)
    ]
    if not bad:
        return None
    severe = [e for e in bad if e.severe]
    shown = severe or bad
    return Finding(
        "kernel.module",
        Severity.FAIL if severe else Severity.WARN,
        subject,
        f"{len(bad)} port module event(s): {shown[-1].detail}; {_last(shown)}",
        value=len(bad),
        hint="the cable or transceiver: reseat or replace it; `mlxlink -d <dev> -m` shows its temperature and power",
    )


@CHECKS.check("kernel.pcie_power", "the adapter detected insufficient power on its PCIe slot: warn")
def pcie_power(subject: str, evs: Sequence[KernelEvent]) -> Finding | None:
    hits = [e for e in evs if e.kind == PCIE_POWER]
    if not hits:
        return None
    return Finding(
        "kernel.pcie_power",
        Severity.WARN,
        subject,
        f"{hits[-1].detail} ({len(hits)} message(s)); {_last(hits)}",
        value=len(hits),
        hint="the slot advertises less power than the adapter needs (lspci -vv: SlotPowerLimit): the adapter may throttle "
        "or power its ports down; check the slot, riser and BIOS power settings (NVIDIA calls it benign on DGX Spark, "
        "where it is printed at every boot)",
    )


@CHECKS.check(
    "kernel.firmware",
    "firmware health and command timeouts: device lost, fatal error or a command leaked fails; recovered warns",
)
def firmware(subject: str, evs: Sequence[KernelEvent]) -> Finding | None:
    hits = [e for e in evs if e.kind == FIRMWARE]
    if not hits:
        return None
    severe = [e for e in hits if e.severe]
    shown = severe or hits
    return Finding(
        "kernel.firmware",
        Severity.FAIL if severe else Severity.WARN,
        subject,
        f"{len(hits)} firmware health or command timeout message(s) ({len(severe)} of a lost device or command): "
        f"{shown[-1].detail}; {_last(shown)}",
        value=len(hits),
        hint="the adapter's firmware stopped answering: collect `mlxconfig`/`mstdump` or a devlink health dump, then "
        "reset it (mlxfwreset, or a cold reboot); repeated, replace the adapter",
    )


@CHECKS.check(
    "kernel.pcie_bandwidth",
    "the kernel said the device's PCIe bandwidth is limited by a slower link: warn",
)
def pcie_bandwidth(subject: str, evs: Sequence[KernelEvent]) -> Finding | None:
    hits = [e for e in evs if e.kind == PCIE_BW]
    if not hits:
        return None
    return Finding(
        "kernel.pcie_bandwidth",
        Severity.WARN,
        subject,
        f"PCIe bandwidth {hits[-1].detail}; {_last(hits)}",
        value=len(hits),
        hint="the slot, riser or a bridge trained narrower or slower: check the seating and BIOS; `ibdiag topo` shows the trained link",
    )


@CHECKS.check("kernel.aer", "PCIe AER errors logged: uncorrectable fails, correctable warns")
def aer(subject: str, evs: Sequence[KernelEvent]) -> Finding | None:
    hits = [e for e in evs if e.kind == AER]
    if not hits:
        return None
    severe = [e for e in hits if e.severe]
    return Finding(
        "kernel.aer",
        Severity.FAIL if severe else Severity.WARN,
        subject,
        f"{len(hits)} PCIe bus error(s) logged ({len(severe)} uncorrectable); {_last(severe or hits)}",
        value=len(hits),
        hint="correctable errors precede a link's downtraining; uncorrectable ones reset devices: reseat, check the riser, the slot and the BIOS",
    )


@CHECKS.check("kernel.access_reg", "ACCESS_REG(0x805) failed at least access_reg_flood times: warn")
def access_reg(subject: str, evs: Sequence[KernelEvent], cfg: HistoryConfig) -> Finding | None:
    hits = [e for e in evs if e.kind == ACCESS_REG]
    if len(hits) < cfg.access_reg_flood:
        return None
    return Finding(
        "kernel.access_reg",
        Severity.WARN,
        subject,
        f"{len(hits)} failed ACCESS_REG firmware commands logged; {_last(hits)}",
        value=len(hits),
        limit=cfg.access_reg_flood,
        hint="a tool or daemon polls a register this firmware refuses (a monitoring agent, an old mstflint): the flood hides real messages; update or stop it",
    )


def check_kernel(
    text: KernelText,
    evs: Sequence[KernelEvent],
    devices: DeviceMap,
    cfg: HistoryConfig,
    span: Span,
    *,
    now_s: float | None = None,
) -> list[Finding]:
    """The source's finding, then per host and device: link, module, power, firmware, bandwidth, AER,
    ACCESS_REG. ``evs``: the events in the window, in log order; ``now_s``: this run's time."""
    several = len(span.hosts) > 1
    by_subject: dict[str, list[KernelEvent]] = {}
    said: dict[str, str] = {}
    for ev in evs:
        if ev.kind == BOOT:
            continue
        named = _subject(ev, devices, several)
        if named is not None:
            by_subject.setdefault(named[0], []).append(ev)
            said[named[0]] = named[1]
    out = list(log_source(text, span, sum(len(v) for v in by_subject.values()), now_s))
    end = span.end_s
    for subject, group in by_subject.items():
        found = [
            *link(subject, group, cfg, end, span.clock),
            *module(subject, group),
            *pcie_power(subject, group),
            *firmware(subject, group),
            *pcie_bandwidth(subject, group),
            *aer(subject, group),
            *access_reg(subject, group, cfg),
        ]
        where = said[subject]
        out += [
            f if where == subject else replace(f, message=f"{where}: {f.message}") for f in found
        ]
    return out
