"""Kernel log events -> findings, each naming the port or PCI device (joined to topo's GPU/NIC map)
and its time.

Check ids (one finding per check and subject):

* ``kernel.log``             the source read (``/dev/kmsg``, ``journalctl -k``, a file): ok; none readable: warn
* ``kernel.link``            the driver logged link downs: ``[history] flaps_fail`` or more in the window
  fail, fewer warn; up again and quiet for ``recovery_hours``: ok (recovered)
* ``kernel.module``          port module (cable/transceiver) events: an error (high temperature, power
  budget exceeded, bad cable ...) fails, ``Cable unplugged`` warns
* ``kernel.pcie_bandwidth``  ``PCIe bandwidth ... limited by``: the device trained below its capability: warn
* ``kernel.aer``             ``PCIe Bus Error``: uncorrectable fails, correctable warns
* ``kernel.access_reg``      ``ACCESS_REG(0x805) ... failed`` at least ``access_reg_flood`` times: warn
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ibdiag.findings.model import Finding, Severity
from ibdiag.findings.registry import CheckRegistry
from ibdiag.history.config import HistoryConfig
from ibdiag.history.devices import DeviceMap
from ibdiag.history.kernlog import ACCESS_REG, AER, LINK_DOWN, LINK_UP, MODULE, PCIE_BW, KernelEvent
from ibdiag.history.kernsource import KernelText
from ibdiag.text import safe_excerpt
from ibdiag.units import format_duration

CHECKS = CheckRegistry("kernel")
#: Drivers whose messages are about RDMA/network devices even when topo does not know the device.
NETWORK_DRIVERS = frozenset({"mlx5_core", "bnxt_en", "ice", "infiniband"})


def _subject(ev: KernelEvent, devices: DeviceMap) -> tuple[str, str] | None:
    """(subject, how the message names it: with its PCI address and the GPUs/NICs it serves)."""
    dev = devices.find(ev.pci, ev.name)
    if dev is not None:
        return dev.subject, dev.said()
    if ev.driver not in NETWORK_DRIVERS:
        return None  # an NVMe's AER or a sound card's link width is not this tool's business
    name = ev.name or ev.pci or ev.driver
    return name, name


def _last(evs: Sequence[KernelEvent]) -> str:
    e = evs[-1]
    return f"last at {e.when}: {safe_excerpt(e.line.message, 200)}"


@CHECKS.check("kernel.log", "the kernel log source that was read: ok; none readable: warn")
def log_source(text: KernelText, n_events: int) -> Finding:
    if text.problem:
        return Finding(
            "kernel.log",
            Severity.WARN,
            "kernel log",
            f"no kernel log could be read: {safe_excerpt(text.problem, 300)}",
            hint="run as root (dmesg_restrict), or pass a saved log: --kernel-log FILE",
        )
    return Finding(
        "kernel.log",
        Severity.OK,
        "kernel log",
        f"{len(text.lines)} line(s) read from {text.source}; {n_events} event(s) about RDMA ports, NICs, GPUs and the bridges between them",
        value=n_events,
    )


@CHECKS.check(
    "kernel.link",
    "link downs logged by the driver: flaps_fail in the window fail, fewer warn, recovered ok",
)
def link(
    subject: str, evs: Sequence[KernelEvent], cfg: HistoryConfig, now_s: float
) -> Finding | None:
    downs = [e for e in evs if e.kind == LINK_DOWN]
    if not downs:
        return None
    up_after = evs[-1].kind == LINK_UP
    last_down = downs[-1].line.epoch_s
    quiet = None if last_down is None else now_s - last_down
    n = len(downs)
    if up_after and quiet is not None and quiet >= cfg.recovery_s:
        return Finding(
            "kernel.link",
            Severity.OK,
            subject,
            f"recovered: {n} link down(s) logged, up again and quiet for {format_duration(quiet)}; {_last(downs)}",
            value=n,
        )
    severity = Severity.FAIL if n >= cfg.flaps_fail else Severity.WARN
    now = "up again" if up_after else "no link up logged since"
    return Finding(
        "kernel.link",
        severity,
        subject,
        f"the driver logged {n} link down(s) ({now}); {_last(downs)}",
        value=n,
        limit=cfg.flaps_fail,
        hint="a link that goes down and up is a cable, transceiver or switch port problem: `mlxlink -d <dev> -m -c`, the switch port's log",
    )


@CHECKS.check(
    "kernel.module",
    "port module events: an error (temperature, power budget, bad cable) fails, unplugged warns",
)
def module(subject: str, evs: Sequence[KernelEvent]) -> Finding | None:
    bad = [e for e in evs if e.kind == MODULE and (e.severe or "unplugged" in e.detail)]
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
    *,
    now_s: float,
) -> list[Finding]:
    """The source's finding, then per device: link, module, bandwidth, AER, ACCESS_REG."""
    by_subject: dict[str, list[KernelEvent]] = {}
    said: dict[str, str] = {}
    for ev in evs:
        named = _subject(ev, devices)
        if named is not None:
            by_subject.setdefault(named[0], []).append(ev)
            said[named[0]] = named[1]
    out = list(log_source(text, sum(len(v) for v in by_subject.values())))
    for subject, group in by_subject.items():
        found = [
            *link(subject, group, cfg, now_s),
            *module(subject, group),
            *pcie_bandwidth(subject, group),
            *aer(subject, group),
            *access_reg(subject, group, cfg),
        ]
        where = said[subject]
        out += [
            f if where == subject else replace(f, message=f"{where}: {f.message}") for f in found
        ]
    return out
