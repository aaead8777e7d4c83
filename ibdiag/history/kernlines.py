"""Kernel log lines as nodes write them -> one :class:`LogLine` each: the message, the host that wrote
it and when; pure (no I/O).

The shapes read (one file may mix them, as concatenated logs do):

* ``/dev/kmsg`` records: ``6,1234,5678901234,-;message`` (level, sequence, microseconds since boot);
  dictionary lines after them (`` SUBSYSTEM=pci``) are skipped;
* ``dmesg``: ``[12345.678901] message`` (seconds since boot), ``dmesg -r`` (``<6>[...]``) and
  ``dmesg -x`` (``kern  :info  : [...]``);
* ``dmesg -T``: ``[Tue Feb 14 18:48:25 2023] message`` (local time, no zone);
  ``dmesg --time-format iso``: ``2023-02-14T18:48:25,123456+01:00 message``;
* syslog and ``/var/log/messages`` (rsyslog's default), ``journalctl -k`` (``-o short``) and
  ``-o short-precise``: ``Mar 27 15:37:34[.123456] host kernel: message`` — no year, local time; with
  a year before (``2024 Sep  6 12:52:00.664847 host INFO kernel: ...``, SONiC) or after
  (``Sun Apr 27 05:48:33 2025 kern.info kernel: ...``, OpenWrt's logread), a level word or a
  ``facility.level`` between host and tag; rsyslog keeps the kernel's ``[  22.3]`` after ``kernel:``;
* ``journalctl -o short-iso`` / ``short-iso-precise`` and rsyslog's RFC 3339 files:
  ``2026-12-02T08:00:03+0000 host kernel: message``;
* ``journalctl -o json`` (one object a line: ``MESSAGE``, ``__REALTIME_TIMESTAMP``, ``_HOSTNAME``,
  ``_SOURCE_MONOTONIC_TIMESTAMP``, ``_TRANSPORT``), ``MESSAGE`` as text or as a byte array;
* journal markers: ``-- Reboot --``, ``-- Boot 3f2a… --`` (a new boot), ``-- Logs begin at …, end at
  … --`` / ``-- Journal begins at …, ends at … --`` (the span: a date for the yearless lines);
* what people put around a line: ``> `` quotes, a line number (``1700[   22.316553] …``,
  ``1700: …``), text after the message (the event patterns are not anchored at the end).

A line is cut at :data:`MAX_LINE` characters (a JSON line at :data:`MAX_JSON_LINE`) before any
pattern sees it, and every pattern is anchored at its start with bounded repetitions: the cost of a
line is linear in its length (``tests/adversarial/test_kernel_log_patterns.py`` times them). Host
names are kept as written when they are plain names, escaped otherwise (:func:`safe_name`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone

from ibdiag.jsonread import JsonFieldError, loads
from ibdiag.text import safe_excerpt

#: Longest text line looked at (a kernel record is at most 1 KiB of text, LOG_LINE_MAX; a syslog
#: prefix adds tens of characters).
MAX_LINE = 4096
#: Longest ``journalctl -o json`` line looked at (an entry's fields are typically 1–3 KiB).
MAX_JSON_LINE = 65536

MONTHS = {
    m: i
    for i, m in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1
    )
}
_MON = r"(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_WDAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_HMS = r"(?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)(?:[.,](?P<frac>\d{1,9}))?"

_KMSG = re.compile(r"(\d{1,3}),(\d{1,20}),(\d{1,20}),[^;]{0,64};")
#: ``[  22.316553] `` with ``dmesg -r``'s ``<6>`` or ``dmesg -x``'s ``kern  :info  : `` before it.
_DMESG = re.compile(
    r"(?:<\d{1,3}>|[a-z]{2,8} {0,4}:[a-z]{2,8} {0,4}: )?\[ {0,20}(?P<up>\d{1,12}\.\d{1,9})\] ?"
)
_DMESG_T = re.compile(rf"\[{_WDAY} {_MON} {{1,2}}(?P<day>\d{{1,2}}) {_HMS} (?P<year>\d{{4}})\] ?")
_ISO = re.compile(
    r"(?P<date>\d{4}-\d\d-\d\d)[T ](?P<time>\d\d:\d\d:\d\d)(?:(?P<sep>[.,])(?P<frac>\d{1,9}))?"
    r"(?P<zone>Z|[+-]\d\d:?\d\d)? "
)
_BSD = re.compile(
    rf"(?:(?P<year1>\d{{4}}) )?(?:{_WDAY} )?{_MON} {{1,2}}(?P<day>\d{{1,2}}) {_HMS}"
    r"(?: (?P<year2>\d{4}))? "
)
#: What follows a syslog time: ``host``, a level (``INFO``, ``kern.info``), the tag (``kernel``,
#: ``systemd[1]``) and ``: ``.
_HEADER = re.compile(
    r"^(?:(?P<host>[^\s:\[\]]{1,255}) )?(?:(?P<level>[A-Z]{3,9}) )?"
    r"(?P<tag>[\w.@/-]{1,64}(?:\[\d{1,10}\])?): ?"
)
_FACILITY = re.compile(r"[a-z]{2,8}[0-7]?\.(?:emerg|alert|crit|err|warn|warning|notice|info|debug)")
#: What a person put in front of a line: ``> `` quotes, a line number (``1700[``, ``1700: ``).
_PREFIX = re.compile(r"(?:> ?){0,4}(?:\d{1,7}(?:[:|] ?| {1,4}|(?=[\[<])))?")
_JOURNAL_SPAN = re.compile(
    r"-- (?:Logs begin|Journal begins) at (?:\w{3} )?(?P<first>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)"
    r"(?: (?P<zone1>[A-Za-z]{1,5}|[+-]\d{4}))?, ends? at (?:\w{3} )?(?P<last>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)"
)
_NAME_OK = re.compile(r"[A-Za-z0-9][\w.@+-]{0,62}", re.ASCII)


def safe_name(raw: str) -> str:
    """A host, netdev or device name from a log as it can be shown: a plain name as written, anything
    else escaped and capped (``eth0\\x1b[2J``), so no log can put a terminal escape or a line break
    into a finding's subject, a JUnit file or a Prometheus label."""
    return raw if _NAME_OK.fullmatch(raw) else safe_excerpt(raw, 64)


@dataclass(frozen=True)
class LogLine:
    """One kernel message and when it was logged, as far as its line says."""

    message: str
    epoch_s: float | None = None
    """Wall clock: from the line (journal, ``dmesg -T``, a dated syslog line), its yearless time once a
    year is placed (:mod:`~ibdiag.history.kerntime`), or its time since boot and the boot's time."""
    uptime_s: float | None = None
    """Seconds since boot (kmsg, dmesg, the ``[  22.3]`` rsyslog keeps, the journal's monotonic time)."""
    host: str | None = None
    """The host that wrote it (syslog, journal); None where the shape has none (dmesg, kmsg)."""
    number: int = 0
    """Line number in the text (1-based; 0 when not known)."""
    clock: tuple[int, int, int, int, int, int] | None = None
    """A syslog time without a year: (month, day, hour, minute, second, microsecond)."""
    local: bool = False
    """The wall-clock time has no zone (syslog, ``dmesg -T``): it is read as UTC."""
    kernel: bool = True
    """False for another program's line (syslog tag not ``kernel``, journal transport not kernel)."""
    marker: str | None = None
    """``boot`` (``-- Reboot --``, ``Linux version …``), ``span`` (the journal's header: ``epoch_s``
    is its end), or None for a message."""
    judged: bool = True
    """In the window judged (:func:`~ibdiag.history.kerntime.window` sets it)."""


def _seconds(whole: str, frac: str | None) -> tuple[int, int]:
    micro = int((frac or "0")[:6].ljust(6, "0"))
    return int(whole), micro


def _utc(y: int, mo: int, d: int, h: int, mi: int, s: int, us: int) -> float | None:
    try:
        return datetime(y, mo, d, h, mi, s, us, tzinfo=timezone.utc).timestamp()
    except ValueError:  # 31 Feb, hour 25: not a time
        return None


def _iso_epoch(m: re.Match[str]) -> tuple[float | None, bool]:
    zone = m.group("zone")
    stamp = f"{m.group('date')}T{m.group('time')}"
    if m.group("frac"):
        stamp += "." + m.group("frac")[:6].ljust(6, "0")
    if zone is None:
        stamp += "+00:00"
    elif zone == "Z":
        stamp += "+00:00"
    else:
        stamp += zone if ":" in zone else f"{zone[:3]}:{zone[3:]}"
    try:
        return datetime.fromisoformat(stamp).timestamp(), zone is None
    except ValueError:
        return None, zone is None


@dataclass(frozen=True)
class _When:
    """The time a shape's prefix gave."""

    epoch_s: float | None = None
    clock: tuple[int, int, int, int, int, int] | None = None
    local: bool = False


def _message(
    rest: str, number: int, when: _When = _When(), host: str | None = None, kernel: bool = True
) -> LogLine:
    """A message after its shape's prefix: the kernel's own ``[  22.3]`` taken off (rsyslog keeps it)."""
    up = None
    m = _DMESG.match(rest)
    if m:
        up = float(m.group("up"))
        rest = rest[m.end() :]
    return LogLine(
        rest,
        epoch_s=when.epoch_s,
        uptime_s=up,
        host=host,
        number=number,
        clock=when.clock,
        local=when.local,
        kernel=kernel,
        marker="boot" if rest.startswith("Linux version ") else None,
    )


def _after_time(rest: str, number: int, when: _When) -> LogLine:
    """What follows a syslog or ISO time: ``host tag: message`` (or ``tag: message``)."""
    m = _HEADER.match(rest)
    if m is None:
        return _message(rest, number, when)
    host, level, tag = m.group("host"), m.group("level"), m.group("tag")
    if host is not None and level is None and _FACILITY.fullmatch(host):
        host = None  # OpenWrt's "kern.info kernel:": a facility.level, not a host
    name = tag.split("[", 1)[0]
    kernel = name == "kernel" or name.endswith("/kernel")
    return _message(
        rest[m.end() :], number, when, None if host is None else safe_name(host), kernel
    )


def _timed(text: str, number: int) -> LogLine | None:
    """The line in one of the timed shapes, or None."""
    m = _DMESG.match(text)
    if m:
        line = _message(text[m.end() :], number)
        return LogLine(
            line.message, uptime_s=float(m.group("up")), number=number, marker=line.marker
        )
    m = _DMESG_T.match(text)
    if m:
        sec, us = _seconds(m.group("s"), m.group("frac"))
        at = _utc(
            int(m.group("year")),
            MONTHS[m.group("mon")],
            int(m.group("day")),
            int(m.group("h")),
            int(m.group("mi")),
            sec,
            us,
        )
        return _message(text[m.end() :], number, _When(at, local=True))
    m = _ISO.match(text)
    if m:
        at, local = _iso_epoch(m)
        rest = text[m.end() :]
        if m.group("sep") == ",":  # dmesg --time-format iso: no host, no tag
            return _message(rest, number, _When(at, local=local))
        return _after_time(rest, number, _When(at, local=local))
    m = _BSD.match(text)
    if m:
        return _bsd(m, text[m.end() :], number)
    return None


def _bsd(m: re.Match[str], rest: str, number: int) -> LogLine:
    sec, us = _seconds(m.group("s"), m.group("frac"))
    mon, day, h, mi = (
        MONTHS[m.group("mon")],
        int(m.group("day")),
        int(m.group("h")),
        int(m.group("mi")),
    )
    year = m.group("year1") or m.group("year2")
    if year is not None:
        at = _utc(int(year), mon, day, h, mi, sec, us)
        return _after_time(rest, number, _When(at, local=True))
    return _after_time(rest, number, _When(clock=(mon, day, h, mi, sec, us), local=True))


def _journal_json(text: str, number: int) -> LogLine:
    """One ``journalctl -o json`` entry; an entry that is not JSON is a line without a time."""
    try:
        doc = loads(text[:MAX_JSON_LINE], max_depth=4, max_object_bytes=1 << 22)
    except JsonFieldError:
        return LogLine(text[:MAX_LINE], number=number)
    if not isinstance(doc, dict):
        return LogLine(text[:MAX_LINE], number=number)
    msg = doc.get("MESSAGE")
    if isinstance(msg, list) and all(isinstance(b, int) and 0 <= b < 256 for b in msg):
        msg = bytes(msg).decode("utf-8", "replace")  # journald stores non-UTF-8 text as bytes
    if not isinstance(msg, str):
        return LogLine("", number=number, kernel=False)
    epoch = _micro(doc.get("__REALTIME_TIMESTAMP"))
    uptime = _micro(doc.get("_SOURCE_MONOTONIC_TIMESTAMP"))
    host = doc.get("_HOSTNAME")
    kernel = doc.get("_TRANSPORT") == "kernel" or doc.get("SYSLOG_IDENTIFIER") == "kernel"
    return LogLine(
        msg[:MAX_LINE],
        epoch_s=epoch,
        uptime_s=uptime,
        host=safe_name(host) if isinstance(host, str) and host else None,
        number=number,
        kernel=kernel,
        marker="boot" if msg.startswith("Linux version ") else None,
    )


def _micro(value: object) -> float | None:
    """The journal's microsecond times are decimal strings."""
    if isinstance(value, str) and value.isdigit() and len(value) <= 20:
        return int(value) / 1e6
    return None


def _journal_marker(text: str, number: int) -> LogLine | None:
    if text.startswith(("-- Reboot --", "-- Boot ")):
        return LogLine(text, number=number, kernel=False, marker="boot")
    m = _JOURNAL_SPAN.match(text)
    if m:
        last = m.group("last")
        at = _utc(
            int(last[:4]),
            int(last[5:7]),
            int(last[8:10]),
            int(last[11:13]),
            int(last[14:16]),
            int(last[17:19]),
            0,
        )
        return LogLine(text, epoch_s=at, number=number, kernel=False, marker="span", local=True)
    return None


def parse_line(raw: str, number: int = 0) -> LogLine | None:
    """One line of any shape above; None for a kmsg dictionary line. A line of no known shape is a
    message without a time (a pasted message is still matched)."""
    if raw.startswith(" "):
        if raw.startswith((" SUBSYSTEM=", " DEVICE=")) or "=" in raw[:40]:
            return None  # /dev/kmsg dictionary (SUBSYSTEM=, DEVICE=)
    text = raw.rstrip("\r\n")
    if text.startswith("{"):
        return _journal_json(text, number)
    text = text[:MAX_LINE].lstrip("\ufeff")
    if not text.strip() or text.startswith("#"):
        return LogLine(text, number=number, kernel=False)  # a blank line, a comment around a paste
    if text.startswith("-- "):
        marker = _journal_marker(text, number)
        if marker is not None:
            return marker
    m = _KMSG.match(text)
    if m:
        rec = _message(text[m.end() :], number)
        return LogLine(
            rec.message, uptime_s=int(m.group(3)) / 1e6, number=number, marker=rec.marker
        )
    timed = _timed(text, number)
    if timed is not None:
        return timed
    p = _PREFIX.match(text)
    if p is not None and p.end() > 0:
        timed = _timed(text[p.end() :].lstrip(" "), number)
        if timed is not None:
            return timed
    return _message(text.strip(), number)


#: Every pattern applied to text from a log (``tests/adversarial`` times each on crafted long lines).
PATTERNS: tuple[re.Pattern[str], ...] = (
    _KMSG,
    _DMESG,
    _DMESG_T,
    _ISO,
    _BSD,
    _HEADER,
    _FACILITY,
    _PREFIX,
    _JOURNAL_SPAN,
    _NAME_OK,
)
