"""One run with ``--history DIR``: read the window back, add this run's record, judge the ports' story."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ibdiag.counters.config import CountersConfig
from ibdiag.counters.model import PortCounters
from ibdiag.findings.model import Finding
from ibdiag.history.aer import AerStory, aer_stories
from ibdiag.history.analysis import port_stories
from ibdiag.history.checks import check_aer, check_history, when
from ibdiag.history.config import HistoryConfig
from ibdiag.history.devices import DeviceMap, device_map
from ibdiag.history.kernel_checks import check_kernel
from ibdiag.history.kernlog import KernelEvent, mark_reinits, match, parse_line
from ibdiag.history.kernsource import KernelText, read_kernel_log
from ibdiag.history.kerntime import Span, Window
from ibdiag.history.kerntime import window as window_lines
from ibdiag.history.model import PortStory, Record
from ibdiag.history.store import Loaded, read_records, write_record
from ibdiag.node.aer import AER_FILES, AerCounts, read_aer
from ibdiag.node.model import Port, Topology
from ibdiag.node.sysfs import SysfsRoot


@dataclass(frozen=True)
class HistoryResult:
    """What the history said in this run."""

    directory: str
    written: str
    stories: tuple[PortStory, ...]
    loaded: Loaded
    findings: tuple[Finding, ...]
    window_s: float
    aer: tuple[AerStory, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "directory": self.directory,
            "written": self.written,
            "window_s": self.window_s,
            "records": len(self.loaded.records) + 1,
            "skipped": list(self.loaded.skipped),
            "ports": [
                {
                    "adapter": s.adapter,
                    "port": s.port,
                    "flaps": s.flap_count,
                    "last_flap": None if s.last_flap_s is None else when(s.last_flap_s),
                    "last_flap_epoch_s": s.last_flap_s,
                    "events": [
                        {"at": when(f.at_s), "count": f.count, "how": f.how} for f in s.flaps
                    ],
                    "error_bursts": len(s.bursts),
                    "resets": s.resets,
                    "up_now": s.up_now,
                }
                for s in self.stories
            ],
            "aer": [
                {
                    "pci": a.device,
                    "increase": dict(a.increase),
                    "bits": dict(a.bits),
                    "last_increase": None if a.last_s is None else when(a.last_s),
                    "since_boot": None if a.now is None else {k: a.now.total(k) for k in AER_FILES},
                }
                for a in self.aer
            ],
        }


def topo_ports(ports: Sequence[Port]) -> tuple[PortCounters, ...]:
    """``topo``'s ports as records without counters (state and rate only)."""
    return tuple(PortCounters(p.adapter, p.port, p, None, None) for p in ports)


def path_aer(sysfs: SysfsRoot, topo: Topology | None) -> tuple[AerCounts, ...]:
    """The AER counts of every GPU, RDMA NIC and bridge above them (topo's map) that has them."""
    devices = device_map(topo)
    found = (read_aer(sysfs, address) for address in sorted(devices.by_pci))
    return tuple(a for a in found if a is not None)


def record_and_judge(
    directory: Path,
    record: Record,
    cfg: HistoryConfig,
    counters_cfg: CountersConfig | None = None,
    topo: Topology | None = None,
) -> HistoryResult:
    """Read the store's window, write ``record`` into it (pruning it), and judge every port and every
    device's AER counts (named by ``topo``'s GPU/NIC map)."""
    since = record.taken_at_s - cfg.window_s
    loaded = read_records(directory, host=record.host, since_s=since)
    written = write_record(directory, record, cfg)
    older = [r for r in loaded.records if r.taken_at_s < record.taken_at_s]
    loaded = Loaded(tuple(older), loaded.skipped)
    stories = port_stories([*older, record], since_s=since, counters_cfg=counters_cfg)
    findings = check_history(
        stories, loaded, cfg, now_s=record.taken_at_s, directory=str(directory)
    )
    aer = aer_stories([*older, record], since_s=since)
    findings += check_aer(aer, device_map(topo), cfg)
    return HistoryResult(
        str(directory), str(written), stories, loaded, tuple(findings), cfg.window_s, aer
    )


@dataclass(frozen=True)
class KernelReading:
    """What a kernel log said: the events judged (in the window, in log order) and what was read."""

    text: KernelText
    events: tuple[KernelEvent, ...]
    span: Span


def read_kernel_events(text: KernelText, window: Window) -> KernelReading:
    """The events of ``text`` over ``window`` (:func:`~ibdiag.history.kerntime.window`): every line is
    matched, re-initialisations marked over the whole log, then the window's events kept."""
    parsed = [ln for i, raw in enumerate(text.lines, 1) if (ln := parse_line(raw, i)) is not None]
    placed, span = window_lines(parsed, window, total_lines=len(text.lines))
    found = [ev for ln in placed if (ev := match(ln)) is not None]
    kept = tuple(ev for ev in mark_reinits(found) if ev.line.judged)
    return KernelReading(text, kept, span)


def judge_kernel_log(
    source: str,
    topo: Topology | None,
    cfg: HistoryConfig,
    *,
    now_s: float,
    window_s: float | None = None,
    since_s: float | None = None,
) -> tuple[list[Finding], dict[str, Any]]:
    """Read the kernel log ``source`` (kmsg, journal, auto or a file), match its events over the
    window, judge them per host and device of ``topo``; the findings and the JSON of what was read.

    The window is ``window_s`` (default ``[history] window_hours``) up to now for this node's live log,
    up to its own last line for a saved file; ``since_s`` (wall clock) narrows it further."""
    span_s = cfg.window_s if window_s is None else window_s
    live_since = now_s - span_s if since_s is None else max(now_s - span_s, since_s)
    text = read_kernel_log(source, since_s=live_since)
    window = Window(
        window_s=span_s,
        now_s=now_s if text.live else None,
        since_s=since_s,
        boot_epoch_s=text.boot_epoch_s,
        reference_s=now_s if text.live else text.modified_s,
    )
    reading = read_kernel_events(text, window)
    devices = device_map(topo)
    findings = check_kernel(text, reading.events, devices, cfg, reading.span, now_s=now_s)
    return findings, kernel_log_json(reading, devices)


def kernel_log_json(reading: KernelReading, devices: DeviceMap) -> dict[str, Any]:
    """The ``kernel_log`` part of the JSON: the source, the span read and judged, the events."""
    text = reading.text
    return {
        "source": text.source,
        "lines": len(text.lines),
        "problem": text.problem,
        "span": reading.span.to_json(),
        "events": [
            {
                "kind": e.kind,
                "at": e.when,
                "epoch_s": e.line.epoch_s,
                "uptime_s": e.line.uptime_s,
                "line": e.line.number or None,
                "host": e.host,
                "driver": e.driver,
                "pci": e.pci,
                "name": e.name,
                "device": _device(devices, e),
                "detail": e.detail,
            }
            for e in reading.events
        ],
    }


def _device(devices: DeviceMap, e: KernelEvent) -> str | None:
    dev = devices.find(e.pci, e.name)
    return None if dev is None else dev.subject
