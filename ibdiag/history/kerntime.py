"""When a kernel log's lines were written, and which of them the window holds; pure (no I/O).

* **Years**: syslog and ``journalctl -k`` lines (``Mar 27 15:37:34 host kernel: …``) have none. Each
  gets the year that puts it at most a day after the next dated thing in the file after it (a
  ``dmesg -T`` or ISO line, the journal's ``-- … end at …`` header), else at most a day before the
  one before it, else at most a day after ``reference_s`` (a saved file's modification time; now for
  a live source). A file that crosses New Year keeps its order: December's lines go to the year
  before January's. A log of more than a year without any dated line is read as one year.
* **Times since boot** (kmsg, dmesg) become wall clock with the boot's time: the live node's
  (``boot_epoch_s``), or one the file itself gives (a syslog line that kept the kernel's
  ``[  22.3]``, a journal entry's monotonic time) for the same host.
* **The timeline**: wall clock when any line has one; else time since boot, where a time that goes
  back (a second boot in one ``dmesg`` file) starts a new boot and the earlier boots' lines cannot be
  placed against the last.
* **The window**: a live log is judged over ``[now - window, now]``; a saved one over its own last
  ``window`` (relative to its last line, so an old log is read as it was, not as "nothing in the last
  24 h"), narrowed by ``since_s`` (a wall-clock time). Lines before it are left out and counted;
  lines without a time are judged and counted (their age is unknown).

Zones: syslog and ``dmesg -T`` times have none; they are read as UTC, and the span says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

from ibdiag.history.kernlines import LogLine

DAY_S = 86400.0
WALL, UPTIME, NONE = "wall clock", "time since boot", "none"


@dataclass(frozen=True)
class Span:
    """What was read of a kernel log and which part of it was judged."""

    clock: str
    """``wall clock``, ``time since boot`` or ``none`` (no line had a time)."""
    lines: int
    """Lines read (markers and kmsg dictionary lines included)."""
    kernel_lines: int
    """Kernel messages among them (other programs' syslog lines left out)."""
    first_s: float | None = None
    last_s: float | None = None
    """Times of the first and last placed kernel line, on the timeline (epoch or seconds since boot)."""
    start_s: float | None = None
    end_s: float | None = None
    """The window judged, on the timeline: ``end_s`` is now (live) or the last line (a file)."""
    before_window: int = 0
    """Kernel lines earlier than ``start_s``: left out."""
    earlier_boot: int = 0
    """Kernel lines of an earlier boot of a time-since-boot log: left out (their time is unknown)."""
    unplaced: int = 0
    """Kernel lines without any time (a pasted message, a yearless line with no year to give it): judged."""
    judged: int = 0
    """Kernel lines in the window plus those without a time."""
    years_from: str | None = None
    """How yearless lines got their year: ``the log's own dates`` or ``the file's modification time``
    (a file) / ``the time of this run`` (live)."""
    local_time: bool = False
    """Some times had no zone (syslog, ``dmesg -T``) and were read as UTC."""
    live: bool = False
    hosts: tuple[str, ...] = ()
    since_ignored: bool = False
    """``since_s`` was given but the log has no dates (time since boot only)."""

    def to_json(self) -> dict[str, Any]:
        def at(t: float | None) -> str | float | None:
            return t if t is None or self.clock != WALL else iso(t)

        return {
            "clock": self.clock,
            "lines": self.lines,
            "kernel_lines": self.kernel_lines,
            "first": at(self.first_s),
            "last": at(self.last_s),
            "window_start": at(self.start_s),
            "window_end": at(self.end_s),
            "judged_lines": self.judged,
            "skipped_before_window": self.before_window,
            "skipped_earlier_boot": self.earlier_boot,
            "lines_without_time": self.unplaced,
            "years_from": self.years_from,
            "times_without_zone": self.local_time,
            "hosts": list(self.hosts),
        }


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _with_year(
    clock: tuple[int, int, int, int, int, int], ref_s: float, after: bool
) -> float | None:
    """The clock in the latest year that puts it at most a day after ``ref_s`` (``after``: the earliest
    year that puts it at most a day before it). 29 February looks up to four years away."""
    ref_year = datetime.fromtimestamp(ref_s, tz=timezone.utc).year
    years = range(ref_year - 1, ref_year + 5) if after else range(ref_year + 1, ref_year - 5, -1)
    for year in years:
        try:
            t = datetime(year, *clock, tzinfo=timezone.utc).timestamp()
        except ValueError:  # 29 February in a common year
            continue
        if (after and t >= ref_s - DAY_S) or (not after and t <= ref_s + DAY_S):
            return t
    return None


def place_years(
    lines: Sequence[LogLine], reference_s: float | None
) -> tuple[list[LogLine], str | None]:
    """Every yearless line with its wall-clock time (see the module); the lines and where years came from.

    The bound of a yearless line: the next dated line after it, else the journal header's end (``--
    Logs begin at …, end at … --``, wherever it stands), else the dated line before it (a lower
    bound), else ``reference_s``."""
    if not any(ln.clock is not None for ln in lines):
        return list(lines), None
    ends = [ln.epoch_s for ln in lines if ln.marker == "span" and ln.epoch_s is not None]
    ceiling = max(ends) if ends else None
    dated = [ln.epoch_s if ln.clock is None and ln.marker != "span" else None for ln in lines]
    nxt: list[float | None] = [None] * len(lines)
    upcoming: float | None = None
    for i in range(len(lines) - 1, -1, -1):
        nxt[i] = upcoming
        upcoming = dated[i] if dated[i] is not None else upcoming
    out: list[LogLine] = []
    prev: float | None = None
    used_file = used_own = False
    for i, ln in enumerate(lines):
        if ln.clock is None:
            prev = dated[i] if dated[i] is not None else prev
            out.append(ln)
            continue
        bound, after = nxt[i], False
        if bound is None and ceiling is not None:
            bound = ceiling
        if bound is None and prev is not None:
            bound, after = prev, True
        if bound is not None:
            used_own = True
        elif reference_s is not None:
            bound, used_file = reference_s, True
        t = None if bound is None else _with_year(ln.clock, bound, after=after)
        out.append(replace(ln, epoch_s=t) if t is not None else ln)
    source = "the log's own dates" if used_own else None
    if used_file:
        source = "the reference time" if source is None else source + " and the reference time"
    return out, source


def _boots(lines: Sequence[LogLine]) -> dict[str | None, float]:
    """Boot time per host, from lines that carry both a wall-clock time and a time since boot (the
    last such line of each host: a reboot moves it)."""
    out: dict[str | None, float] = {}
    for ln in lines:
        if ln.epoch_s is not None and ln.uptime_s is not None:
            out[ln.host] = ln.epoch_s - ln.uptime_s
    return out


def to_wall(lines: Sequence[LogLine], boot_epoch_s: float | None) -> list[LogLine]:
    """Lines with only a time since boot placed on the wall clock where a boot time is known."""
    boots = _boots(lines)
    out = []
    for ln in lines:
        if ln.epoch_s is None and ln.uptime_s is not None:
            boot = boot_epoch_s if boot_epoch_s is not None else boots.get(ln.host)
            if boot is not None:
                ln = replace(ln, epoch_s=boot + ln.uptime_s)
        out.append(ln)
    return out


def last_boot_start(lines: Sequence[LogLine]) -> int:
    """Index of the first line of the last boot in a time-since-boot log (a time that goes back by more
    than a second, or a ``-- Reboot --``/``Linux version`` marker, starts a boot)."""
    start, last = 0, None
    for i, ln in enumerate(lines):
        if ln.marker == "boot":
            start, last = i, None
            continue
        if ln.uptime_s is None:
            continue
        if last is not None and ln.uptime_s < last - 1.0:
            start = i
        last = ln.uptime_s
    return start


@dataclass(frozen=True)
class Window:
    """How a kernel log is judged: over the last ``window_s`` before ``now_s`` (a live log) or before
    its own last line (a saved one), and not before ``since_s`` (wall clock) when given."""

    window_s: float
    now_s: float | None = None
    """Set for a live source (kmsg, the journal): the window ends now."""
    since_s: float | None = None
    boot_epoch_s: float | None = None
    """This node's boot time (kmsg): places times since boot."""
    reference_s: float | None = None
    """The latest a yearless line can be: a saved file's modification time, now for a live source."""


def _count(lines: Sequence[LogLine]) -> tuple[int, tuple[str, ...], bool]:
    kern = [ln for ln in lines if ln.kernel and ln.marker is None]
    hosts = tuple(sorted({ln.host for ln in kern if ln.host is not None}))
    return len(kern), hosts, any(ln.local for ln in kern if ln.epoch_s is not None)


def _judge_wall(lines: list[LogLine], w: Window) -> tuple[list[LogLine], dict[str, Any]]:
    times = [
        ln.epoch_s for ln in lines if ln.kernel and ln.marker is None and ln.epoch_s is not None
    ]
    first, last = min(times), max(times)
    end = w.now_s if w.now_s is not None else last
    start = end - w.window_s
    if w.since_s is not None:
        start = max(start, w.since_s)
    out, before, unplaced = [], 0, 0
    for ln in lines:
        if ln.epoch_s is None:
            unplaced += ln.kernel and ln.marker is None
            out.append(ln)
            continue
        inside = ln.epoch_s >= start
        before += (not inside) and ln.kernel and ln.marker is None
        out.append(ln if inside else replace(ln, judged=False))
    return out, {
        "first_s": first,
        "last_s": last,
        "start_s": start,
        "end_s": end,
        "before_window": before,
        "unplaced": unplaced,
    }


def _judge_uptime(lines: list[LogLine], w: Window) -> tuple[list[LogLine], dict[str, Any]]:
    boot = last_boot_start(lines)
    times = [
        ln.uptime_s
        for ln in lines[boot:]
        if ln.kernel and ln.marker is None and ln.uptime_s is not None
    ]
    last = max(times) if times else None
    start = None if last is None else last - w.window_s
    out, before, unplaced, earlier = [], 0, 0, 0
    for i, ln in enumerate(lines):
        counted = ln.kernel and ln.marker is None
        if ln.uptime_s is None:
            unplaced += counted
            out.append(ln)
        elif i < boot:
            earlier += counted
            out.append(replace(ln, judged=False))
        elif start is not None and ln.uptime_s < start:
            before += counted
            out.append(replace(ln, judged=False))
        else:
            out.append(ln)
    return out, {
        "first_s": min(times) if times else None,
        "last_s": last,
        "start_s": start,
        "end_s": last,
        "before_window": before,
        "earlier_boot": earlier,
        "unplaced": unplaced,
    }


def window(
    raw: Sequence[LogLine], w: Window, *, total_lines: int | None = None
) -> tuple[list[LogLine], Span]:
    """``raw`` placed in time (years, boots) with ``judged`` set by the window, and what was read."""
    lines, years_from = place_years(raw, w.reference_s)
    if years_from is not None and w.reference_s is not None:
        years_from = years_from.replace(
            "the reference time",
            "the time of this run" if w.now_s is not None else "the file's modification time",
        )
    lines = to_wall(lines, w.boot_epoch_s)
    kernel_lines, hosts, local = _count(lines)
    counted = [ln for ln in lines if ln.kernel and ln.marker is None]
    if any(ln.epoch_s is not None for ln in counted):
        clock = WALL
        lines, found = _judge_wall(lines, w)
    elif any(ln.uptime_s is not None for ln in counted):
        clock = UPTIME
        lines, found = _judge_uptime(lines, w)
    else:
        clock, found = NONE, {"unplaced": kernel_lines}
    judged = sum(1 for ln in lines if ln.kernel and ln.marker is None and ln.judged)
    span = Span(
        clock=clock,
        lines=len(raw) if total_lines is None else total_lines,
        kernel_lines=kernel_lines,
        judged=judged,
        years_from=years_from,
        local_time=local,
        live=w.now_s is not None,
        hosts=hosts,
        since_ignored=w.since_s is not None and clock == UPTIME,
        **found,
    )
    return lines, span
