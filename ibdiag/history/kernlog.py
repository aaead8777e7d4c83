"""The kernel's words: kernel messages -> the events that matter to RDMA links; pure (no I/O).

Lines are read by :mod:`~ibdiag.history.kernlines` (every shape nodes write) and placed in time by
:mod:`~ibdiag.history.kerntime`; this module matches the messages. Each pattern is anchored at the
start of the message with bounded repetitions and none at the end (text after a message, a note a
person added, is allowed). The messages, with the driver code that prints them (Linux ``drivers/``):

* ``mlx5_core 0000:21:00.0 eth2: Link down`` / ``Link up``: mlx5e_update_carrier,
  net/ethernet/mellanox/mlx5/core/en_main.c. It prints on a carrier change and when the interface is
  opened, not when it is closed: ``Link up`` again without ``Link down`` is the port re-initialised
  (the interface reset or brought down and up), a ``link_reinit`` event (the first ``Link up`` of a
  boot is not one);
* ``mlx4_en: eth1: Link Up`` / ``Link Down``: mlx4_en_linkstate (mellanox/mlx4/en_netdev.c, en_print);
* ``bnxt_en 0000:41:00.0 ens1f0np0: NIC Link is Down`` (bnxt_re's netdev; broadcom/bnxt/bnxt.c
  bnxt_report_link), ``ice 0000:51:00.0 ens2f0: NIC Link is Down`` (irdma's netdev; intel/ice/ice_main.c
  ice_print_link_msg): irdma and bnxt_re print nothing of their own on a link change;
* ``infiniband rxe0: set down`` / ``set active``: rxe_port_down/rxe_port_up, infiniband/sw/rxe/rxe_net.c;
* ``Port module event: module 0, Cable unplugged`` / ``Port module event[error]: module 0, Cable error,
  High Temperature``: port_module, mlx5/core/events.c (statuses plugged, unplugged, disabled; errors
  power budget exceeded, long range for non-Mellanox cable, bus stuck, no EEPROM, enforce part number
  list, unknown identifier, high temperature, bad or shorted cable, ports powered down for
  insufficient PCIe slot power);
* ``Detected insufficient power on the PCIe slot (27W).``: mlx5_pcie_event, mlx5/core/events.c
  (``PCIe slot power capability was not advertised`` and ``… advertised sufficient power`` are not
  events);
* mlx5 firmware health, mlx5/core/health.c: ``device's health compromised - reached miss count``,
  ``Fatal error 1 detected``, ``Health issue observed, firmware internal error, severity(2) CRITICAL:``,
  ``synd 0x1: firmware internal error``, ``health recovery failed``; command timeouts, mlx5/core/cmd.c:
  ``ENABLE_HCA(0x104) timeout. Will cause a leak of a command resource``, ``cmd[3]: … No done
  completion``, ``… canceled on out of queue timeout``; mlx4 (mellanox/mlx4/catas.c, cmd.c):
  ``Internal error detected``, ``command 0x23 timed out (go bit not cleared)``;
* ``ACCESS_REG(0x805) op_mod(0x1) failed, status bad parameter(0x3), syndrome (0x6b1f), err(-22)``:
  mlx5_cmd_out_err, mlx5/core/cmd.c (other commands failing — an application's ``RTR2RTS_QP`` — are
  that application's business, not an event);
* ``126.024 Gb/s available PCIe bandwidth, limited by 8.0 GT/s PCIe x16 link at 0000:20:01.0
  (capable of 252.048 Gb/s with 16.0 GT/s PCIe x16 link)``: __pcie_print_link_status, pci/pci.c;
* ``PCIe Bus Error: severity=Correctable, type=Physical Layer, (Receiver ID)`` (``Corrected`` before
  Linux 6.x): aer_print_error, pci/pcie/aer.c.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone

from ibdiag.history.kernlines import MAX_LINE, LogLine, parse_line, safe_name
from ibdiag.history.kerntime import to_wall
from ibdiag.text import safe_excerpt

__all__ = ["MAX_LINE", "KernelEvent", "LogLine", "events", "mark_reinits", "match", "parse_line"]

PCI = r"(?:[0-9a-f]{4}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]"
#: The ``func:line:(pid N): `` that mlx5_core_err/_warn put in front of a message.
_FUNC = r"(?:[\w.]{1,64}:\d{1,6}:\(pid \d{1,10}\): ?)?"
_NETDEV = r"(?P<netdev>[^\s:]{1,32})"

LINK_DOWN, LINK_UP, LINK_REINIT, MODULE, PCIE_BW, AER, ACCESS_REG = (
    "link_down",
    "link_up",
    "link_reinit",
    "module",
    "pcie_bandwidth",
    "aer",
    "access_reg",
)
FIRMWARE, PCIE_POWER, BOOT = "firmware", "pcie_power", "boot"

_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "link",
        re.compile(rf"(?P<driver>mlx5_core) (?P<pci>{PCI}) {_NETDEV}: Link (?P<state>up|down)\b"),
    ),
    (
        "link",
        re.compile(
            rf"(?P<driver>mlx4_en): (?:(?P<pci>{PCI}): Port \d{{1,2}}: |{_NETDEV}: )Link (?P<state>Up|Down)\b"
        ),
    ),
    (
        "link",
        re.compile(
            rf"(?P<driver>bnxt_en|ice) (?P<pci>{PCI}) {_NETDEV}: NIC Link is (?P<state>[Uu]p|Down)\b"
        ),
    ),
    (
        "link",
        re.compile(r"(?P<driver>infiniband) (?P<ibdev>[^\s:]{1,32}): set (?P<state>down|active)\b"),
    ),
    (
        MODULE,
        re.compile(
            rf"(?P<driver>mlx5_core) (?P<pci>{PCI}): {_FUNC}Port module event(?P<err>\[error\])?: "
            r"module (?P<module>\d{1,3}), (?P<status>[^,]{1,80})(?:, (?P<error>.{1,200}))?"
        ),
    ),
    (
        PCIE_POWER,
        re.compile(
            rf"(?P<driver>mlx5_core) (?P<pci>{PCI}): {_FUNC}Detected insufficient power on the PCIe slot"
            r" \((?P<watts>\d{1,4})W\)"
        ),
    ),
    (
        FIRMWARE,
        re.compile(
            rf"(?P<driver>mlx5_core) (?P<pci>{PCI}): {_FUNC}(?:cmd\[\d{{1,3}}\]: )?"
            r"(?P<text>device's health compromised|Fatal error \d{1,3} detected|"
            r"Health issue observed, [^,]{1,80}, severity\(\d{1,2}\) (?P<level>[A-Z]{1,12})|"
            r"synd 0x[0-9a-f]{1,4}: [^\n]{1,80}|health recovery failed|"
            r"[A-Z0-9_]{2,40}\(0x[0-9a-f]{1,4}\) (?:Async, )?(?:timeout\. Will cause a leak|"
            r"No done completion|canceled on out of queue timeout|recovered after timeout))"
        ),
    ),
    (
        FIRMWARE,
        re.compile(
            rf"(?P<driver>mlx4_core) (?P<pci>{PCI}): (?P<text>Internal error detected|"
            r"command 0x[0-9a-f]{1,4} timed out \(go bit not cleared\))"
        ),
    ),
    (
        ACCESS_REG,
        re.compile(
            rf"(?P<driver>mlx5_core) (?P<pci>{PCI}): {_FUNC}ACCESS_REG\(0x805\) op_mod\(0x[0-9a-f]{{1,4}}\) failed, "
            r"(?P<status>.{0,200})"
        ),
    ),
    (
        PCIE_BW,
        re.compile(
            rf"(?P<driver>[\w-]{{1,32}}) (?P<pci>{PCI}): (?P<avail>[\d.]{{1,12}}) Gb/s available PCIe bandwidth, limited by "
            rf"(?P<speed>[\d.]{{1,8}} GT/s PCIe) x(?P<width>\d{{1,2}}) link at (?P<at>{PCI}|<unknown>) "
            r"\(capable of (?P<cap>[\d.]{1,12}) Gb/s with (?P<cap_speed>[\d.]{1,8} GT/s PCIe) x(?P<cap_width>\d{1,2}) link\)"
        ),
    ),
    (
        AER,
        re.compile(
            rf"(?P<driver>[\w-]{{1,32}}) (?P<pci>{PCI}): (?:AER: )?PCIe Bus Error: severity=(?P<severity>[^,]{{1,40}}), "
            r"type=(?P<type>[^,]{1,40}),"
        ),
    ),
)
#: Every pattern applied to text from a log (``tests/adversarial`` times each on crafted long lines).
PATTERNS: tuple[re.Pattern[str], ...] = tuple(p for _, p in _PATTERNS)
_LEVELS_SEVERE = frozenset({"EMERGENCY", "ALERT", "CRITICAL", "ERROR"})
#: A message no pattern can match lacks all of these (a substring test before eleven patterns).
_MARKS = ("mlx", "bnxt_en ", "ice ", "infiniband ", "PCIe ")


@dataclass(frozen=True)
class KernelEvent:
    """A matched message: what happened, to which device, on which host, when."""

    kind: str
    """``link_down``, ``link_up``, ``link_reinit``, ``module``, ``pcie_bandwidth``, ``pcie_power``,
    ``aer``, ``access_reg``, ``firmware`` or ``boot`` (a new boot: the link state starts again)."""
    driver: str
    pci: str | None
    """PCI address the message names (``0000:21:00.0``); None for rxe (an ib device name)."""
    name: str | None
    """netdev (``eth2``) or ib device (``rxe0``) the message names, escaped if it is not a plain name."""
    detail: str
    """The interesting part, escaped: ``Cable error, High Temperature``, ``severity=Correctable, ...``."""
    line: LogLine
    severe: bool = False
    """module: an error; aer: uncorrectable; firmware: the device or a command is lost; link: never."""

    @property
    def host(self) -> str | None:
        return self.line.host

    @property
    def when(self) -> str:
        ln = self.line
        if ln.epoch_s is not None:
            fmt = "%Y-%m-%dT%H:%M:%S" if ln.local else "%Y-%m-%dT%H:%M:%SZ"
            return datetime.fromtimestamp(ln.epoch_s, tz=timezone.utc).strftime(fmt)
        if ln.uptime_s is not None:
            return f"{ln.uptime_s:.1f} s after boot"
        return f"line {ln.number}, time unknown" if ln.number else "time unknown"


def _pci(raw: str | None) -> str | None:
    if raw is None:
        return None
    return raw if raw.count(":") == 2 else f"0000:{raw}"


def _event(kind: str, g: dict[str, str | None], line: LogLine) -> KernelEvent:
    """The event of one matched pattern's groups."""
    driver = str(g["driver"])
    pci = _pci(g.get("pci"))
    raw_name = g.get("netdev") or g.get("ibdev")
    name = None if raw_name is None else safe_name(raw_name)
    if kind == "link":
        down = str(g["state"]).lower() == "down"
        return KernelEvent(
            LINK_DOWN if down else LINK_UP,
            driver,
            pci,
            name,
            "link down" if down else "link up",
            line,
        )
    if kind == MODULE:
        error = g.get("error")
        status = safe_excerpt(str(g["status"]).strip(), 80)
        detail = status + (f", {safe_excerpt(error.strip(), 160)}" if error else "")
        severe = bool(g.get("err")) or bool(error)
        return KernelEvent(
            MODULE, driver, pci, None, f"module {g['module']}: {detail}", line, severe=severe
        )
    if kind == AER:
        severity = str(g["severity"])
        detail = f"severity={safe_excerpt(severity, 40)}, type={safe_excerpt(g['type'], 40)}"
        return KernelEvent(
            AER, driver, pci, None, detail, line, severe=not severity.startswith("Correct")
        )
    if kind == PCIE_BW:
        detail = (
            f"{g['avail']} Gb/s available, limited by {g['speed']} x{g['width']} at {g['at']} "
            f"(capable of {g['cap']} Gb/s with {g['cap_speed']} x{g['cap_width']})"
        )
        return KernelEvent(PCIE_BW, driver, pci, None, detail, line)
    if kind == PCIE_POWER:
        return KernelEvent(
            PCIE_POWER,
            driver,
            pci,
            None,
            f"insufficient power on the PCIe slot ({g['watts']} W)",
            line,
        )
    if kind == FIRMWARE:
        text = str(g["text"])
        level = g.get("level")
        severe = not (
            "No done completion" in text
            or "canceled" in text
            or "recovered" in text
            or (level is not None and level not in _LEVELS_SEVERE)
        )
        return KernelEvent(
            FIRMWARE, driver, pci, None, safe_excerpt(text, 160), line, severe=severe
        )
    return KernelEvent(ACCESS_REG, driver, pci, None, safe_excerpt(g["status"], 120), line)


