"""The kernel's words: kernel log text -> the events that matter to RDMA links; pure (no I/O).

Three line shapes are read (one log may mix them after concatenation):

* ``/dev/kmsg`` records: ``6,1234,5678901234,-;message`` (level, sequence, microseconds since boot),
  continuation lines (`` SUBSYSTEM=pci``) skipped;
* ``journalctl -k -o short-iso``: ``2026-12-03T10:05:01+0000 host kernel: message``;
* ``dmesg``: ``[12345.678901] message`` (seconds since boot).

The messages matched, with the driver code that prints them (Linux ``drivers/``):

* ``mlx5_core 0000:21:00.0 eth2: Link down`` / ``Link up``: mlx5e_update_carrier,
  net/ethernet/mellanox/mlx5/core/en_main.c (``netdev_info(priv->netdev, "Link down\\n")``)
* ``mlx5_core 0000:21:00.0: port_module:1107:(pid 0): Port module event[error]: module 0, Cable error,
  High Temperature`` and ``Port module event: module 0, Cable unplugged``: port_module,
  mlx5/core/events.c (``mlx5_core_err(... "Port module event[error]: module %u, %s, %s\\n" ...)``)
* ``mlx5_core 0000:21:00.0: mlx5_cmd_out_err:838:(pid 7): ACCESS_REG(0x805) op_mod(0x1) failed, status
  bad parameter(0x3), syndrome (0x6b1f), err(-22)``: mlx5_cmd_check/mlx5_cmd_out_err, mlx5/core/cmd.c
  (``"%s(0x%x) op_mod(0x%x) failed, status %s(0x%x), syndrome (0x%x)\\n"``)
* ``... 126.024 Gb/s available PCIe bandwidth, limited by 8.0 GT/s PCIe x16 link at 0000:20:01.0
  (capable of 252.048 Gb/s with 16.0 GT/s PCIe x16 link)``: __pcie_print_link_status, pci/pci.c
* ``pcieport 0000:20:01.0: PCIe Bus Error: severity=Correctable, type=Physical Layer, (Receiver ID)``
  (``Corrected``/``Uncorrected (Non-Fatal)`` before Linux 6.x): aer_print_error, pci/pcie/aer.c
* ``infiniband rxe0: set down`` / ``set active``: rxe_port_down/rxe_port_up, infiniband/sw/rxe/rxe_net.c
* ``bnxt_en 0000:41:00.0 ens1f0np0: NIC Link is Down`` (bnxt_re's netdev; bnxt.c bnxt_report_link),
  ``ice 0000:51:00.0 ens2f0: NIC Link is Down`` (irdma's netdev; ice_main.c ice_print_link_msg):
  irdma and bnxt_re print nothing of their own on a link change, their Ethernet driver does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone

from ibdiag.text import safe_excerpt

PCI = r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]"
_KMSG_RE = re.compile(r"^(\d+),(\d+),(\d+),[^;]*;(.*)$")
_DMESG_RE = re.compile(r"^\[\s*(\d+\.\d+)\]\s?(.*)$")
_ISO_RE = re.compile(
    r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:[+-]\d\d:?\d\d|Z)) \S+ kernel: (.*)$"
)
#: The ``func:line:(pid N): `` that mlx5_core_err/_warn put in front of a message.
_FUNC = r"(?:[\w.]+:\d+:\(pid \d+\): )?"

#: Longest line looked at (a kernel record is at most 1 KiB of text, LOG_LINE_MAX).
MAX_LINE = 4096

LINK_DOWN, LINK_UP, MODULE, PCIE_BW, AER, ACCESS_REG = (
    "link_down",
    "link_up",
    "module",
    "pcie_bandwidth",
    "aer",
    "access_reg",
)

_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "link",
        re.compile(
            rf"^(?P<driver>mlx5_core) (?P<pci>{PCI}) (?P<netdev>\S+): Link (?P<state>up|down)$"
        ),
    ),
    (
        "link",
        re.compile(
            rf"^(?P<driver>bnxt_en|ice) (?P<pci>{PCI}) (?P<netdev>\S+): NIC Link is (?P<state>[Uu]p|Down)\b"
        ),
    ),
    ("link", re.compile(r"^(?P<driver>infiniband) (?P<ibdev>\S+): set (?P<state>down|active)$")),
    (
        MODULE,
        re.compile(
            rf"^(?P<driver>mlx5_core) (?P<pci>{PCI}): {_FUNC}Port module event(?:\[error\])?: "
            r"module (?P<module>\d+), (?P<status>[^,]+)(?:, (?P<error>.+))?$"
        ),
    ),
    (
        ACCESS_REG,
        re.compile(
            rf"^(?P<driver>mlx5_core) (?P<pci>{PCI}): {_FUNC}ACCESS_REG\(0x805\) op_mod\(0x[0-9a-f]+\) failed, (?P<status>.*)$"
        ),
    ),
    (
        PCIE_BW,
        re.compile(
            rf"^(?P<driver>\S+) (?P<pci>{PCI}): (?P<avail>[\d.]+) Gb/s available PCIe bandwidth, limited by "
            rf"(?P<speed>\S+ GT/s PCIe) x(?P<width>\d+) link at (?P<at>{PCI}|<unknown>) "
            r"\(capable of (?P<cap>[\d.]+) Gb/s with (?P<cap_speed>\S+ GT/s PCIe) x(?P<cap_width>\d+) link\)"
        ),
    ),
    (
        AER,
        re.compile(
            rf"^(?P<driver>\S+) (?P<pci>{PCI}): (?:AER: )?PCIe Bus Error: severity=(?P<severity>[^,]+), type=(?P<type>[^,]+),"
        ),
    ),
)


@dataclass(frozen=True)
class LogLine:
    """One kernel message and when it was logged."""

    message: str
    epoch_s: float | None = None
    """Wall clock, when the line says it (journal) or the reader could convert it (kmsg on this node)."""
    uptime_s: float | None = None
    """Seconds since boot (kmsg, dmesg)."""


@dataclass(frozen=True)
class KernelEvent:
    """A matched message: what happened, to which device, when."""

    kind: str
    """``link_down``, ``link_up``, ``module``, ``pcie_bandwidth``, ``aer``, ``access_reg``."""
    driver: str
    pci: str | None
    """PCI address the message names (``0000:21:00.0``); None for rxe (an ib device name)."""
    name: str | None
    """netdev (``eth2``) or ib device (``rxe0``) the message names."""
    detail: str
    """The interesting part, as printed: ``Cable error, High Temperature``, ``severity=Correctable, ...``."""
    line: LogLine
    severe: bool = False
    """module: an error (not plugged/unplugged); aer: uncorrectable; link: never."""

    @property
    def when(self) -> str:
        if self.line.epoch_s is not None:
            return datetime.fromtimestamp(self.line.epoch_s, tz=timezone.utc).strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            )
        if self.line.uptime_s is not None:
            return f"{self.line.uptime_s:.1f} s after boot"
        return "time unknown"


def parse_line(raw: str) -> LogLine | None:
    """One line of any of the three shapes (or a bare message); None for a kmsg continuation line."""
    if raw.startswith(" "):
        return None  # /dev/kmsg dictionary (SUBSYSTEM=, DEVICE=)
    text = raw.rstrip("\n")[:MAX_LINE]
    m = _KMSG_RE.match(text)
    if m:
        return LogLine(m.group(4), uptime_s=int(m.group(3)) / 1e6)
    m = _ISO_RE.match(text)
    if m:
        stamp = m.group(1)
        if re.search(r"[+-]\d{4}$", stamp):
            stamp = stamp[:-2] + ":" + stamp[-2:]
        try:
            epoch = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
        except ValueError:
            epoch = None
        return LogLine(m.group(2), epoch_s=epoch)
    m = _DMESG_RE.match(text)
    if m:
        return LogLine(m.group(2), uptime_s=float(m.group(1)))
    return LogLine(text)


def match(line: LogLine) -> KernelEvent | None:
    """The event a message reports, or None."""
    msg = line.message
    for kind, pattern in _PATTERNS:
        m = pattern.match(msg)
        if not m:
            continue
        g = m.groupdict()
        pci, name = g.get("pci"), g.get("netdev") or g.get("ibdev")
        if kind == "link":
            down = g["state"].lower() == "down"
            return KernelEvent(
                LINK_DOWN if down else LINK_UP, g["driver"], pci, name, msg.split(": ", 1)[-1], line
            )
        if kind == MODULE:
            error = g.get("error")
            detail = g["status"] + (f", {error}" if error else "")
            return KernelEvent(
                MODULE,
                g["driver"],
                pci,
                None,
                f"module {g['module']}: {detail}",
                line,
                severe=bool(error),
            )
        if kind == AER:
            severe = not g["severity"].startswith("Correct")
            return KernelEvent(
                AER,
                g["driver"],
                pci,
                None,
                f"severity={g['severity']}, type={g['type']}",
                line,
                severe=severe,
            )
        if kind == PCIE_BW:
            detail = (
                f"{g['avail']} Gb/s available, limited by {g['speed']} x{g['width']} at {g['at']} "
                f"(capable of {g['cap']} Gb/s with {g['cap_speed']} x{g['cap_width']})"
            )
            return KernelEvent(PCIE_BW, g["driver"], pci, None, detail, line)
        return KernelEvent(ACCESS_REG, g["driver"], pci, None, safe_excerpt(g["status"], 120), line)
    return None


def events(
    lines: Iterable[str], *, since_s: float | None = None, boot_epoch_s: float | None = None
) -> Iterator[KernelEvent]:
    """The events of ``lines``; with ``since_s``, lines with a wall-clock time before it are left out
    (lines without one are kept: their age is unknown). ``boot_epoch_s`` (this node's own log) turns
    times since boot into wall clock."""
    for raw in lines:
        line = parse_line(raw)
        if line is None:
            continue
        if line.epoch_s is None and line.uptime_s is not None and boot_epoch_s is not None:
            line = LogLine(line.message, boot_epoch_s + line.uptime_s, line.uptime_s)
        if since_s is not None and line.epoch_s is not None and line.epoch_s < since_s:
            continue
        ev = match(line)
        if ev is not None:
            yield ev
