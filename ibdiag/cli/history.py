"""``--history DIR`` and ``--kernel-log SOURCE`` for ``counters`` and ``topo``: record this run's
reading and judge the ports' past; judge what the kernel logged."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

HistoryOption = Annotated[
    Path | None,
    typer.Option(
        "--history",
        metavar="DIR",
        help="Record this reading in the port history DIR (e.g. /var/lib/ibdiag/history) and judge flaps, "
        "recoveries and error bursts over [history] window_hours. Nothing is written without it.",
    ),
]
KernelLogOption = Annotated[
    str | None,
    typer.Option(
        "--kernel-log",
        metavar="SOURCE",
        help="Judge the kernel's own words about ports, cables, PCIe and AER: kmsg (/dev/kmsg, what is buffered), "
        "journal (journalctl -k), auto (kmsg, else the journal), or a saved dmesg/journalctl file.",
    ),
]


@dataclasses.dataclass(frozen=True)
class HistorySetup:
    directory: Path | None
    cfg: Any
    """:class:`~ibdiag.history.config.HistoryConfig`."""
    kernel_log: str | None = None


def history_setup(
    directory: Path | None,
    cfg_file: Any,
    *,
    watch: bool = False,
    kernel_log: str | None = None,
    root: Path = Path("/"),
) -> HistorySetup | None:
    """Checked before the run: the section of the config file, a writable store directory, and a
    kernel log that belongs to the node read (this node's live log only without ``--root``)."""
    if directory is None and kernel_log is None:
        return None
    from ibdiag.errors import UsageError
    from ibdiag.history.config import HistoryConfig
    from ibdiag.history.kernsource import KEYWORDS
    from ibdiag.history.store import check_store

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
    cfg = cfg_file.section("history", HistoryConfig)
    return HistorySetup(None if directory is None else check_store(directory), cfg, kernel_log)


def with_history(
    report: Any,
    setup: HistorySetup | None,
    record: Any,
    counters_cfg: Any = None,
    topo: Callable[[], Any] | None = None,
    sysfs: Any = None,
) -> tuple[Any, list[Any]]:
    """``report`` with the history's and the kernel log's findings and data added, and the history's
    metrics. ``topo`` gives the node's topology (the kernel log's device names, the AER counts);
    with ``sysfs`` (still open) the record gets the AER counts of the GPUs, NICs and bridges between them."""
    if setup is None:
        return report, []
    from ibdiag.history.run import judge_kernel_log, path_aer, record_and_judge
    from ibdiag.history.views import prom_metrics

    data = dict(report.data)
    findings = list(report.findings)
    metrics: list[Any] = []
    topology = functools.cache(topo) if topo else (lambda: None)
    if setup.directory is not None:
        if sysfs is not None:
            record = dataclasses.replace(record, aer=path_aer(sysfs, topology()))
        result = record_and_judge(setup.directory, record, setup.cfg, counters_cfg, topology())
        data["history"] = result.to_json()
        findings += result.findings
        metrics = prom_metrics(result)
    if setup.kernel_log is not None:
        kfindings, kdata = judge_kernel_log(
            setup.kernel_log, topology(), setup.cfg, now_s=record.taken_at_s
        )
        data["kernel_log"] = kdata
        findings += kfindings
    return dataclasses.replace(report, data=data, findings=tuple(findings)), metrics