def match(line: LogLine) -> KernelEvent | None:
    """The event a message reports, or None (also None for another program's syslog line)."""
    if line.marker == "boot":
        return KernelEvent(BOOT, "kernel", None, None, "boot", line)
    if not line.kernel:
        return None
    msg = line.message[:MAX_LINE]
    if not any(mark in msg for mark in _MARKS):
        return None
    for kind, pattern in _PATTERNS:
        m = pattern.match(msg)
        if m:
            return _event(kind, m.groupdict(), line)
    return None


#: A ``link_up`` this soon after the last one of its device is the same bring-up announced twice, not a
#: re-initialisation: rxe prints "set active" for NETDEV_UP and again for the NETDEV_CHANGE (carrier on)
#: that follows it within milliseconds (rxe_net.c rxe_notify, seen on the project's Soft-RoCE guests);
#: a real re-initialisation is a close and an open, seconds apart. Two seconds also covers a log with
#: whole-second times (``dmesg -T``, syslog).
SAME_BRING_UP_S = 2.0


def _seconds(ev: KernelEvent) -> float | None:
    line = ev.line
    return line.uptime_s if line.uptime_s is not None else line.epoch_s


def mark_reinits(evs: Sequence[KernelEvent]) -> list[KernelEvent]:
    """``evs`` (in log order) with every ``link_up`` that follows a ``link_up`` of the same device
    without a ``link_down`` between them (and no new boot of its host) made a ``link_reinit``, unless
    it came within :data:`SAME_BRING_UP_S` of that one (the same bring-up announced twice)."""
    up: dict[tuple[str | None, str, str | None, str | None], float | None | bool] = {}
    out: list[KernelEvent] = []
    for ev in evs:
        if ev.kind == BOOT:
            up = {k: v for k, v in up.items() if k[0] != ev.host}
            out.append(ev)
            continue
        key = (ev.host, ev.driver, ev.pci, ev.name)
        if ev.kind == LINK_DOWN:
            up[key] = False
        elif ev.kind == LINK_UP:
            at = _seconds(ev)
            if key in up and up[key] is not False:
                last = up[key]
                again = (
                    isinstance(last, float) and at is not None and 0 <= at - last < SAME_BRING_UP_S
                )
                if again:  # the same bring-up: kept as said, not a new time to measure from
                    out.append(ev)
                    continue
                ev = replace(
                    ev,
                    kind=LINK_REINIT,
                    detail="link up again without a link down (re-initialised)",
                )
            up[key] = at if at is not None else True
        out.append(ev)
    return out


def events(
    lines: Iterable[str], *, since_s: float | None = None, boot_epoch_s: float | None = None
) -> Iterator[KernelEvent]:
    """The events of text ``lines`` as they stand (no window; see :func:`~ibdiag.history.kerntime.window`
    for a log's span): with ``since_s``, events with a wall-clock time before it are left out; with
    ``boot_epoch_s``, times since boot are placed on the wall clock."""
    parsed = [ln for i, raw in enumerate(lines, 1) if (ln := parse_line(raw, i)) is not None]
    placed = to_wall(parsed, boot_epoch_s)
    found = [ev for ln in placed if (ev := match(ln)) is not None]
    for ev in mark_reinits(found):
        if ev.kind == BOOT:
            continue
        if since_s is not None and ev.line.epoch_s is not None and ev.line.epoch_s < since_s:
            continue
        yield ev
