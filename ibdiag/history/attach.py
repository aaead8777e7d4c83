"""What ``--history DIR`` and ``--kernel-log SOURCE`` add to a reading of ``topo`` or ``counters``.

:func:`setup` checks the options before the run (the store directory, a kernel log that belongs to the
node read); :func:`topo_addition` and :func:`counters_addition` make the hook each command applies to
its reading while the tree is still open (the record's AER counts are read from it). The command
packages sit below this one: they take the hook as a plain function of their reading
(:data:`ibdiag.topo.command.TopoExtra`, :data:`ibdiag.counters.command.CountersExtra`).

``topo`` and ``counters`` import this module on every run: the history's and the kernel log's
judging (analysis, AER, kernel log parsing) is imported where the hooks use it, so it loads only
when ``--history`` or ``--kernel-log`` is given (their start-up).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ibdiag.config import Config
from ibdiag.errors import UsageError
from ibdiag.findings.model import Finding
from ibdiag.history.config import HistoryConfig
from ibdiag.history.kernsource import KEYWORDS
from ibdiag.history.model import Record
from ibdiag.history.store import check_store
from ibdiag.node.discover import discover
from ibdiag.node.model import Topology
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.output.outputs import Addition
from ibdiag.output.prom import Metric
from ibdiag.units import parse_hours, parse_utc_time

if TYPE_CHECKING:  # the readings, for the hooks' signatures (each command loads its own)
    from ibdiag.counters.command import CountersReading
    from ibdiag.counters.config import CountersConfig
    from ibdiag.topo.command import TopoReading

#: Longest ``--kernel-log-window``: a year and a day (a saved log's whole span is rarely longer).
MAX_KERNEL_WINDOW_S = 366 * 86400.0


@dataclass(frozen=True)
class HistorySetup:
    directory: Path | None
    cfg: HistoryConfig
    kernel_log: str | None = None
    kernel_window_s: float | None = None
    """``--kernel-log-window``: the span judged (default ``[history] window_hours``)."""
    kernel_since_s: float | None = None
    """``--kernel-log-since``: lines before this Unix time are left out."""


def setup(
    directory: Path | None,
    config: Config,
    *,
    watch: bool = False,
    kernel_log: str | None = None,
    kernel_window: str | None = None,
    kernel_since: str | None = None,
    root: Path = Path("/"),
) -> HistorySetup | None:
    """Checked before the run: the section of the config file, a writable store directory, a kernel
    log that belongs to the node read (this node's live log only without ``--root``) and the span of
    it to judge."""
    if kernel_log is None and (kernel_window is not None or kernel_since is not None):
        raise UsageError(
            "--kernel-log-window and --kernel-log-since narrow the kernel log read with --kernel-log",
            hint="add --kernel-log SOURCE (kmsg, journal, auto or a saved log)",
        )
    if directory is None and kernel_log is None:
        return None
    if kernel_log in KEYWORDS and Path(root) != Path("/"):
        raise UsageError(
            f"--kernel-log {kernel_log} reads this node's live kernel log, not the one of --root {root}",
            hint="pass the log saved with the tree: --kernel-log FILE (dmesg or journalctl -k -o short-iso)",
        )
    if watch:
        raise UsageError(
            "--history and --kernel-log judge one reading; they cannot be combined with --watch",
            hint="run it from cron or a timer",
        )
    cfg = config.section("history", HistoryConfig)
    window_s = (
        None
        if kernel_window is None
        else parse_hours(kernel_window, what="--kernel-log-window", maximum_s=MAX_KERNEL_WINDOW_S)
    )
    since_s = (
        None if kernel_since is None else parse_utc_time(kernel_since, what="--kernel-log-since")
    )
    store = None if directory is None else check_store(directory)
    return HistorySetup(store, cfg, kernel_log, window_s, since_s)


def topo_addition(hist: HistorySetup) -> Callable[[TopoReading], Addition]:
    """The hook ``topo`` applies to its reading: a record of every port's state and rate, no counters."""

    def add(reading: TopoReading) -> Addition:
        from ibdiag.history.run import topo_ports  # lazy: start-up (module docstring)

        ports = [p for a in reading.topology.adapters for p in a.ports]
        record = Record(time.time(), reading.host, "topo", topo_ports(ports))
        return _addition(hist, record, reading.sysfs, lambda: reading.topology, None)

    return add


def counters_addition(hist: HistorySetup) -> Callable[[CountersReading], Addition]:
    """The hook ``counters`` applies to its reading (the sample's ports, counters included); the node's
    topology is discovered only when the history or the kernel log needs its device names."""

    def add(reading: CountersReading) -> Addition:
        sample = reading.sample
        record = Record(sample.taken_at_s, reading.host, "counters", sample.ports)
        return _addition(
            hist, record, reading.sysfs, lambda: discover(reading.sysfs), reading.counters_cfg
        )

    return add


def _addition(
    hist: HistorySetup,
    record: Record,
    sysfs: SysfsRoot,
    topology: Callable[[], Topology | None],
    counters_cfg: CountersConfig | None,
) -> Addition:
    # lazy: start-up (module docstring)
    from ibdiag.history.run import judge_kernel_log, path_aer, record_and_judge
    from ibdiag.history.views import prom_metrics  # lazy: start-up, as above

    topo = functools.cache(topology)
    data: dict[str, object] = {}
    findings: list[Finding] = []
    metrics: list[Metric] = []
    if hist.directory is not None:
        record = replace(record, aer=path_aer(sysfs, topo()))
        result = record_and_judge(hist.directory, record, hist.cfg, counters_cfg, topo())
        data["history"] = result.to_json()
        findings += result.findings
        metrics = prom_metrics(result)
    if hist.kernel_log is not None:
        kfindings, kdata = judge_kernel_log(
            hist.kernel_log,
            topo(),
            hist.cfg,
            now_s=record.taken_at_s,
            window_s=hist.kernel_window_s,
            since_s=hist.kernel_since_s,
        )
        data["kernel_log"] = kdata
        findings += kfindings
    return Addition(data=data, findings=tuple(findings), metrics=tuple(metrics))
